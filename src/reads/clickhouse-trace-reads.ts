import { CONTROL_PLANE_MARK } from '../otlp/control-plane-mark';
import { ClickHouseClient, ClickHouseLogLevel, createClient } from '@clickhouse/client';
import type { AttributeValue } from '../otlp/collected-spans';
import { ClickHouseReadsOptions, JobRun, ReadsUnavailableError, StoredSpan, TimeWindow, TraceReads } from './trace-reads';

/**
 * The production backend of the read port (SPEC §12): the Collector exporter's `otel_traces` and the CI view
 * `ci_job_telemetry_traces` (deploy/clickhouse/init/01-ci-job-telemetry.sql), through ClickHouse's official
 * client over the HTTP interface.
 *
 * Every lookup is bounded in time. otel_traces is partitioned by day and ordered by (ServiceName, SpanName,
 * time), so a trace id alone would make ClickHouse test the bloom filter of every part of every day: first the
 * CI view, ordered by (project_id, pipeline_id, job_id, start), names the trace and the times its spans start
 * within the caller's window; then otel_traces is read for that trace id between those times, which prunes
 * every other day's partition and, within a day, every granule outside the trace's minutes.
 *
 * Every value is a query parameter (`{name:Type}`, sent apart from the SQL): no id, ref or time is ever
 * written into a statement.
 */

/**
 * The port's options (a URL such as `http://otel@clickhouse:8123/otel`, whose user and database win, a password,
 * the deadline of one lookup, all of its queries) and what tests and the bench add.
 */
export interface ClickHouseTraceReadsOptions extends ClickHouseReadsOptions {
  /** The database holding otel_traces and the CI view when the URL names none; `otel` as deploy/clickhouse/init creates them. */
  readonly database?: string;
  /** The user when the URL names none; else ClickHouse's `default`. */
  readonly username?: string;
  /** Told what each query read (ClickHouse's X-ClickHouse-Summary): the proof that a lookup is bounded. */
  readonly onQuery?: (statistics: QueryStatistics) => void;
}

export interface QueryStatistics {
  /** Which query: `locate pipeline`, `locate job`, `trace spans`, `project jobs`. */
  readonly query: string;
  readonly readRows: number;
  readonly readBytes: number;
}

/** Where a trace is: its id and the nanoseconds its spans start between (both ends included). */
interface TracePlace {
  readonly trace_id: string;
  readonly first_start_ns: string;
  readonly last_end_ns: string;
}

/**
 * The trace holding a pipeline's (or a job's) spans, and the times of the whole trace (the root pipeline's and
 * every child's spans), all within the caller's window. The inner lookup uses the view's primary key; the outer
 * one its trace id bloom filter, in the window's partitions only. No trace: no row.
 */
const locateSql = (by: 'pipeline_id' | 'job_id') => `
SELECT
    trace_id,
    toString(min(toUnixTimestamp64Nano(start))) AS first_start_ns,
    toString(max(toUnixTimestamp64Nano(start) + toInt64(duration_ns))) AS last_end_ns
FROM ci_job_telemetry_traces
WHERE trace_id = (
        SELECT trace_id
        FROM ci_job_telemetry_traces
        WHERE project_id = {project:UInt64} AND ${by} = {id:UInt64}
          AND start BETWEEN fromUnixTimestamp64Milli({from_ms:Int64}) AND fromUnixTimestamp64Milli({to_ms:Int64})
        ORDER BY start
        LIMIT 1)
  AND trace_id != ''
  AND start BETWEEN fromUnixTimestamp64Milli({from_ms:Int64}) AND fromUnixTimestamp64Milli({to_ms:Int64})
GROUP BY trace_id`;
const LOCATE_PIPELINE = locateSql('pipeline_id');
const LOCATE_JOB = locateSql('job_id');

