import type { CollectedSpan } from '../otlp/collected-spans';

/**
 * The read port of SPEC §12: fetches what the collector was given, so the endpoints, the CLI and the control
 * plane compute the critical path and completeness one way whichever backend fetched the spans. Two backends:
 * ClickHouse (production, `@clickhouse/client` over the HTTP interface) and the embedded collector's files.
 *
 * What the caller (src/reads/reads.service.ts) does, so a backend need not: cut a job's subtree, drop spans of
 * another project, compute completeness and the critical path, bound the whole read by READS_TIMEOUT_MS and
 * answer 503 when a method rejects or is late. What a backend does: read nothing outside the window it is given,
 * return each span once, in its latest version (SPEC §10: a pipeline or bridge span sent again with the same span
 * id and a higher `ci.pipeline.span.version`), and reject with ReadsUnavailableError when it cannot answer.
 */

/**
 * A span as the collector stored it: the shape `npm run -s trace` already draws, with its tracestate, status
 * message, kind and scope name (''/0 when the backend does not keep them).
 */
export type StoredSpan = CollectedSpan;

/**
 * Epoch milliseconds, both ends included. Every lookup is bounded by one: GitLab passes the pipeline's or job's
 * times as `from`/`to` when it has them (it always does: it asks about a pipeline it holds), else the service uses
 * the last READS_LOOKBACK_DAYS up to now. Never longer than 31 days. A backend may narrow it further (find the
 * pipeline's or job's own spans first, then read their trace between their first start and last end plus a
 * margin), never widen it.
 */
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
  /** From the runner's pickup to the job's end (GitLab's own `duration`), seconds. */
  readonly durationSeconds: number;
  /** From `queued_at` to the pickup, seconds; 0 when not known. */
  readonly queueSeconds: number;
  /** Whether a later attempt of the same name in the same pipeline exists (this one was retried). */
  readonly retried: boolean;
  /**
   * Whether this run was on its pipeline's critical path and for how long (its pending to its end, seconds), when
   * known: the embedded backend computes the path per pipeline; ClickHouse reads what the control plane wrote on the
   * job span at the pipeline's end (`ci.job.critical_path`, `ci.job.critical_path_seconds`). Undefined: unknown,
   * left out of the share.
   */
  readonly onCriticalPath?: boolean;
  readonly criticalPathSeconds?: number;
  /** SPEC §11: 1 for th:0 or no threshold, 2^56/(2^56−T) for a head threshold T. */
  readonly adjustedCount: number;
}

export interface TraceReads {
  /**
   * Every span of the trace that holds `pipelineId` (the root pipeline with its child pipelines), within
   * `window`; null when no such pipeline of `projectId` is known (an id of another project answers null too).
   * A pipeline is known by a span carrying `ci.pipeline.id` (a string on spans, as the runner writes it) and
   * `ci.project.id`: its pipeline span, or any of its job, queue-wait or job_execution spans while it runs.
   */
  pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow): Promise<StoredSpan[] | null>;
  /**
   * The whole trace holding `jobId` of `projectId`, within `window` (the caller cuts the job's subtree); null when
   * unknown. A job is known by a span carrying `ci.job.id` and `ci.project.id` (job, bridge, queue_wait, job_execution).
   */
  jobTrace(projectId: number, jobId: number, window: TimeWindow): Promise<StoredSpan[] | null>;
  /** The project's job runs that were queued within `window`, optionally of pipelines on one `ref` (`vcs.ref.head.name`). */
  projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobRun[]>;
  /** Releases connections; called when the module stops. */
  close?(): Promise<void>;
}

/** How reads.module.ts builds the ClickHouse backend: `new ClickHouseTraceReads(options)`. */
export interface ClickHouseReadsOptions {
  /** CLICKHOUSE_URL: the HTTP interface, user and database in it as the official client reads them. */
  readonly url: string;
  /** The contents of CLICKHOUSE_PASSWORD_FILE, trimmed; undefined when unset. */
  readonly password?: string;
  /** READS_TIMEOUT_MS: the service stops waiting after it; the backend should cancel its query by then too. */
  readonly timeoutMs: number;
}

/**
 * The backend could not answer in time: a failure or a timeout of the store, never "no such trace". The
 * endpoints answer it 503 with Retry-After, so a caller (GitLab) retries later instead of showing nothing.
 * Any other error a backend throws is answered the same way, with the service's own Retry-After.
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
