import type { JobRunRow } from '../across/job-run';
import type { CollectedSpan } from '../otlp/collected-spans';
import type { JobSummary } from './job-summary';

/**
 * The read port of SPEC §12: fetches what the collector was given, so the endpoints, the CLI and the control
 * plane compute the critical path and completeness one way whichever backend fetched the spans. Two backends:
 * ClickHouse (production, `@clickhouse/client` over the HTTP interface) and the embedded collector's files.
 *
 * What the caller (src/reads/read-answers.ts, in a worker thread of src/reads/reads-pool.ts) does, so a backend
 * need not: cut a job's subtree, drop spans of another project, cap the answer at READS_MAX_SPANS, compute
 * completeness and the critical path, encode the answer. What a backend does: read nothing outside the window it is
 * given (the rule is `overlapsWindow`), return each span once, in its latest version (SPEC §10: a pipeline or bridge
 * span sent again with the same span id and a higher `ci.pipeline.span.version`), return what a `TraceBound` asks
 * and no more, and reject with ReadsUnavailableError when it cannot answer.
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

/**
 * How far before a window a span that overlaps it may have started and still be found: the longest window a read
 * takes (31 days). Without such a bound ClickHouse would look in every partition for a span that began long ago.
 */
export const LONGEST_SPAN_MS = 31 * 86_400_000;

const msOf = (nanos: bigint) => Number(nanos / 1_000_000n);

/**
 * Item 6 of issue 56, one rule on both backends: a span belongs to a read when it overlaps the window (it ended at
 * or after its start and started at or before its end), and started at most LONGEST_SPAN_MS before it. A job read
 * with the job's own times (GitLab's `started_at`..`finished_at`) keeps its job span, which starts when it was queued.
 */
export function overlapsWindow(span: { readonly startNanos: bigint; readonly endNanos: bigint }, window: TimeWindow): boolean {
  const start = msOf(span.startNanos);
  return msOf(span.endNanos) >= window.fromMs && start <= window.toMs && start >= window.fromMs - LONGEST_SPAN_MS;
}

/**
 * How far before a window the span that finds a pipeline or job (it carries its id) may have started: a day. GitLab's
 * own times put such a span inside the window (a pipeline's span starts when it was created, a job's `job_execution`
 * when it was picked up); the narrower bound keeps ClickHouse's lookup by id to the window's partitions and a day's.
 * Once found, the trace's spans are all those `overlapsWindow` keeps.
 */
export const FIND_SLACK_MS = 86_400_000;

/** Whether `span` may find the read's pipeline or job: it overlaps the window and started at most FIND_SLACK_MS before it. */
export function findsWithin(span: { readonly startNanos: bigint; readonly endNanos: bigint }, window: TimeWindow): boolean {
  return overlapsWindow(span, window) && msOf(span.startNanos) >= window.fromMs - FIND_SLACK_MS;
}

/**
 * One trace read, bounded: every span the critical path and completeness need (SPEC §12: the control plane's
 * `pipeline`, `bridge`, `job` and `queue_wait`, the runners' `job_execution` spans and their children, the stages),
 * and of all the others (what programs in the jobs exported, deeper runner spans) of this project or of none, the
 * first `limit` by start time then span id, with how many there are.
 */
export interface TraceRead {
  readonly spans: StoredSpan[];
  /** How many other spans the trace holds within the window, of which `spans` has at most `limit`. */
  readonly others: number;
}

/** What a trace read asks of a backend beyond the window: how many other spans at most, and, for a job read, whose. */
export interface TraceBound {
  /** The most of the other spans to return (the structural ones are all returned). */
  readonly limit: number;
  /** Aborted when the read is given up (READS_TIMEOUT_MS): a backend stops its queries. */
  readonly signal?: AbortSignal;
}

export interface TraceReads {
  /**
   * The trace that holds `pipelineId` (the root pipeline with its child pipelines), within `window`, bounded by
   * `bound`; null when no such pipeline of `projectId` is known (an id of another project answers null too).
   * A pipeline is known by a span carrying `ci.pipeline.id` (a string on spans, as the runner writes it) and
   * `ci.project.id`: its pipeline span, or any of its job, queue-wait or job_execution spans while it runs.
   */
  pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null>;
  /**
   * The trace holding `jobId` of `projectId`, within `window` (the caller cuts the job's subtree); null when
   * unknown. A job is known by a span carrying `ci.job.id` and `ci.project.id` (job, bridge, queue_wait,
   * job_execution). The other spans counted and returned are those carrying this job's id or no job id.
   */
  jobTrace(projectId: number, jobId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null>;
  /**
   * The project's jobs queued within `window`, per job name (optionally of pipelines on one `ref`, `vcs.ref.head.name`,
   * whenever the pipeline started within LONGEST_SPAN_MS before the window); jobs GitLab never named are left out.
   */
  projectJobs(projectId: number, window: TimeWindow, ref?: string, signal?: AbortSignal): Promise<JobSummary[]>;
  /**
   * SPEC §13: the rows of job runs (src/across/job-run.ts) of the project's pipelines created within `window` (a
   * pipeline's span starts when GitLab created it), optionally only those on one ref (`vcs.ref.head.name`): every
   * attempt of every job GitLab named, child pipelines' included, in no particular order. What every read across
   * pipelines reads, never all spans; each row as `jobRunsOfTrace` (src/across/job-runs-of-trace.ts) makes it from
   * the pipeline's whole trace.
   */
  jobRunRows(projectId: number, window: TimeWindow, filter: { readonly ref?: string }, signal?: AbortSignal): Promise<JobRunRow[]>;
  /**
   * SPEC §13: the rows of job runs of one pipeline of the project, found within `window` as `pipelineTrace` finds it,
   * with the rest of its root's (its root and the root's child pipelines: a compare's pipeline is its root); null when
   * the project has no such pipeline there.
   */
  pipelineRunRows(projectId: number, pipelineId: number, window: TimeWindow, signal?: AbortSignal): Promise<JobRunRow[] | null>;
  /**
   * SPEC §13 "Compare": the rows of the latest `count` root pipelines of the project on `ref` created within `window`
   * (the end excluded) that ended, whose source is `source` or not said, `except` left out: where a compare's
   * default baseline is chosen from, without reading every pipeline of the lookback. `complete` when fewer than
   * `count` matched (then they are all there are). Absent on a backend whose window reads cost little (the embedded
   * files): the caller reads the window instead.
   */
  latestEndedRunRows?(
    projectId: number,
    latest: { readonly ref: string; readonly source: string; readonly except: number; readonly count: number },
    window: TimeWindow,
    signal?: AbortSignal,
  ): Promise<{ rows: JobRunRow[]; complete: boolean }>;
  /**
   * Called once in the thread that will serve reads, before its first: the embedded backend indexes the collector's
   * files there (up to twice LOCAL_COLLECTOR_MAX_BYTES), so a thread that replaces one abandoned at a deadline is not
   * itself abandoned while it catches up.
   */
  prepare?(): Promise<void>;
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
  /** CLICKHOUSE_COMPRESSION: whether ClickHouse gzips its answers; not by default. */
  readonly compression?: 'none' | 'gzip';
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