/**
 * The trace's spans as the exporter stored them. A span the control plane emitted again (a pipeline that
 * finished again, SPEC §10) is there once per version: the control plane's copy (its mark, control-plane-mark.ts)
 * over any other, then the highest ci.pipeline.span.version wins, and a span
 * stored twice (a retried export) comes back once.
 */
const TRACE_SPANS = `
SELECT
    TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ScopeName,
    toString(toUnixTimestamp64Nano(Timestamp)) AS start_ns, toString(Duration) AS duration_ns,
    StatusCode, StatusMessage, SpanAttributes, ResourceAttributes
FROM otel_traces
WHERE TraceId = {trace:String}
  AND Timestamp BETWEEN fromUnixTimestamp64Nano({first_ns:Int64}) AND fromUnixTimestamp64Nano({last_ns:Int64})
ORDER BY ResourceAttributes['${CONTROL_PLANE_MARK.key}'] = '${CONTROL_PLANE_MARK.value}' DESC, toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']) DESC, Timestamp
LIMIT 1 BY SpanId`;

/**
 * A project's job runs that started in the window, from the CI view alone: the control plane's `job` spans
 * (their latest version), each with its pipeline's ref and weight from the pipeline span (SPEC §11: a runner's
 * or a job's own span carries no threshold). A pipeline is looked for from a day before the window, since it
 * starts before its jobs.
 */
const PROJECT_JOBS = `
WITH
    pipelines AS (
        SELECT pipeline_id, argMax(ref, span_version) AS ref, argMax(adjusted_count, span_version) AS adjusted_count
        FROM ci_job_telemetry_traces
        WHERE project_id = {project:UInt64} AND job_id = 0 AND span_name = 'pipeline'
          AND start BETWEEN fromUnixTimestamp64Milli({from_ms:Int64}) - INTERVAL 1 DAY AND fromUnixTimestamp64Milli({to_ms:Int64})
        GROUP BY pipeline_id
    ),
    jobs AS (
        SELECT
            job_id,
            pipeline_id,
            argMax(job_name, span_version) AS name,
            argMax(job_stage, span_version) AS stage,
            argMax(job_status, span_version) AS status,
            argMax(duration_ns, span_version) AS duration_ns,
            argMax(queued_seconds, span_version) AS queued_seconds,
            argMax(critical_path, span_version) AS critical_path,
            argMax(critical_path_seconds, span_version) AS critical_path_seconds,
            argMax(adjusted_count, span_version) AS own_adjusted_count
        FROM ci_job_telemetry_traces
        WHERE project_id = {project:UInt64} AND job_id > 0 AND span_name = 'job'
          AND start BETWEEN fromUnixTimestamp64Milli({from_ms:Int64}) AND fromUnixTimestamp64Milli({to_ms:Int64})
        GROUP BY job_id, pipeline_id
    )
SELECT
    toString(jobs.job_id) AS job_id,
    toString(jobs.pipeline_id) AS pipeline_id,
    name, stage, status, duration_ns / 1e9 AS duration_seconds, queued_seconds, critical_path, critical_path_seconds,
    jobs.job_id < max(jobs.job_id) OVER (PARTITION BY jobs.pipeline_id, name) AS retried,
    if(pipelines.pipeline_id = jobs.pipeline_id, pipelines.adjusted_count, own_adjusted_count) AS adjusted_count
FROM jobs
LEFT JOIN pipelines ON pipelines.pipeline_id = jobs.pipeline_id
WHERE {ref:String} = '' OR (pipelines.pipeline_id = jobs.pipeline_id AND pipelines.ref = {ref:String})
ORDER BY jobs.job_id`;

interface SpanRow {
  TraceId: string;
  SpanId: string;
  ParentSpanId: string;
  TraceState: string;
  SpanName: string;
  SpanKind: string;
  ScopeName: string;
  start_ns: string;
  duration_ns: string;
  StatusCode: string;
  StatusMessage: string;
  SpanAttributes: Record<string, string>;
  ResourceAttributes: Record<string, string>;
}

