import {
  HEAD_DECISION_KEY,
  PIPELINE_END_KEY,
  PIPELINE_SPAN_VERSION_KEY,
  RUNNER_JOB_ENDS_KEY,
  TRACE_STORY_KEY,
  TRACED_JOB_KEY,
  TRACED_PIPELINE_KEY,
} from '../store/redis-keys';
import { defineScripts, ttlArgument } from '../store/redis-scripts';
import { RedisStore } from '../store/redis-store';
import { TRACED_WORK_SCRIPTS } from './redis-traced-work-store.scripts';
import {
  HeadDecision,
  PipelineEndSeen,
  RaisedVersion,
  Remembered,
  RunnerJobEnd,
  StoryChapter,
  TracedJob,
  TracedPipeline,
  TracedWorkStore,
} from './traced-work';

export class RedisTracedWorkStore implements TracedWorkStore {
  private readonly scripts;

  constructor(private readonly store: RedisStore) {
    this.scripts = defineScripts(store, TRACED_WORK_SCRIPTS);
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    // A batch of pickups holds a few pipelines (a root and its children): a write each, all awaited together.
    await this.store.guard(() =>
      Promise.all(
        pipelines.map(({ value: pipeline, ttlMs }) =>
          this.scripts.setPipeline([TRACED_PIPELINE_KEY(pipeline.pipelineId)], [JSON.stringify(pipeline), ttlArgument(ttlMs)]),
        ),
      ),
    );
  }

  findTracedJob(jobId: number): Promise<TracedJob | null> {
    return this.storedJson<TracedJob>(TRACED_JOB_KEY(jobId));
  }

  findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    return this.storedJson<TracedPipeline>(TRACED_PIPELINE_KEY(pipelineId));
  }

  async pinHeadDecision(rootPipelineId: number, proposed: HeadDecision, ttlMs: number): Promise<HeadDecision> {
    const kept = await this.store.guard(() => this.scripts.pin([HEAD_DECISION_KEY(rootPipelineId)], [JSON.stringify(proposed), ttlArgument(ttlMs)]));
    return JSON.parse(kept) as HeadDecision;
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<RaisedVersion> {
    const [before, highest] = await this.store.guard(() => this.scripts.raiseVersion([PIPELINE_SPAN_VERSION_KEY(pipelineId)], [version, ttlArgument(ttlMs)]));
    return { before: Number(before), highest: Number(highest) };
  }

  async highestPipelineSpanVersions(pipelineIds: readonly number[]): Promise<number[]> {
    // One GET each, together: the keys are in as many slots as pipelines (a Cluster takes no multi-slot MGET).
    const kept = await this.store.guard(() => Promise.all(pipelineIds.map((pipelineId) => this.store.client.get(PIPELINE_SPAN_VERSION_KEY(pipelineId)))));
    return kept.map((version) => (version === null ? 0 : Number(version)));
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const ends = await this.store.guard(() =>
      this.scripts.recordRunnerJobEnd([RUNNER_JOB_ENDS_KEY(pipelineId)], [end.jobId, JSON.stringify(end), ttlArgument(ttlMs)]),
    );
    return ends.map((stored) => JSON.parse(stored) as RunnerJobEnd);
  }

  async recordTraceStory(rootPipelineId: number, chapters: readonly StoryChapter[], ttlMs: number): Promise<void> {
    if (chapters.length === 0) return;
    const flat = chapters.flatMap(({ key, text }) => [key, text]);
    await this.store.guard(() => this.scripts.recordStory([TRACE_STORY_KEY(rootPipelineId)], [ttlArgument(ttlMs), ...flat]));
  }

  async traceStory(rootPipelineId: number): Promise<string[]> {
    return this.store.guard(() => this.store.client.hvals(TRACE_STORY_KEY(rootPipelineId)));
  }

  async recordPipelineEnd(pipelineId: number, ended: PipelineEndSeen, ttlMs: number): Promise<void> {
    await this.store.guard(() => this.scripts.recordEnd([PIPELINE_END_KEY(pipelineId)], [JSON.stringify(ended), ttlArgument(ttlMs)]));
  }

  pipelineEnd(pipelineId: number): Promise<PipelineEndSeen | null> {
    return this.storedJson<PipelineEndSeen>(PIPELINE_END_KEY(pipelineId));
  }

  private async storedJson<T>(key: string): Promise<T | null> {
    const stored = await this.store.guard(() => this.store.client.get(key));
    return stored === null ? null : (JSON.parse(stored) as T);
  }
}
