import { CONTROL_PLANE_MARK } from '../../src/otlp/control-plane-mark';
import type { TimeWindow } from '../../src/reads/trace-reads';

/**
 * The trace-reads data set (issue 36): a month of spans generated in SQL straight into otel_traces, pipelines of 40
 * jobs in four stages across projects, each job a `job` span, its `queue_wait`, the runner's `job_execution` and seven
 * build stages, each pipeline a `pipeline` span (401 spans a pipeline), spread over 30 days ending two hours before
 * `now`. The views (the CI view, ci_job_runs) fill themselves from the insert as they do behind the Collector. Shared
 * by the benches that read it (trace-reads, across), so both measure on the same month.
 */

export const SPANS_PER_PIPELINE = 401;
export const JOBS_PER_PIPELINE = 40;
export const DAY_MS = 86_400_000;
/** Every generated pipeline's span lasts this long. */
export const PIPELINE_MS = 1_700_000;

export interface Month {
  readonly pipelines: number;
  /** Epoch ms the first pipeline was created, and between two pipelines' creations. */
  readonly baseMs: number;
  readonly spacingMs: number;
}

/** Where `spans` spans' pipelines fall: 30 days ending two hours before `now` (otel_traces keeps 30 days). */
export function monthOf(spans: number, now: number): Month {
  const pipelines = Math.floor(spans / SPANS_PER_PIPELINE);
  return { pipelines, baseMs: now - 30 * DAY_MS + 3_600_000, spacingMs: Math.floor((30 * DAY_MS - 3 * 3_600_000) / Math.max(1, pipelines)) };
}

/**
 * otel_traces rows for pipeline p = n / 401 and its span k = n % 401: k = 0 the pipeline, then per job j (0..39)
 * ten spans s: job, queue_wait, job_execution, seven stages. Ids and times derive from (p, k), so parents match.
 */
