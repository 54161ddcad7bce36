import {
  ClaimedSpan,
  EnqueueOutcome,
  OutboxDepth,
  OutboxLimits,
  OutboxSpan,
  Remembered,
  RunnerJobEnd,
  TracedJob,
  TracedPipeline,
  TracedWorkStore,
} from './traced-work';

interface Expiring<T> {
  readonly value: T;
  readonly expiresAt: number;
}

/** Single-process traced work and outbox: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryTracedWorkStore implements TracedWorkStore {
  private readonly tracedJobs = new Map<number, Expiring<TracedJob>>();
  private readonly tracedPipelines = new Map<number, Expiring<TracedPipeline>>();
  private readonly pipelineSpanVersions = new Map<number, Expiring<number>>();
  private readonly runnerJobEnds = new Map<number, Expiring<Map<number, RunnerJobEnd>>>();
  /** Span ids ever enqueued, until they are forgotten. */
  private readonly rememberedSpans = new Map<string, number>();
  /** Waiting spans by id, with the time each is next due. */
  private readonly outbox = new Map<string, { span: OutboxSpan; dueAt: number; attempts: number }>();
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

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    const now = this.now();
    for (const { value: pipeline, ttlMs } of pipelines) {
      const kept = this.tracedPipelines.get(pipeline.pipelineId);
      this.tracedPipelines.set(pipeline.pipelineId, { value: { ...pipeline }, expiresAt: Math.max(now + ttlMs, kept?.expiresAt ?? 0) });
    }
  }

  async findTracedJob(jobId: number): Promise<TracedJob | null> {
    return this.live(this.tracedJobs, jobId);
  }

  async findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    return this.live(this.tracedPipelines, pipelineId);
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<number> {
    const entry = this.pipelineSpanVersions.get(pipelineId);
    const kept = entry === undefined || entry.expiresAt <= this.now() ? 0 : entry.value;
    if (version > kept) this.pipelineSpanVersions.set(pipelineId, { value: version, expiresAt: this.now() + ttlMs });
    return Math.max(kept, version);
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const now = this.now();
    const kept = this.runnerJobEnds.get(pipelineId);
    const ends = kept === undefined || kept.expiresAt <= now ? new Map<number, RunnerJobEnd>() : kept.value;
    ends.set(end.jobId, { ...end });
    this.runnerJobEnds.set(pipelineId, { value: ends, expiresAt: Math.max(now + ttlMs, kept?.expiresAt ?? 0) });
    return [...ends.values()].map((job) => ({ ...job }));
  }

  async enqueueSpans(spans: readonly OutboxSpan[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const now = this.now();
    let queued = 0;
    let duplicates = 0;
    let refused = 0;
    for (const span of spans) {
      if ((this.rememberedSpans.get(span.spanId) ?? 0) > now) duplicates++;
      else if (this.outbox.size >= limits.maxSpans) refused++;
      else {
        this.rememberedSpans.set(span.spanId, now + limits.rememberMs);
        this.outbox.set(span.spanId, { span, dueAt: now, attempts: 0 });
        queued++;
      }
    }
    return { queued, duplicates, refused };
  }

  async claimSpans(max: number, leaseMs: number): Promise<ClaimedSpan[]> {
    const now = this.now();
    const claimed: ClaimedSpan[] = [];
    for (const entry of this.outbox.values()) {
      if (claimed.length >= max) break;
      if (entry.dueAt > now) continue;
      entry.dueAt = now + leaseMs;
      claimed.push({ ...entry.span, attempts: entry.attempts });
    }
    return claimed;
  }

  async acknowledgeSpans(spanIds: readonly string[]): Promise<void> {
    for (const spanId of spanIds) this.outbox.delete(spanId);
  }

  async retrySpans(spanIds: readonly string[], delayMs: number): Promise<void> {
    const dueAt = this.now() + delayMs;
    for (const spanId of spanIds) {
      const entry = this.outbox.get(spanId);
      if (entry === undefined) continue;
      entry.dueAt = dueAt;
      entry.attempts++;
    }
  }

  async outboxDepth(): Promise<OutboxDepth> {
    let oldest: number | undefined;
    for (const { span } of this.outbox.values()) oldest = Math.min(oldest ?? Infinity, span.enqueuedAt);
    return { spans: this.outbox.size, ...(oldest === undefined ? {} : { oldestEnqueuedAt: oldest }) };
  }

  close(): void {
    clearInterval(this.sweeper);
    this.tracedJobs.clear();
    this.tracedPipelines.clear();
    this.pipelineSpanVersions.clear();
    this.runnerJobEnds.clear();
    this.rememberedSpans.clear();
    this.outbox.clear();
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
    for (const entries of [this.tracedJobs, this.tracedPipelines, this.pipelineSpanVersions, this.runnerJobEnds] as Array<Map<number, Expiring<unknown>>>) {
      for (const [key, entry] of entries) if (entry.expiresAt <= now) entries.delete(key);
    }
    for (const [spanId, forgetAt] of this.rememberedSpans) if (forgetAt <= now && !this.outbox.has(spanId)) this.rememberedSpans.delete(spanId);
  }
}
