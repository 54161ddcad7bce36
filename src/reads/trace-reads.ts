import type { CollectedSpan } from '../cli/waterfall';

/**
 * The read port of SPEC §12: fetches what the collector was given, so the endpoints, the CLI and the control
 * plane compute the critical path and completeness one way whichever backend fetched the spans. Two backends:
 * ClickHouse (production, `@clickhouse/client` over the HTTP interface) and the embedded collector's files.
 */

/** A span as the collector stored it: the shape `npm run -s trace` already draws. */
export type StoredSpan = CollectedSpan & {
  /** The span's W3C tracestate (`ot=th:…`), '' when none. */
  readonly traceState: string;
  readonly statusMessage: string;
  readonly kind: number;
  readonly scopeName: string;
};

/** Epoch milliseconds, both ends included. Every lookup is bounded by one. */
export interface TimeWindow {
  readonly fromMs: number;
  readonly toMs: number;
}

/** A job's run as the CI view has it, for the per-job-name summary (SPEC §12 "a project's jobs over a window"). */
export interface JobRun {
  readonly jobId: number;
  readonly name: string;
  readonly stage: string;
  readonly pipelineId: number;
  readonly status: string;
  readonly durationSeconds: number;
  readonly queueSeconds: number;
  /** Whether a later attempt of the same name in the same pipeline exists (this one was retried). */
  readonly retried: boolean;
  /** `ci.job.critical_path` and `ci.job.slack_seconds` as written on the job span at the pipeline's end, when known. */
  readonly onCriticalPath?: boolean;
  readonly criticalPathSeconds?: number;
  /** SPEC §11: 1 for th:0 or no threshold, 2^56/(2^56−T) for a head threshold T. */
  readonly adjustedCount: number;
}

export interface TraceReads {
  /**
   * Every span of the trace that holds `pipelineId` (the root pipeline with its child pipelines), within
   * `window`; null when no such pipeline of `projectId` is known (an id of another project answers null too).
   */
  pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow): Promise<StoredSpan[] | null>;
  /** The whole trace holding `jobId` of `projectId`, within `window` (the caller cuts the job's subtree); null when unknown. */
  jobTrace(projectId: number, jobId: number, window: TimeWindow): Promise<StoredSpan[] | null>;
  /** The project's job runs that started within `window`, optionally on one `ref`. */
  projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobRun[]>;
}

/**
 * The backend could not answer in time: a failure or a timeout of the store, never "no such trace". The
 * endpoints answer it 503 with Retry-After, so a caller (GitLab) retries later instead of showing nothing.
 */
export class ReadsUnavailableError extends Error {
  constructor(
    message: string,
    /** Seconds a caller should wait before asking again. */
    readonly retryAfterSeconds = 5,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ReadsUnavailableError';
  }
}
