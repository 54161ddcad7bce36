import type { OutcomePolicy } from '../outcome-sampling/outcome-policy';

/**
 * What the store keeps for the control-plane spans (SPEC §10): which jobs and pipelines the decorator
 * enabled, (the outbox of spans to deliver is src/outbox's).
 */

/** A job the decorator enabled, as known at its pickup. */
export interface TracedJob {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  readonly projectId: number;
  readonly runnerId: number;
  readonly runnerType: string;
  readonly traceId: string;
  /** The pipeline's `ot=th` tracestate, when sampling is below 100 %. */
  readonly tracestate?: string;
  /** Epoch milliseconds GitLab queued the job, when the pickup said. */
  readonly queuedAt?: number;
  /** Epoch milliseconds of the pickup. */
  readonly pickedUpAt: number;
  /** Traced provisionally (SPEC §11), under this policy: its pipeline's outcome decides whether it is kept. */
  readonly outcomePolicy?: OutcomePolicy;
}

/**
 * A pipeline with at least one enabled job, or the root of one. It belongs to the project GitLab named for it (SPEC
 * §12 "Trust"): a job of the pipeline, or a hook of it, says which; a job of another pipeline naming it as its root
 * only guesses (`asRoot`), since a job's pickup says its own project, not its root's.
 */
export interface TracedPipeline {
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  readonly projectId: number;
  readonly traceId: string;
  readonly tracestate?: string;
  /** Traced provisionally (SPEC §11), under this policy. */
  readonly outcomePolicy?: OutcomePolicy;
  /**
   * Known only as the root a job of another pipeline named: its project is that job's, a guess (a multi-project
   * pipeline's jobs may name another project's pipeline as their root). Gives way to the pipeline's own record.
   */
  readonly asRoot?: true;
}

/** What a traced job's pickup tells of one of its pipelines (its own, or its root, whose project it can only guess). */
export function tracedPipelineOf(job: TracedJob, pipelineId: number): TracedPipeline {
  return {
    pipelineId,
    rootPipelineId: job.rootPipelineId,
    projectId: job.projectId,
    traceId: job.traceId,
    ...(job.tracestate === undefined ? {} : { tracestate: job.tracestate }),
    ...(job.outcomePolicy === undefined ? {} : { outcomePolicy: job.outcomePolicy }),
    ...(pipelineId === job.pipelineId ? {} : { asRoot: true as const }),
  };
}

/**
 * What the store keeps when `proposed` is written over `kept` (SPEC §12 "Trust"): one project's record is never
 * rewritten by another project's, except a guess (`asRoot`) by the pipeline's own record (GitLab's word on its
 * project); null keeps `kept` as it is. Within a project, an own record is never made a guess again. The Redis store's
 * script (setPipeline in redis-traced-work-store.scripts.ts) says the same in Lua.
 */
export function pipelineRecordAfter(kept: TracedPipeline | null, proposed: TracedPipeline): TracedPipeline | null {
  if (kept === null) return proposed;
  if (kept.projectId !== proposed.projectId) return kept.asRoot === true && proposed.asRoot !== true ? proposed : null;
  if (kept.asRoot !== true && proposed.asRoot === true) return kept;
  return proposed;
}

/** A pipeline's record, if it is `projectId`'s: another project's record of the same id is none of its business. */
export function ownedBy(pipeline: TracedPipeline | null, projectId: number): TracedPipeline | null {
  return pipeline !== null && pipeline.projectId === projectId ? pipeline : null;
}

/** A traced job, and each pipeline a pickup names, is remembered at least this long (a job with a tiny timeout still finishes). */
export const MIN_TRACED_MEMORY_MS = 60_000;

/**
 * A root pipeline's head decision (SPEC §4, §11), taken at its first pickup and kept for the pipeline's life, so a
 * sampling-rate or toggle change in the middle of a pipeline never splits it: the sampling percentage then in force,
 * and the outcome-sampling policy it is traced provisionally under when the head decision leaves it out.
 */
export interface HeadDecision {
  readonly samplingPercent: number;
  readonly outcomePolicy?: OutcomePolicy;
}

