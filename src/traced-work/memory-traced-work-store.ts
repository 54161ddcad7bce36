import {
  HeadDecision,
  PipelineEndSeen,
  pipelineRecordAfter,
  RaisedVersion,
  Remembered,
  RunnerJobEnd,
  StoryChapter,
  TracedJob,
  TracedPipeline,
  TracedWorkStore,
} from './traced-work';

interface Expiring<T> {
  readonly value: T;
  readonly expiresAt: number;
}

/** Single-process traced work: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryTracedWorkStore implements TracedWorkStore {
  private readonly tracedJobs = new Map<number, Expiring<TracedJob>>();
  private readonly tracedPipelines = new Map<number, Expiring<TracedPipeline>>();
  private readonly pipelineSpanVersions = new Map<number, Expiring<number>>();
  private readonly runnerJobEnds = new Map<number, Expiring<Map<number, RunnerJobEnd>>>();
  private readonly headDecisions = new Map<number, Expiring<HeadDecision>>();
  private readonly stories = new Map<number, Expiring<Map<string, string>>>();
  private readonly pipelineEnds = new Map<number, Expiring<PipelineEndSeen>>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of entries nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  /** The memory grant store's half of `saveGrant`: the traced job, kept until `expiresAt`. */
  rememberTracedJob(job: TracedJob, expiresAt: number): void {
    this.tracedJobs.set(job.jobId, { value: { ...job }, expiresAt });
  }

  /** The memory grant store's half of `withdrawGrant`. */
  forgetTracedJob(jobId: number): void {
    this.tracedJobs.delete(jobId);
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    const now = this.now();
    for (const { value: pipeline, ttlMs } of pipelines) {
      const kept = this.tracedPipelines.get(pipeline.pipelineId);
      const live = kept === undefined || kept.expiresAt <= now ? undefined : kept;
      const value = pipelineRecordAfter(live?.value ?? null, pipeline);
      if (value === null) continue;
      this.tracedPipelines.set(pipeline.pipelineId, { value: { ...value }, expiresAt: Math.max(now + ttlMs, live?.expiresAt ?? 0) });
    }
  }

  async findTracedJob(jobId: number): Promise<TracedJob | null> {
    return this.live(this.tracedJobs, jobId);
  }

  async findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    return this.live(this.tracedPipelines, pipelineId);
  }

  async pinHeadDecision(rootPipelineId: number, proposed: HeadDecision, ttlMs: number): Promise<HeadDecision> {
    const kept = this.live(this.headDecisions, rootPipelineId);
    if (kept !== null) return kept;
    this.headDecisions.set(rootPipelineId, { value: { ...proposed }, expiresAt: this.now() + ttlMs });
    return { ...proposed };
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<RaisedVersion> {
    const entry = this.pipelineSpanVersions.get(pipelineId);
    const kept = entry === undefined || entry.expiresAt <= this.now() ? 0 : entry.value;
    if (version > kept) this.pipelineSpanVersions.set(pipelineId, { value: version, expiresAt: this.now() + ttlMs });
    return { before: kept, highest: Math.max(kept, version) };
  }

  async highestPipelineSpanVersions(pipelineIds: readonly number[]): Promise<number[]> {
    return pipelineIds.map((pipelineId) => {
      const entry = this.pipelineSpanVersions.get(pipelineId);
      return entry === undefined || entry.expiresAt <= this.now() ? 0 : entry.value;
    });
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const now = this.now();
    const kept = this.runnerJobEnds.get(pipelineId);
    const ends = kept === undefined || kept.expiresAt <= now ? new Map<number, RunnerJobEnd>() : kept.value;
    ends.set(end.jobId, { ...end });
    this.runnerJobEnds.set(pipelineId, { value: ends, expiresAt: Math.max(now + ttlMs, kept?.expiresAt ?? 0) });
    return [...ends.values()].map((job) => ({ ...job }));
  }

  async recordTraceStory(rootPipelineId: number, chapters: readonly StoryChapter[], ttlMs: number): Promise<void> {
    if (chapters.length === 0) return;
    const now = this.now();
    const kept = this.stories.get(rootPipelineId);
    const story = kept === undefined || kept.expiresAt <= now ? new Map<string, string>() : kept.value;
    for (const { key, text } of chapters) story.set(key, text);
    this.stories.set(rootPipelineId, { value: story, expiresAt: Math.max(now + ttlMs, kept !== undefined && kept.expiresAt > now ? kept.expiresAt : 0) });
  }

  async traceStory(rootPipelineId: number): Promise<string[]> {
    const kept = this.stories.get(rootPipelineId);
    return kept === undefined || kept.expiresAt <= this.now() ? [] : [...kept.value.values()];
  }

  async recordPipelineEnd(pipelineId: number, ended: PipelineEndSeen, ttlMs: number): Promise<void> {
    const kept = this.live(this.pipelineEnds, pipelineId);
    if (kept !== null && kept.end.finishedAt > ended.end.finishedAt) return;
    // A copy, as Redis keeps one: the caller's objects are its own.
    this.pipelineEnds.set(pipelineId, { value: JSON.parse(JSON.stringify(ended)) as PipelineEndSeen, expiresAt: this.now() + ttlMs });
  }

  async pipelineEnd(pipelineId: number): Promise<PipelineEndSeen | null> {
    const kept = this.live(this.pipelineEnds, pipelineId);
    return kept === null ? null : (JSON.parse(JSON.stringify(kept)) as PipelineEndSeen);
  }

  close(): void {
    clearInterval(this.sweeper);
    this.tracedJobs.clear();
    this.tracedPipelines.clear();
    this.pipelineSpanVersions.clear();
    this.runnerJobEnds.clear();
    this.headDecisions.clear();
    this.stories.clear();
    this.pipelineEnds.clear();
  }

  private live<K, T>(entries: Map<K, Expiring<T>>, key: K): T | null {
    const entry = entries.get(key);
    if (entry === undefined) return null;
    if (entry.expiresAt <= this.now()) {
      entries.delete(key);
      return null;
    }
    return { ...entry.value };
  }

  private sweep(): void {
    const now = this.now();
    for (const entries of [
      this.tracedJobs,
      this.tracedPipelines,
      this.pipelineSpanVersions,
      this.runnerJobEnds,
      this.headDecisions,
      this.stories,
      this.pipelineEnds,
    ] as Array<Map<number, Expiring<unknown>>>) {
      for (const [key, entry] of entries) if (entry.expiresAt <= now) entries.delete(key);
    }
  }
}