interface JobRow {
  job_id: string;
  pipeline_id: string;
  name: string;
  stage: string;
  status: string;
  duration_seconds: number;
  queued_seconds: number;
  critical_path: boolean | null;
  critical_path_seconds: number | null;
  retried: number | boolean;
  adjusted_count: number;
}

/** The exporter writes pdata's enum names; releases before 0.120 wrote STATUS_CODE_* and SPAN_KIND_*. */
const STATUS_CODES: Record<string, number> = { Unset: 0, Ok: 1, Error: 2, STATUS_CODE_UNSET: 0, STATUS_CODE_OK: 1, STATUS_CODE_ERROR: 2 };
const SPAN_KINDS = new Map(
  ['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer'].flatMap((name, kind) => [
    [name, kind],
    [`SPAN_KIND_${name.toUpperCase()}`, kind],
  ]),
);

/**
 * The exporter keeps every attribute value as text (an int as its digits, a double as JS and Go print it, a bool
 * as true/false, arrays as JSON), so the type a span was sent with is gone. What reads as a value of a type is given
 * back as that type: true and false as booleans (ci.job.manual is read as one), a number written as a number prints
 * (`42`, `-3`, `12.5`, never `007` or `1.0`) as a number (ci.job.id is an int to GitLab). The cost: a string
 * attribute that holds such a text (the runner's ci.pipeline.id, `"500"`) comes back as a number.
 */
function typed(text: string): AttributeValue {
  if (text === 'true') return true;
  if (text === 'false') return false;
  if (/^-?\d/.test(text)) {
    const number = Number(text);
    if (Number.isFinite(number) && String(number) === text && (!Number.isInteger(number) || Number.isSafeInteger(number))) return number;
  }
  return text;
}

const attributes = (map: Record<string, string>): Record<string, AttributeValue> => {
  const values: Record<string, AttributeValue> = {};
  for (const [key, text] of Object.entries(map)) values[key] = typed(text);
  return values;
};

function storedSpan(row: SpanRow): StoredSpan {
  const startNanos = BigInt(row.start_ns);
  return {
    traceId: row.TraceId,
    spanId: row.SpanId,
    parentSpanId: row.ParentSpanId,
    name: row.SpanName,
    startNanos,
    endNanos: startNanos + BigInt(row.duration_ns),
    statusCode: STATUS_CODES[row.StatusCode] ?? 0,
    attributes: attributes(row.SpanAttributes),
    resource: attributes(row.ResourceAttributes),
    traceState: row.TraceState,
    statusMessage: row.StatusMessage,
    kind: SPAN_KINDS.get(row.SpanKind) ?? 0,
    scopeName: row.ScopeName,
  };
}

function jobRun(row: JobRow): JobRun {
  const queueSeconds = row.queued_seconds;
  return {
    jobId: Number(row.job_id),
    name: row.name,
    stage: row.stage,
    pipelineId: Number(row.pipeline_id),
    status: row.status,
    // The job span lasts from queued to finished; GitLab's duration is from started (picked up) to finished.
    durationSeconds: Math.max(0, row.duration_seconds - queueSeconds),
    queueSeconds,
    retried: row.retried === true || row.retried === 1,
    ...(row.critical_path === null ? {} : { onCriticalPath: row.critical_path }),
    ...(row.critical_path_seconds === null ? {} : { criticalPathSeconds: row.critical_path_seconds }),
    adjustedCount: row.adjusted_count,
  };
}

export class ClickHouseTraceReads implements TraceReads {
  private readonly client: ClickHouseClient;
  private readonly timeoutMs: number;
  private readonly onQuery?: (statistics: QueryStatistics) => void;