/** A record to keep for `ttlMs`. */
export interface Remembered<T> {
  readonly value: T;
  readonly ttlMs: number;
}

/** What a traced job's runner told of its end, kept per pipeline when no webhook tells it (SPEC §10). */
export interface RunnerJobEnd {
  readonly jobId: number;
  /** When the job was queued, else picked up: where its span starts. */
  readonly queuedAt: number;
  readonly finishedAt: number;
  /** The runner's `ci.job.status`. */
  readonly status: string;
}

/**
 * The store's part of SPEC §10's final story (issue 27): a pipeline's span is emitted again as its
 * story changes, in versions. Kept in the pipeline's slot.
 */
/** A pipeline span's highest version before and after a raise (see raisePipelineSpanVersion). */
export interface RaisedVersion {
  readonly before: number;
  readonly highest: number;
}

export interface PipelineStoryStore {
  /**
   * Raises the highest version of a pipeline's span emitted so far to `version`, and answers the highest
   * after the call (above `version`, a newer story was emitted already and this one need not be) and before it
   * (0: none): below `version`, this call is the one, on any replica, that told of it first.
   */
  raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<RaisedVersion>;
  /** The highest version of each pipeline's span told so far (0: none, or forgotten), in the order asked. */
  highestPipelineSpanVersions(pipelineIds: readonly number[]): Promise<number[]>;
  /** Without webhooks: adds one traced job's end to its pipeline's, and answers them all (each job once). */
  recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]>;
  /**
   * Adds chapters to a root pipeline's story: what the control plane told of each job and bridge of its trace, each
   * under a key of its own (a later chapter with the same key replaces it), all kept at least `ttlMs`. At the root
   * pipeline's end its critical path is computed from them (SPEC §12): by then a job's own record may be long gone.
   */
  recordTraceStory(rootPipelineId: number, chapters: readonly StoryChapter[], ttlMs: number): Promise<void>;
  /** The root pipeline's chapters' texts, in no particular order; none once forgotten. */
  traceStory(rootPipelineId: number): Promise<string[]>;
  /** Keeps a pipeline's end unless a later one (by `end.finishedAt`) is kept already, for at least `ttlMs`. */
  recordPipelineEnd(pipelineId: number, ended: PipelineEndSeen, ttlMs: number): Promise<void>;
  /** The latest end kept of a pipeline, or null (never ended, or forgotten). */
  pipelineEnd(pipelineId: number): Promise<PipelineEndSeen | null>;
}

/**
 * A pipeline's latest end as its span told it (SPEC §10, the final story), kept so a hook saying it runs again can draw
 * the newer, running version at once: where its span sits, and which jobs had finished then.
 */
export interface PipelineEndSeen {
  /** The span's place, as the caller drew it (its own shape: JSON). */
  readonly place: unknown;
  /** The end as the caller drew it (JSON), epoch ms `finishedAt` among it. */
  readonly end: { readonly finishedAt: number } & Record<string, unknown>;
  readonly finishedJobIds: readonly number[];
}

/** One chapter of a root pipeline's story: its key (one per job or bridge) and its text (the caller's JSON). */
export interface StoryChapter {
  readonly key: string;
  readonly text: string;
}

/**
 * The store's part of SPEC §10. A traced job is written with its grant (`GrantStore.saveGrant`), in the
 * same step, and lives as long as the grant (at least MIN_TRACED_MEMORY_MS); this port reads it.
 */
export interface TracedWorkStore extends PipelineStoryStore {
  /**
   * Remembers pipelines, each for its `ttlMs`; a pipeline's memory is only ever lengthened, whatever order its jobs'
   * pickups come in. A record of another project is kept as it is (see pipelineRecordAfter), whoever writes.
   */
  recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void>;
  findTracedJob(jobId: number): Promise<TracedJob | null>;
  findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null>;
  /** Keeps `proposed` as the root pipeline's head decision unless one is kept already, and answers the one kept. */
  pinHeadDecision(rootPipelineId: number, proposed: HeadDecision, ttlMs: number): Promise<HeadDecision>;
}
