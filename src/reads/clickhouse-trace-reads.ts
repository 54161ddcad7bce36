import { FINISHED_STATUSES } from '../otlp/ci-identity';
import { CONTROL_PLANE_MARK } from '../otlp/control-plane-mark';
import { ClickHouseClient, ClickHouseLogLevel, ClickHouseSettings, createClient } from '@clickhouse/client';
import type { JobRunRow } from '../across/job-run';
import { jobRunsOfTrace } from '../across/job-runs-of-trace';
import type { AttributeValue } from '../otlp/collected-spans';
import { round } from '../across/percentiles';
import {
  inWindow,
  JOB_RUN_FACTS,
  JobRunFactsRow,
  jobRunsOfFacts,
  LATEST_ENDED_PIPELINES,
  PIPELINE_RUN_FACTS,
  PIPELINES_RUN_FACTS,
} from './clickhouse-job-runs';
import { bySummaryOrder, JobSummary } from './job-summary';
import { ClickHouseReadsOptions, LONGEST_SPAN_MS, ReadsUnavailableError, StoredSpan, TimeWindow, TraceBound, TraceRead, TraceReads } from './trace-reads';

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
  /** Which query: `locate pipeline`, `locate job`, `trace spans`, `project jobs`, `job run rows`. */
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
 * Item 6 of issue 56, the window rule of `overlapsWindow` (src/reads/trace-reads.ts) in SQL: a span belongs to a read
 * when it overlaps the window, having started at most LONGEST_SPAN_MS (31 days) before it; the span that finds the
 * pipeline or job, at most FIND_SLACK_MS (a day: `findsWithin`). The lower bound on the start column is what prunes
 * partitions: the lookup by id, which reads a granule of each part it looks in, looks in the window's and a day's.
 */
const OVERLAPS = (start: string, duration: string, since = '31 DAY') =>
  `${start} >= fromUnixTimestamp64Milli({from_ms:Int64}) - INTERVAL ${since}
        AND intDiv(toUnixTimestamp64Nano(${start}), 1000000) <= {to_ms:Int64}
        AND intDiv(toUnixTimestamp64Nano(${start}) + toInt64(${duration}), 1000000) >= {from_ms:Int64}`;

/** A span's identity attribute, on the span first, else on its resource (the gateway's stamp): `identityOf`. */
const IDENTITY = (key: string) => `if(SpanAttributes['${key}'] != '', SpanAttributes['${key}'], ResourceAttributes['${key}'])`;

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
        WHERE project_id = {project:UInt64} AND ${by} = {id:UInt64} AND ${OVERLAPS('start', 'duration_ns', '1 DAY')}
        ORDER BY start
        LIMIT 1)
  AND trace_id != ''
  AND ${OVERLAPS('start', 'duration_ns')}