export const GENERATE_MONTH_SQL = (spans: number, projects: number, baseMs: number, spacingMs: number) => `
INSERT INTO otel.otel_traces
    (Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, ResourceAttributes, ScopeName,
     SpanAttributes, Duration, StatusCode, StatusMessage)
SELECT
    fromUnixTimestamp64Milli(toInt64(start_ms)) AS Timestamp,
    lower(hex(MD5(toString(p)))) AS TraceId,
    lower(hex(substring(MD5(concat(toString(p), ':', toString(k))), 1, 8))) AS SpanId,
    multiIf(k = 0, '',
            s = 0, lower(hex(substring(MD5(concat(toString(p), ':0')), 1, 8))),
            s IN (1, 2), lower(hex(substring(MD5(concat(toString(p), ':', toString(1 + j * 10))), 1, 8))),
            lower(hex(substring(MD5(concat(toString(p), ':', toString(3 + j * 10))), 1, 8)))) AS ParentSpanId,
    if(k = 0, 'ot=th:0', '') AS TraceState,
    if(k = 0, 'pipeline', ['job', 'queue_wait', 'job_execution', 'prepare_executor', 'get_sources', 'restore_cache',
                           'step_script', 'after_script', 'archive_cache', 'upload_artifacts'][s + 1]) AS SpanName,
    if(k = 0, 'Server', 'Internal') AS SpanKind,
    service AS ServiceName,
    mapFilter((key, value) -> value != '', map(
        'service.name', service,
        'ci.project.id', toString(project_id),
        'ci.pipeline.id', toString(pipeline_id),
        'ci.job.id', if(k = 0, '', toString(job_id)),
        'ci.runner.id', if(s >= 2, toString(1 + h % 20), ''),
        -- The control plane's spans (pipeline, job, queue_wait) carry its mark, as pipeline-span-model.ts writes them.
        '${CONTROL_PLANE_MARK.key}', if(k = 0 OR s < 2, '${CONTROL_PLANE_MARK.value}', ''),
        'ci.sampling.reason', 'head')) AS ResourceAttributes,
    if(s >= 2, 'gitlab-ci-runner', 'ci-job-telemetry/pipeline-spans') AS ScopeName,
    mapFilter((key, value) -> value != '', multiIf(
        k = 0, map(
            'ci.pipeline.status', 'success',
            'vcs.ref.head.name', if(p % 4 = 0, 'feature', 'main'),
            'ci.pipeline.span.version', '1',
            'ci.pipeline.critical_path.delay_seconds', '4',
            'ci.pipeline.critical_path.queue_seconds', toString(20 + p % 60),
            'ci.pipeline.critical_path.step_script_seconds', toString(600 + p % 300)),
        s = 0, map(
            'cicd.pipeline.task.name', concat('job-', toString(j)),
            'ci.job.stage', concat('stage-', toString(stage_index)),
            'ci.job.status', status,
            'ci.job.queued_duration_seconds', toString(queue_ms / 1000),
            'ci.pipeline.span.version', '1',
            'ci.job.critical_path', if(j % 10 = 0, 'true', 'false'),
            'ci.job.critical_path_seconds', if(j % 10 = 0, toString((finished_ms - queued_ms) / 1000), ''),
            'ci.job.slack_seconds', if(j % 10 = 0, '0', toString(h % 120))),
        s = 1, map('ci.job.queued_duration_seconds', toString(queue_ms / 1000), 'ci.runner.type', 'instance_type'),
        s = 2, map('ci.job.id', toString(job_id), 'ci.project.id', toString(project_id), 'ci.pipeline.id', toString(pipeline_id),
                   'ci.job.status', status),
        map('', ''))) AS SpanAttributes,
    toUInt64(end_ms - start_ms) * 1000000 AS Duration,
    if(s IN (0, 2) AND status = 'failed', 'Error', 'Unset') AS StatusCode,
    if(s IN (0, 2) AND status = 'failed', 'script_failure', '') AS StatusMessage
FROM
(
    SELECT
        number AS n,
        intDiv(n, ${SPANS_PER_PIPELINE}) AS p,
        n % ${SPANS_PER_PIPELINE} AS k,
        if(k = 0, 0, intDiv(k - 1, 10)) AS j,
        if(k = 0, -1, (toInt64(k) - 1) % 10) AS s,
        100000 + p AS pipeline_id,
        1 + p % ${projects} AS project_id,
        1000000 + p * ${JOBS_PER_PIPELINE} + j AS job_id,
        if(s >= 2, 'runner', 'gitlab-ci') AS service,
        cityHash64(p, j) AS h,
        if(h % 20 = 0, 'failed', 'success') AS status,
        intDiv(j, 10) AS stage_index,
        toInt64(${baseMs}) + toInt64(p) * ${spacingMs} AS created_ms,
        created_ms + stage_index * 400000 + (j % 10) * 1000 + 2000 AS queued_ms,
        toInt64(5000 + h % 30000) AS queue_ms,
        queued_ms + queue_ms AS picked_ms,
        [toInt64(3000 + h % 2000), 2000, 4000, toInt64(60000 + h % 240000), 1000, 2000, 1000] AS stage_ms,
        picked_ms + arraySum(stage_ms) AS finished_ms,
        multiIf(k = 0, created_ms, s IN (0, 1), queued_ms, s = 2, picked_ms,
                picked_ms + arraySum(arraySlice(stage_ms, 1, s - 3))) AS start_ms,
        multiIf(k = 0, created_ms + ${PIPELINE_MS}, s = 1, picked_ms, s IN (0, 2), finished_ms,
                start_ms + stage_ms[s - 2]) AS end_ms
    FROM numbers(${spans})
)`;

/** The generated pipeline p's own times, as GitLab passes them. */
export const pipelineWindow = (p: number, baseMs: number, spacingMs: number): TimeWindow => {
  const created = baseMs + p * spacingMs;
  return { fromMs: created, toMs: created + PIPELINE_MS };
};
