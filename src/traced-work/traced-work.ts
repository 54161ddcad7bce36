import type { OutcomePolicy } from '../flags/outcome-policy';

/**
 * What the store keeps for the control-plane spans (SPEC §10): which jobs and pipelines the decorator
 * enabled, and the outbox of spans still to be delivered to the collector.
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

/** A pipeline with at least one enabled job, or the root of one. */
export interface TracedPipeline {
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  readonly projectId: number;
  readonly traceId: string;
  readonly tracestate?: string;
  /** Traced provisionally (SPEC §11), under this policy. */
  readonly outcomePolicy?: OutcomePolicy;
}

/** What a traced job's pickup tells of one of its pipelines (its own, or its root). */
export function tracedPipelineOf(job: TracedJob, pipelineId: number): TracedPipeline {
  return {
    pipelineId,
    rootPipelineId: job.rootPipelineId,
    projectId: job.projectId,
    traceId: job.traceId,
    ...(job.tracestate === undefined ? {} : { tracestate: job.tracestate }),
    ...(job.outcomePolicy === undefined ? {} : { outcomePolicy: job.outcomePolicy }),
  };
}

/** One span waiting for the collector: the key that makes it unique and its OTLP/JSON `ResourceSpans`. */
export interface OutboxSpan {
  /** The span id; for a versioned span (a pipeline's, SPEC §10 the final story), the span id and its version. */
  readonly spanId: string;
  /** OTLP/JSON text of one `ResourceSpans` holding this one span. */
  readonly resourceSpans: string;
  /** Epoch milliseconds it entered the outbox. */
  readonly enqueuedAt: number;
}

/**
 * A pipeline kept by its outcome (SPEC §11) waits in the outbox as one entry pointing at its parked spans: the
 * outbox's claims, leases, retries and dedup then hold for them too, and the spans stay where they were parked
 * (their trace's slot) until the collector has them.
 */
const PARKED_POINTER_PREFIX = 'parked:';

export function parkedTracePointer(traceId: string, reason: string, enqueuedAt: number): OutboxSpan {
  return { spanId: `${PARKED_POINTER_PREFIX}${traceId}`, resourceSpans: reason, enqueuedAt };
}

/** The trace and reason an outbox entry points at, when it is a pointer to parked spans. */
export function parkedTraceOf(span: OutboxSpan): { readonly traceId: string; readonly reason: string } | undefined {
  if (!span.spanId.startsWith(PARKED_POINTER_PREFIX)) return undefined;
  return { traceId: span.spanId.slice(PARKED_POINTER_PREFIX.length), reason: span.resourceSpans };
}

/** An outbox span handed to one deliverer, which must acknowledge it or put it back. */
export interface ClaimedSpan extends OutboxSpan {
  /** Deliveries tried before this one. */
  readonly attempts: number;
}

export interface OutboxLimits {
  /** Spans the outbox holds at most; beyond, new spans are refused (and counted), never blocking. */
  readonly maxSpans: number;
  /** How long a span id is remembered after it was enqueued, so a later copy is recognised. */
  readonly rememberMs: number;
}

export interface EnqueueOutcome {
  readonly queued: number;
  /** Spans already enqueued (or delivered) once: dropped, as SPEC §10 wants each span once. */
  readonly duplicates: number;
  /** Spans refused because the outbox was full. */
  readonly refused: number;
}

export interface OutboxDepth {
  readonly spans: number;
  /** Epoch milliseconds the oldest waiting span entered the outbox. */
  readonly oldestEnqueuedAt?: number;
}

/** A traced job, and each pipeline a pickup names, is remembered at least this long (a job with a tiny timeout still finishes). */
export const MIN_TRACED_MEMORY_MS = 60_000;

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
export interface PipelineStoryStore {
  /**
   * Raises the highest version of a pipeline's span emitted so far to `version`, and answers the highest
   * after the call: above `version`, a newer story was emitted already and this one need not be.
   */
  raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<number>;
  /** Without webhooks: adds one traced job's end to its pipeline's, and answers them all (each job once). */
  recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]>;
}

/**
 * The store's part of SPEC §10. A traced job is written with its grant (`GrantStore.saveGrant`), in the
 * same step, and lives as long as the grant (at least MIN_TRACED_MEMORY_MS); this port reads it.
 */
export interface TracedWorkStore extends PipelineStoryStore {
  /** Remembers pipelines, each for its `ttlMs`; a pipeline's memory is only ever lengthened, whatever order its jobs' pickups come in. */
  recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void>;
  findTracedJob(jobId: number): Promise<TracedJob | null>;
  findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null>;
  /** Adds spans whose id was never enqueued before, while the outbox has room, in one atomic step. */
  enqueueSpans(spans: readonly OutboxSpan[], limits: OutboxLimits): Promise<EnqueueOutcome>;
  /**
   * Hands out up to `max` spans that are due, each to one caller only: a claimed span is due again
   * after `leaseMs` unless acknowledged or put back, so a deliverer that dies loses nothing.
   */
  claimSpans(max: number, leaseMs: number): Promise<ClaimedSpan[]>;
  /** Delivered: the spans leave the outbox (their ids stay remembered). */
  acknowledgeSpans(spanIds: readonly string[]): Promise<void>;
  /** Not delivered: due again after `delayMs`, one more attempt counted. */
  retrySpans(spanIds: readonly string[], delayMs: number): Promise<void>;
  outboxDepth(): Promise<OutboxDepth>;
}