GROUP BY trace_id`;
const LOCATE_PIPELINE = locateSql('pipeline_id');
const LOCATE_JOB = locateSql('job_id');

/**
 * The trace's spans as the exporter stored them, bounded (SPEC §12 "a read is bounded"): every span the critical
 * path and completeness need (the control plane's, the runners' job_execution spans and their children), and of the
 * others of this project or of none (and, for a job read, of this job or of none) the first {limit} by start time
 * then span id, each row with how many such others there are (a window count, taken before the LIMIT). A span the
 * control plane emitted again (a pipeline that finished again, SPEC §10) is there once per version: the control
 * plane's copy (its mark, control-plane-mark.ts) over any other, then the highest ci.pipeline.span.version wins, and a span stored twice (a retried export) comes back once.
 */
const TRACE_SPANS = `
WITH latest AS (
    SELECT
        TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ScopeName, Timestamp,
        toString(toUnixTimestamp64Nano(Timestamp)) AS start_ns, toString(Duration) AS duration_ns,
        StatusCode, StatusMessage, SpanAttributes, ResourceAttributes
    FROM otel_traces
    WHERE TraceId = {trace:String}
      AND Timestamp BETWEEN fromUnixTimestamp64Nano({first_ns:Int64}) AND fromUnixTimestamp64Nano({last_ns:Int64})
      AND ${OVERLAPS('Timestamp', 'Duration')}
    ORDER BY ResourceAttributes['${CONTROL_PLANE_MARK.key}'] = '${CONTROL_PLANE_MARK.value}' DESC, toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']) DESC, Timestamp
    LIMIT 1 BY SpanId
),
runners AS (SELECT SpanId FROM latest WHERE SpanName = 'job_execution')
SELECT * EXCEPT Timestamp, toUInt64(0) AS others
FROM latest
WHERE SpanName IN ('pipeline', 'bridge', 'job', 'queue_wait', 'job_execution') OR ParentSpanId IN runners
UNION ALL
SELECT * FROM (
    SELECT * EXCEPT Timestamp, count() OVER () AS others
    FROM latest
    WHERE NOT (SpanName IN ('pipeline', 'bridge', 'job', 'queue_wait', 'job_execution') OR ParentSpanId IN runners)
      AND ${IDENTITY('ci.project.id')} IN ('', toString({project:UInt64}))
      AND ({job:UInt64} = 0 OR ${IDENTITY('ci.job.id')} IN ('', toString({job:UInt64})))
    ORDER BY Timestamp, SpanId
    LIMIT {limit:UInt64})`;

/**
 * A project's jobs queued in the window, per job name, aggregated in ClickHouse from the CI view alone (issue 56
 * item 3: one row per job of a 31-day window pulled into Node could not finish in time). The control plane's `job`
 * spans (their latest version) that GitLab named (item 6: a job closed from its runner's span has no name and is left
 * out, as the embedded backend does), each weighted by its pipeline's adjusted count (SPEC §11: a runner's or a job's
 * own span carries no threshold), its pipeline's ref looked up by the pipeline's id (the view's primary key) however
 * long before the window the pipeline started, up to LONGEST_SPAN_MS, so a manual job played days later keeps its ref.
 * Percentiles are ClickHouse's quantileExactWeighted, the least value whose cumulative weight reaches the level, as
 * `weightedPercentile` computes them; its weights are integers, so adjusted counts go in as thousandths. Rounding
 * and order are done in Node, by the same functions as the embedded backend's.
 */
const PROJECT_JOBS = `
WITH
    jobs AS (
        SELECT
            job_id,
            pipeline_id,
            argMax(job_name, span_version) AS name,
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
        HAVING name != ''
    ),
    pipelines AS (
        SELECT pipeline_id, argMax(ref, span_version) AS ref, argMax(adjusted_count, span_version) AS adjusted_count
        FROM ci_job_telemetry_traces
        WHERE project_id = {project:UInt64} AND job_id = 0 AND span_name = 'pipeline'
          AND pipeline_id IN (SELECT pipeline_id FROM jobs)
          AND start BETWEEN fromUnixTimestamp64Milli({from_ms:Int64}) - INTERVAL 31 DAY AND fromUnixTimestamp64Milli({to_ms:Int64})
        GROUP BY pipeline_id
    ),
    runs AS (
        SELECT
            name,
            status,
            greatest(0, duration_ns / 1e9 - queued_seconds) AS duration_seconds,
            queued_seconds,
            critical_path,
            critical_path_seconds,
            jobs.job_id < max(jobs.job_id) OVER (PARTITION BY jobs.pipeline_id, name) AS retried,
            if(pipelines.pipeline_id = jobs.pipeline_id, pipelines.adjusted_count, own_adjusted_count) AS adjusted,
            if(isFinite(adjusted) AND adjusted > 0, adjusted, 1) AS weight,
            toUInt64(round(weight * 1000)) AS thousandths
        FROM jobs
        LEFT JOIN pipelines ON pipelines.pipeline_id = jobs.pipeline_id
        WHERE {ref:String} = '' OR (pipelines.pipeline_id = jobs.pipeline_id AND pipelines.ref = {ref:String})
    )
SELECT
    name,
    sum(weight) AS runs,
    sumIf(weight, status = 'failed') AS failures,
    sumIf(weight, retried) AS retries,
    quantileExactWeighted(0.5)(duration_seconds, thousandths) AS duration_p50,
    quantileExactWeighted(0.95)(duration_seconds, thousandths) AS duration_p95,
    quantileExactWeighted(0.5)(queued_seconds, thousandths) AS queue_p50,
    quantileExactWeighted(0.95)(queued_seconds, thousandths) AS queue_p95,
    countIf(critical_path IS NOT NULL) AS path_known_runs,
    sumIf(weight, critical_path IS NOT NULL) AS path_known,
    sumIf(weight, critical_path = true) AS path_on,
    countIf(critical_path = true AND critical_path_seconds IS NOT NULL) AS path_timed_runs,
    quantileExactWeightedIf(0.5)(assumeNotNull(critical_path_seconds), thousandths, critical_path = true AND critical_path_seconds IS NOT NULL) AS path_p50