  constructor(options: ClickHouseTraceReadsOptions) {
    this.timeoutMs = options.timeoutMs;
    this.onQuery = options.onQuery;
    this.client = createClient({
      url: options.url,
      ...(options.username === undefined ? {} : { username: options.username }),
      ...(options.password === undefined ? {} : { password: options.password }),
      database: options.database ?? 'otel',
      request_timeout: options.timeoutMs,
      // A failure is thrown as ReadsUnavailableError with the client's reason, and the caller logs it once.
      log: { level: ClickHouseLogLevel.OFF },
      // A 2,000-span trace is megabytes of JSON: compressed by the server, decompressed here.
      compression: { response: true, request: false },
      clickhouse_settings: {
        // The server stops a query the caller has given up on; whole seconds, at least one.
        max_execution_time: Math.max(1, Math.ceil(options.timeoutMs / 1000)),
        // The summary header then counts the whole query, not what was read before the first byte was sent.
        wait_end_of_query: 1,
      },
    });
  }

  async pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow): Promise<StoredSpan[] | null> {
    return this.trace('locate pipeline', LOCATE_PIPELINE, projectId, pipelineId, window);
  }

  async jobTrace(projectId: number, jobId: number, window: TimeWindow): Promise<StoredSpan[] | null> {
    return this.trace('locate job', LOCATE_JOB, projectId, jobId, window);
  }

  async projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobRun[]> {
    const deadline = Date.now() + this.timeoutMs;
    const rows = await this.rows<JobRow>('project jobs', PROJECT_JOBS, { project: projectId, ...windowParams(window), ref: ref ?? '' }, deadline);
    return rows.map(jobRun);
  }

  async close(): Promise<void> {
    await this.client.close();
  }

  private async trace(lookup: string, locate: string, projectId: number, id: number, window: TimeWindow): Promise<StoredSpan[] | null> {
    const deadline = Date.now() + this.timeoutMs;
    const [place] = await this.rows<TracePlace>(lookup, locate, { project: projectId, id, ...windowParams(window) }, deadline);
    if (place === undefined) return null;
    // A margin for spans the view does not hold (a hosted runner's stages, a program exporting straight to the
    // collector): they run within their job, but clocks differ. Never outside the caller's window.
    const first = BigInt(place.first_start_ns) - MARGIN_NANOS;
    const last = BigInt(place.last_end_ns) + MARGIN_NANOS;
    const [windowFirst, windowLast] = [BigInt(Math.floor(window.fromMs)) * 1_000_000n, BigInt(Math.ceil(window.toMs)) * 1_000_000n];
    const bounds = { first_ns: String(first > windowFirst ? first : windowFirst), last_ns: String(last < windowLast ? last : windowLast) };
    const rows = await this.rows<SpanRow>('trace spans', TRACE_SPANS, { trace: place.trace_id, ...bounds }, deadline);
    return rows.map(storedSpan);
  }

  private async rows<Row>(query: string, sql: string, params: Record<string, unknown>, deadline: number): Promise<Row[]> {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new ReadsUnavailableError(`ClickHouse: ${query}: no time left of ${this.timeoutMs} ms`);
    try {
      const result = await this.client.query({
        query: sql,
        query_params: params,
        format: 'JSONEachRow',
        abort_signal: AbortSignal.timeout(remaining),
      });
      const rows = await result.json<Row>();
      this.report(query, result.response_headers['x-clickhouse-summary']);
      return rows;
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new ReadsUnavailableError(`ClickHouse: ${query} failed: ${reason}`, undefined, { cause: error });
    }
  }

  private report(query: string, header: string | string[] | undefined): void {
    if (this.onQuery === undefined || typeof header !== 'string') return;
    const summary = JSON.parse(header) as { read_rows?: string; read_bytes?: string };
    this.onQuery({ query, readRows: Number(summary.read_rows ?? 0), readBytes: Number(summary.read_bytes ?? 0) });
  }
}

const MARGIN_NANOS = 60_000_000_000n;
const windowParams = (window: TimeWindow) => ({ from_ms: Math.floor(window.fromMs), to_ms: Math.ceil(window.toMs) });