FROM runs
GROUP BY name`;

/**
 * SPEC §13: the spans of ci_job_runs' rows of the pipelines named (every pipeline of a root's family), each row's
 * parts merged (-Merge, GROUP BY), for the pipelines whose figures the control plane has not written
 * (src/reads/clickhouse-job-runs.ts): the service walks them as whole traces (`rowsOfPipelines`).
 */
const JOB_RUN_SPANS = `
SELECT
    pipeline_id,
    job_id,
    argMaxMerge(gitlab) AS gitlab,
    argMaxMerge(queue) AS queue,
    argMaxMerge(runner) AS runner,
    groupArrayArray(stages) AS stages
FROM ci_job_runs
WHERE project_id = {project:UInt64} AND pipeline_id IN {pipelines:Array(UInt64)}
GROUP BY pipeline_id, job_id`;

type Int64Text = number | string;

/** One job's (or pipeline's) row of ci_job_runs, merged: its spans, each '' in its span id when none arrived. */
interface JobRunTableRow {
  pipeline_id: number | string;
  job_id: number | string;
  gitlab: [string, string, string, Int64Text, Int64Text, string, Record<string, string>];
  queue: [string, string, Int64Text, Int64Text, Record<string, string>];
  runner: [string, string, Int64Text, Int64Text, Record<string, string>];
  stages: Array<[string, string, string, Int64Text, Int64Text]>;
}

interface SpanRow {
  others: number | string;
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

interface JobNameRow {
  name: string;
  runs: number;
  failures: number;
  retries: number;
  duration_p50: number;
  duration_p95: number;
  queue_p50: number;
  queue_p95: number;
  path_known_runs: number | string;
  path_known: number;
  path_on: number;
  path_timed_runs: number | string;
  path_p50: number;
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

/**
 * The spans of ci_job_runs' rows as the critical path's walk reads them (each span once, its latest version): GitLab's
 * with the control plane's mark (the view copies no other), the runner's with the identity the gateway stamps.
 */
function spansOfRows(projectId: number, rows: readonly JobRunTableRow[]): StoredSpan[] {
  const spans: StoredSpan[] = [];
  const stageIds = new Set<string>();
  const span = (
    name: string,
    spanId: string,
    parentSpanId: string,
    start: Int64Text,
    end: Int64Text,
    resource: Record<string, AttributeValue>,
    extra: Partial<StoredSpan> = {},
  ) =>
    spans.push({
      traceId: '',
      spanId,
      parentSpanId,
      name,
      startNanos: BigInt(start),
      endNanos: BigInt(end),
      statusCode: 0,
      statusMessage: '',
      kind: 0,
      traceState: '',
      scopeName: '',
      attributes: {},
      resource,
      ...extra,
    });
  for (const row of rows) {
    const identity: Record<string, AttributeValue> = {
      'ci.project.id': projectId,
      'ci.pipeline.id': Number(row.pipeline_id),
      ...(Number(row.job_id) > 0 ? { 'ci.job.id': Number(row.job_id) } : {}),
    };
    const gitlab = { ...identity, [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value };
    const runner = { 'service.name': 'runner', ...identity };
    const [name, spanId, parent, start, end, traceState, attributesOfSpan] = row.gitlab;
    if (spanId !== '') span(name, spanId, parent, start, end, gitlab, { traceState, attributes: attributes(attributesOfSpan) });
    const [queueId, queueParent, queueStart, queueEnd, queueAttributes] = row.queue;
    if (queueId !== '') span('queue_wait', queueId, queueParent, queueStart, queueEnd, gitlab, { attributes: attributes(queueAttributes) });
    const [runnerId, runnerParent, runnerStart, runnerEnd, runnerAttributes] = row.runner;
    if (runnerId !== '') span('job_execution', runnerId, runnerParent, runnerStart, runnerEnd, runner, { attributes: attributes(runnerAttributes) });
    // A stage sent twice (a runner's retried export) is one span.
    for (const [stageId, stageParent, stageName, stageStart, stageEnd] of row.stages) {
      if (stageIds.has(stageId)) continue;
      stageIds.add(stageId);
      span(stageName, stageId, stageParent, stageStart, stageEnd, runner);
    }
  }
  return spans;
}

/**
 * The rows of job runs of ci_job_runs' rows, by root pipeline: each root's pipelines are one trace to the critical
 * path's walk, as the embedded backend reads them whole.
 */
function rowsOfPipelines(projectId: number, rows: readonly JobRunTableRow[]): JobRunRow[] {
  const rootOf = new Map<string, string>();
  for (const row of rows) {
    if (Number(row.job_id) !== 0) continue;
    const root = row.gitlab[6]['ci.root_pipeline.id'];
    rootOf.set(String(row.pipeline_id), root !== undefined && root !== '' ? root : String(row.pipeline_id));
  }
  const byRoot = new Map<string, JobRunTableRow[]>();
  for (const row of rows) {
    const root = rootOf.get(String(row.pipeline_id)) ?? String(row.pipeline_id);
    const group = byRoot.get(root);
    if (group === undefined) byRoot.set(root, [row]);
    else group.push(row);
  }
  return [...byRoot.values()].flatMap((group) => jobRunsOfTrace(spansOfRows(projectId, group), projectId));
}

function jobSummary(row: JobNameRow): JobSummary {
  return {
    name: row.name,
    runs: round(row.runs, 2),
    failures: round(row.failures, 2),
    retries: round(row.retries, 2),
    duration_seconds: { p50: round(row.duration_p50), p95: round(row.duration_p95) },
    queue_seconds: { p50: round(row.queue_p50), p95: round(row.queue_p95) },
    critical_path: {
      share: Number(row.path_known_runs) === 0 ? null : round(row.path_on / row.path_known, 4),
      p50_seconds: Number(row.path_timed_runs) === 0 ? null : round(row.path_p50),
    },
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
      // CLICKHOUSE_COMPRESSION: in a cluster, a month of job runs (50 MB) crosses the link faster than gzip packs it.
      compression: { response: options.compression === 'gzip', request: false },
      clickhouse_settings: {
        // The server stops a query the caller has given up on; whole seconds, at least one.
        max_execution_time: Math.max(1, Math.ceil(options.timeoutMs / 1000)),
        // The summary header then counts the whole query, not what was read before the first byte was sent.
        wait_end_of_query: 1,
        // A read given up (the worker running it stopped, its connection closed) stops on the server too.
        cancel_http_readonly_queries_on_client_close: 1,
      },
    });
  }

  async pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    return this.trace('locate pipeline', LOCATE_PIPELINE, projectId, pipelineId, window, bound);
  }

  async jobTrace(projectId: number, jobId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    return this.trace('locate job', LOCATE_JOB, projectId, jobId, window, bound, jobId);
  }

  async projectJobs(projectId: number, window: TimeWindow, ref?: string, signal?: AbortSignal): Promise<JobSummary[]> {
    const deadline = Date.now() + this.timeoutMs;
    const params = { project: projectId, ...windowParams(window), ref: ref ?? '' };
    const rows = await this.rows<JobNameRow>('project jobs', PROJECT_JOBS, params, deadline, signal);
    return rows.map(jobSummary).sort(bySummaryOrder);
  }

  async jobRunRows(projectId: number, window: TimeWindow, filter: { readonly ref?: string }, signal?: AbortSignal): Promise<JobRunRow[]> {
    const params = { project: projectId, ...windowParams(window), longest_ms: LONGEST_SPAN_MS, ref: filter.ref ?? '' };
    return inWindow(await this.jobRuns(JOB_RUN_FACTS, params, signal), window, filter.ref);
  }

  async pipelineRunRows(projectId: number, pipelineId: number, window: TimeWindow, signal?: AbortSignal): Promise<JobRunRow[] | null> {
    const params = { project: projectId, pipeline: pipelineId, ...windowParams(window), longest_ms: LONGEST_SPAN_MS };
    const rows = await this.jobRuns(PIPELINE_RUN_FACTS, params, signal);
    return rows.length === 0 ? null : rows;
  }

  async latestEndedRunRows(
    projectId: number,
    latest: { readonly ref: string; readonly source: string; readonly except: number; readonly count: number },
    window: TimeWindow,
    signal?: AbortSignal,
  ): Promise<{ rows: JobRunRow[]; complete: boolean }> {
    const params = { project: projectId, ...windowParams(window), longest_ms: LONGEST_SPAN_MS };
    const found = await this.rows<{ pipeline_id: string }>(
      'latest ended pipelines',
      LATEST_ENDED_PIPELINES,
      { ...params, ref: latest.ref, source: latest.source, except: latest.except, count: latest.count, finished: [...FINISHED_STATUSES] },
      Date.now() + this.timeoutMs,
      signal,
    );
    const pipelines = found.map((row) => Number(row.pipeline_id));
    const rows = pipelines.length === 0 ? [] : await this.jobRuns(PIPELINES_RUN_FACTS, { ...params, pipelines }, signal);
    return { rows, complete: pipelines.length < latest.count };
  }

  /** The job runs of the pipelines a query selects: from their written figures, else (`walked`) from their spans. */
  private async jobRuns(query: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<JobRunRow[]> {
    const deadline = Date.now() + this.timeoutMs;
    const projectId = Number(params.project);
    const facts = await this.rows<JobRunFactsRow>('job run rows', query, params, deadline, signal, {
      format: 'JSONCompactEachRow',
      clickhouse_settings: { output_format_json_quote_64bit_integers: 0 },
    });
    const { rows, walked } = jobRunsOfFacts(projectId, facts);
    if (walked.length > 0) {
      const spans = await this.rows<JobRunTableRow>('job run spans', JOB_RUN_SPANS, { project: projectId, pipelines: walked }, deadline, signal);
      rows.push(...rowsOfPipelines(projectId, spans));
    }
    return rows;
  }

  async close(): Promise<void> {
    await this.client.close();
  }

  private async trace(
    lookup: string,
    locate: string,
    projectId: number,
    id: number,
    window: TimeWindow,
    bound: TraceBound,
    jobId = 0,
  ): Promise<TraceRead | null> {
    const deadline = Date.now() + this.timeoutMs;
    const [place] = await this.rows<TracePlace>(lookup, locate, { project: projectId, id, ...windowParams(window) }, deadline, bound.signal);
    if (place === undefined) return null;
    // A margin for spans the view does not hold (a hosted runner's stages, a program exporting straight to the
    // collector): they run within their job, but clocks differ. The window rule (OVERLAPS) is applied in the query.
    const first = BigInt(place.first_start_ns) - MARGIN_NANOS;
    const last = BigInt(place.last_end_ns) + MARGIN_NANOS;
    const windowFirst = BigInt(Math.floor(window.fromMs - LONGEST_SPAN_MS)) * 1_000_000n;
    const windowLast = BigInt(Math.ceil(window.toMs) + 1) * 1_000_000n;
    const params = {
      trace: place.trace_id,
      first_ns: String(first > windowFirst ? first : windowFirst),
      last_ns: String(last < windowLast ? last : windowLast),
      ...windowParams(window),
      project: projectId,
      job: jobId,
      limit: Math.max(0, Math.floor(bound.limit)),
    };
    const rows = await this.rows<SpanRow>('trace spans', TRACE_SPANS, params, deadline, bound.signal);
    return { spans: rows.map(storedSpan), others: rows.reduce((most, row) => Math.max(most, Number(row.others)), 0) };
  }

  /** One query's rows, given up (the HTTP request aborted, so the server cancels the query) at the deadline or on `signal`. */
  private async rows<Row>(
    query: string,
    sql: string,
    params: Record<string, unknown>,
    deadline: number,
    signal?: AbortSignal,
    // A month of job runs is read as arrays, its 64-bit integers as numbers (each below 2^53): a fifth of the bytes.
    compact?: { format: 'JSONCompactEachRow'; clickhouse_settings: ClickHouseSettings },
  ): Promise<Row[]> {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new ReadsUnavailableError(`ClickHouse: ${query}: no time left of ${this.timeoutMs} ms`);
    if (signal?.aborted === true) throw new ReadsUnavailableError(`ClickHouse: ${query}: the read was given up`);
    try {
      const timeout = AbortSignal.timeout(remaining);
      const result = await this.client.query({
        query: sql,
        query_params: params,
        format: compact?.format ?? 'JSONEachRow',
        ...(compact === undefined ? {} : { clickhouse_settings: compact.clickhouse_settings }),
        abort_signal: signal === undefined ? timeout : AbortSignal.any([timeout, signal]),
      });
      // Each row parsed as its bytes arrive and are decompressed, not once the whole answer is in: parsing a month's
      // 50 MB of rows overlaps its transfer.
      const rows: Row[] = [];
      for await (const batch of result.stream<Row>()) for (const row of batch) rows.push(row.json<Row>());
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
