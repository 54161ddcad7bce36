-- ClickHouse schema of the CI Job Telemetry stack, run once by the ClickHouse image on an empty data
-- directory (docker-compose.yml mounts this folder at /docker-entrypoint-initdb.d) and by the tests on
-- an embedded engine (test/e2e/stack-clickhouse.e2e-spec.ts). It can be run again on an existing
-- install, and that is how one is upgraded (see the ALTER TABLE below):
--   clickhouse-client --user otel --password "$CLICKHOUSE_PASSWORD" --multiquery < 01-ci-job-telemetry.sql

CREATE DATABASE IF NOT EXISTS otel;

-- The table the Collector's clickhouse exporter writes spans to. Its columns and types are the
-- exporter's (collector-contrib 0.136, Map attributes); the exporter inserts by column name. It is
-- created here and the exporter runs with create_schema: false, because the materialized view below
-- can only be created once its source table exists, and it must exist before the first span arrives:
-- a view only sees rows inserted after it was created.
CREATE TABLE IF NOT EXISTS otel.otel_traces
(
    Timestamp          DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId            String CODEC(ZSTD(1)),
    SpanId             String CODEC(ZSTD(1)),
    ParentSpanId       String CODEC(ZSTD(1)),
    TraceState         String CODEC(ZSTD(1)),
    SpanName           LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind           LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName        LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName          String CODEC(ZSTD(1)),
    ScopeVersion       String CODEC(ZSTD(1)),
    SpanAttributes     Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration           UInt64 CODEC(ZSTD(1)),
    StatusCode         LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage      String CODEC(ZSTD(1)),
    Events Nested
    (
        Timestamp  DateTime64(9),
        Name       LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested
    (
        TraceId    String,
        SpanId     String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
TTL toDateTime(Timestamp) + INTERVAL 30 DAY
SETTINGS ttl_only_drop_parts = 1;

-- One row per CI span: what every dashboard query reads. Identity columns are numbers so that panels
-- filter and group by them cheaply. A CI span is one with a project id and a job id (the runner's spans,
-- whatever a job exports through the gateway, and the control plane's job, queue_wait and bridge spans)
-- or, with no job id, a pipeline id: the control plane's pipeline spans, whose job_id is 0. A span
-- without a project id is not from CI and is not here.
CREATE TABLE IF NOT EXISTS otel.ci_job_telemetry_traces
(
    start           DateTime64(9) CODEC(Delta, ZSTD(1)),
    trace_id        String CODEC(ZSTD(1)),
    span_id         String CODEC(ZSTD(1)),
    parent_span_id  String CODEC(ZSTD(1)),
    project_id      UInt64,
    pipeline_id     UInt64,
    job_id          UInt64,
    runner_id       UInt64,
    runner_type     LowCardinality(String),
    service_name    LowCardinality(String),
    span_name       LowCardinality(String),
    job_name        LowCardinality(String),
    status_code     LowCardinality(String),
    status_message  String CODEC(ZSTD(1)),
    job_status      LowCardinality(String),
    pipeline_status LowCardinality(String),
    duration_ns     UInt64,
    span_version    UInt64,
    sampling_reason LowCardinality(String) DEFAULT 'head',
    adjusted_count  Float64 DEFAULT 1,
    job_stage       LowCardinality(String),
    queued_seconds  Float64,
    ref             LowCardinality(String),
    critical_path   Nullable(Bool),
    slack_seconds   Nullable(Float64),
    critical_path_seconds Nullable(Float64),
    critical_path_parts Map(LowCardinality(String), Float64),
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_job_id job_id TYPE minmax GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(start)
ORDER BY (project_id, pipeline_id, job_id, start)
TTL toDateTime(start) + INTERVAL 90 DAY
SETTINGS ttl_only_drop_parts = 1;

-- Issue 19 added runner_type, job_name, status_message and pipeline_status (the control plane's spans:
-- queue wait by runner type, job names in the waterfall, pipeline results). A table created before has
-- none of them, and CREATE TABLE IF NOT EXISTS above leaves it as it is: these add them, in the places a
-- new table has them (a metadata change; rows already there read ''). On a table that has them they do
-- nothing.
ALTER TABLE otel.ci_job_telemetry_traces
    ADD COLUMN IF NOT EXISTS runner_type LowCardinality(String) AFTER runner_id,
    ADD COLUMN IF NOT EXISTS job_name LowCardinality(String) AFTER span_name,
    ADD COLUMN IF NOT EXISTS status_message String CODEC(ZSTD(1)) AFTER status_code,
    ADD COLUMN IF NOT EXISTS pipeline_status LowCardinality(String) AFTER job_status;

-- Issue 27: a pipeline span (and a bridge span, drawn from its child pipeline) is emitted again, with the
-- same span id, each time the pipeline's story changes (a retried job, a manual job played later), so this
-- table holds one row per version of it; span_version is its ci.pipeline.span.version (0 for every other
-- span, and for rows written before). The engine stays a MergeTree: an engine cannot be ALTERed, and a
-- ReplacingMergeTree would only collapse versions at some merge anyway. Readers take the latest version
-- through ci_job_telemetry_spans below, or with ORDER BY span_version DESC LIMIT 1 BY span_id.
ALTER TABLE otel.ci_job_telemetry_traces
    ADD COLUMN IF NOT EXISTS span_version UInt64 AFTER duration_ns;

-- Issue 28 (outcome-based sampling, SPEC §11): why a span was kept, and how many pipelines it stands for.
-- A sample no longer has one rate: failed and slow pipelines are kept whole (th:0) while the others are
-- head-sampled (th:e666666666666 at 10 %), so a count of rows overstates what outcome sampling keeps.
-- Rows written before have no tracestate left to read: they count 1 each, and were head-sampled.
ALTER TABLE otel.ci_job_telemetry_traces
    ADD COLUMN IF NOT EXISTS sampling_reason LowCardinality(String) DEFAULT 'head' AFTER span_version,
    ADD COLUMN IF NOT EXISTS adjusted_count Float64 DEFAULT 1 AFTER sampling_reason;

-- Issue 36 (reading traces, SPEC §12): what a project's jobs summary and the critical path's panels read
-- without opening a trace. On job spans: the stage, the queue wait (ci.job.queued_duration_seconds), and,
-- once the control plane has computed the pipeline's critical path at its end, whether the job is on it
-- (ci.job.critical_path), its time on it (ci.job.critical_path_seconds) and the slack of a job off it
-- (ci.job.slack_seconds); NULL where not written (rows from before, spans written before the pipeline ended).
-- On pipeline spans: the ref (vcs.ref.head.name) and the path's time by part, from the attributes
-- ci.pipeline.critical_path.<part>_seconds (delay, manual_wait, retry_wait, queue, run: docs/reads.md "Attributes").
-- The minmax index on job_id lets a lookup by project and job id (ORDER BY has pipeline_id between them)
-- skip every granule but the job's own: GitLab's job ids grow with its pipeline ids. Parts written before
-- it was added have no index until MATERIALIZE INDEX; a lookup then reads the project's rows in its window.
ALTER TABLE otel.ci_job_telemetry_traces
    ADD COLUMN IF NOT EXISTS job_stage LowCardinality(String) AFTER adjusted_count,
    ADD COLUMN IF NOT EXISTS queued_seconds Float64 AFTER job_stage,
    ADD COLUMN IF NOT EXISTS ref LowCardinality(String) AFTER queued_seconds,
    ADD COLUMN IF NOT EXISTS critical_path Nullable(Bool) AFTER ref,
    ADD COLUMN IF NOT EXISTS slack_seconds Nullable(Float64) AFTER critical_path,
    ADD COLUMN IF NOT EXISTS critical_path_seconds Nullable(Float64) AFTER slack_seconds,
    ADD COLUMN IF NOT EXISTS critical_path_parts Map(LowCardinality(String), Float64) AFTER critical_path_seconds,
    ADD INDEX IF NOT EXISTS idx_job_id job_id TYPE minmax GRANULARITY 1;

-- Identity is read from the resource first: the gateway overwrites the resource's ci.* attributes with
-- the grant's values on every span it forwards, including the runner's stage spans and whatever a
-- program inside the job exports, which carry no ci.* span attributes. GitLab Runner itself writes
-- its identity as span attributes of job_execution (ci.job.id, ci.project.id, ci.runner.id as
-- integers, ci.pipeline.id as a string; the exporter stores every value as text), which is all a span
-- has when a hosted runner exports straight to the Collector. The control plane's spans (service.name
-- gitlab-ci by default) carry their identity both ways; a pipeline span has no ci.job.id and no
-- ci.runner.id. runner_type is the span's ci.runner.type (job and queue_wait spans: instance_type,
-- group_type or project_type), else the resource's.
--
-- Dropped and created again rather than CREATE ... IF NOT EXISTS, so that running this file on an
-- existing install replaces an older definition (the one before issue 19 dropped every span without a
-- job id, pipeline spans included). Spans inserted between the two statements are not copied; spans
-- inserted before the upgrade are not copied again either: the view only sees new inserts.
-- (Not CREATE OR REPLACE MATERIALIZED VIEW: releases before ClickHouse PR #100539, 25.8 among them,
-- read that as an ordinary view, which copies nothing.)
DROP VIEW IF EXISTS otel.ci_job_telemetry_traces_mv;
CREATE MATERIALIZED VIEW otel.ci_job_telemetry_traces_mv TO otel.ci_job_telemetry_traces AS
SELECT
    Timestamp AS start,
    TraceId AS trace_id,
    SpanId AS span_id,
    ParentSpanId AS parent_span_id,
    toUInt64OrZero(if(ResourceAttributes['ci.project.id'] != '', ResourceAttributes['ci.project.id'], SpanAttributes['ci.project.id'])) AS project_id,
    toUInt64OrZero(if(ResourceAttributes['ci.pipeline.id'] != '', ResourceAttributes['ci.pipeline.id'], SpanAttributes['ci.pipeline.id'])) AS pipeline_id,
    toUInt64OrZero(if(ResourceAttributes['ci.job.id'] != '', ResourceAttributes['ci.job.id'], SpanAttributes['ci.job.id'])) AS job_id,
    toUInt64OrZero(if(ResourceAttributes['ci.runner.id'] != '', ResourceAttributes['ci.runner.id'], SpanAttributes['ci.runner.id'])) AS runner_id,
    if(SpanAttributes['ci.runner.type'] != '', SpanAttributes['ci.runner.type'], ResourceAttributes['ci.runner.type']) AS runner_type,
    ServiceName AS service_name,
    SpanName AS span_name,
    -- The job's name on the control plane's job spans (cicd.pipeline.task.name).
    SpanAttributes['cicd.pipeline.task.name'] AS job_name,
    -- The exporter writes Ok/Error/Unset; releases before 0.120 wrote STATUS_CODE_OK and so on.
    multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'Error', StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'Ok', 'Unset') AS status_code,
    -- What failed: a job span's failure reason, a pipeline span's `job name: failure reason` list.
    StatusMessage AS status_message,
    SpanAttributes['ci.job.status'] AS job_status,
    -- GitLab's status of a pipeline span: success, failed, canceled, skipped.
    SpanAttributes['ci.pipeline.status'] AS pipeline_status,
    Duration AS duration_ns,
    toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']) AS span_version,
    -- head, failed, slow, queued or no_outcome: the gateway writes it on every resource it forwards; a
    -- span that reached the Collector some other way (a hosted runner's) was head-sampled.
    multiIf(ResourceAttributes['ci.sampling.reason'] != '', ResourceAttributes['ci.sampling.reason'],
            SpanAttributes['ci.sampling.reason'] != '', SpanAttributes['ci.sampling.reason'], 'head') AS sampling_reason,
    -- The adjusted count of OpenTelemetry's consistent probability sampling: the tracestate's `ot` entry
    -- (a W3C list, `key=value` by commas, other vendors' entries anywhere) holds `th:T` among `;`-separated
    -- sub-keys, T being 1 to 14 lowercase hex digits of a 56-bit rejection threshold, right-padded with
    -- zeros. Kept with probability (2^56 - T) / 2^56, so it stands for 2^56 / (2^56 - T) spans. No th, th:0
    -- (kept by outcome) or a malformed one (which the sampling spec says to ignore) count 1. The runner's
    -- own spans carry no tracestate: a pipeline's weight is its pipeline span's, which always carries it.
    72057594037927936 / (72057594037927936 - reinterpretAsUInt64(reverse(unhex(rightPad(
        extract(concat(';', trimRight(extract(TraceState, '(?:^|,)[ \t]*ot=([^,]*)')), ';'), ';th:([0-9a-f]{1,14});'),
        14, '0'))))) AS adjusted_count,
    SpanAttributes['ci.job.stage'] AS job_stage,
    toFloat64OrZero(SpanAttributes['ci.job.queued_duration_seconds']) AS queued_seconds,
    SpanAttributes['vcs.ref.head.name'] AS ref,
    -- The exporter writes a bool as true/false.
    multiIf(SpanAttributes['ci.job.critical_path'] = 'true', true, SpanAttributes['ci.job.critical_path'] = 'false', false, NULL) AS critical_path,
    toFloat64OrNull(SpanAttributes['ci.job.slack_seconds']) AS slack_seconds,
    toFloat64OrNull(SpanAttributes['ci.job.critical_path_seconds']) AS critical_path_seconds,
    -- ci.pipeline.critical_path.step_script_seconds = 12.5 becomes {'step_script': 12.5}.
    mapApply((key, seconds) -> (substring(key, 27, length(key) - 26 - 8), toFloat64OrZero(seconds)),
             mapFilter((key, seconds) -> startsWith(key, 'ci.pipeline.critical_path.') AND endsWith(key, '_seconds'), SpanAttributes))
        AS critical_path_parts
FROM otel.otel_traces
WHERE project_id > 0 AND (job_id > 0 OR pipeline_id > 0) AND TraceId != ''
  -- GitLab's account of a job or pipeline only from the control plane (docs/reads.md "Trust"): a span named as one of
  -- its spans without its mark (a hosted runner's program writing straight to the collector) is not copied here.
  AND (SpanName NOT IN ('pipeline', 'bridge', 'job', 'queue_wait') OR ResourceAttributes['ci.telemetry.emitter'] = 'control_plane');

-- What users look at: one row per span, its latest version (the highest span_version; for a span sent
-- twice with no version, either copy). Grouped by the span's identity, which no version changes, so that
-- a filter on any of those columns (a trace, a project, a pipeline, span_name) is applied before the
-- grouping and reads only its rows. start is not among them: without webhooks a later version can start
-- earlier (a job queued earlier reported later). Dashboard panels that filter on time read the table and
-- keep the latest version themselves, after their time filter.
CREATE OR REPLACE VIEW otel.ci_job_telemetry_spans AS
SELECT
    trace_id,
    span_id,
    project_id,
    pipeline_id,
    job_id,
    service_name,
    span_name,
    argMax(start, version) AS start,
    argMax(parent_span_id, version) AS parent_span_id,
    argMax(runner_id, version) AS runner_id,
    argMax(runner_type, version) AS runner_type,
    argMax(job_name, version) AS job_name,
    argMax(status_code, version) AS status_code,
    argMax(status_message, version) AS status_message,
    argMax(job_status, version) AS job_status,
    argMax(pipeline_status, version) AS pipeline_status,
    argMax(duration_ns, version) AS duration_ns,
    max(version) AS span_version,
    argMax(sampling_reason, version) AS sampling_reason,
    argMax(adjusted_count, version) AS adjusted_count,
    argMax(job_stage, version) AS job_stage,
    argMax(queued_seconds, version) AS queued_seconds,
    argMax(ref, version) AS ref,
    argMax(critical_path, version) AS critical_path,
    argMax(slack_seconds, version) AS slack_seconds,
    argMax(critical_path_seconds, version) AS critical_path_seconds,
    argMax(critical_path_parts, version) AS critical_path_parts,
    -- How many versions of the span arrived: more than one for a pipeline that finished again.
    count() AS versions
-- Under another name, so that the result's span_version (an aggregate) does not shadow the column.
FROM (SELECT *, span_version AS version FROM otel.ci_job_telemetry_traces)
GROUP BY trace_id, span_id, project_id, pipeline_id, job_id, service_name, span_name;

-- Issue 58 (SPEC §13, across pipelines): one row per job run, what every read across pipelines (compare,
-- regressions, waste, runner queues) reads instead of all spans. A job's facts arrive in several spans written
-- at different times (the control plane's job span at the job's end and again with the critical path at the
-- root's end, its queue wait at the pickup, the runner's job_execution and its build stages when the runner
-- exports), so the row is an aggregate each of them fills with its part, merged by ClickHouse and, whatever has
-- not been merged yet, at read time (GROUP BY with the -Merge combinators).
--
-- Ordered by (project_id, pipeline_id, job_id): every span of a job names all three, and GitLab allocates
-- pipeline ids in the order it creates pipelines, so within a project the rows are in the order of their
-- pipelines' creation; a read finds the pipelines created in its window by first_start_ms (its minmax index
-- skips every granule of other weeks) and reads their rows by primary key. job_id 0 is the pipeline's own row
-- (its span), a trigger job's row holds its bridge span: with them the rows hold every span the critical
-- path's walk reads (src/critical-path). A read across a month reads the compact columns (job_facts and the
-- rest below): the walk's figures the control plane wrote on each job span at its root's end, the runner's
-- stages by part, so no trace is walked again (src/reads/clickhouse-job-runs.ts). Only the pipelines whose
-- figures were not written (still running, a hook after the root's end) are read as spans and walked, as a
-- whole trace is (src/across/job-runs-of-trace.ts): one result on both backends.
--
-- A span that names no job or project (a hosted runner's stages, exported straight to the Collector, never
-- stamped by the gateway) cannot be placed in a row: such a job's run is `other` here (docs/reads.md).
CREATE TABLE IF NOT EXISTS otel.ci_job_runs
(
    project_id      UInt64,
    pipeline_id     UInt64,
    job_id          UInt64,
    -- The day of the spans that filled this part of the row: what partitions and expires it. Rows of one job
    -- written on two days are two parts of it, merged when read.
    day             Date,
    -- The earliest start of those spans, epoch ms: a pipeline row's is the pipeline's creation.
    first_start_ms  SimpleAggregateFunction(min, Int64),
    -- The pipeline's ci.root_pipeline.id (pipeline rows only; 0 elsewhere): a read takes a root's child pipelines with it.
    root_pipeline_id SimpleAggregateFunction(max, UInt64),
    -- GitLab's account, the control plane's pipeline, bridge or job span in its latest version (its
    -- ci.pipeline.span.version): name, span id, parent span id, start and end (ns), tracestate, attributes.
    gitlab          AggregateFunction(argMax, Tuple(String, String, String, Int64, Int64, String, Map(String, String)), UInt64),
    -- The job's queue wait (the control plane's, at its pickup) that ended last: span id, parent, start, end, attributes.
    queue           AggregateFunction(argMax, Tuple(String, String, Int64, Int64, Map(String, String)), Int64),
    -- The runner's job_execution that ended last (a runner that exported twice): span id, parent, start, end, attributes.
    runner          AggregateFunction(argMax, Tuple(String, String, Int64, Int64, Map(String, String)), Int64),
    -- The runner's other spans, its build stages: span id, parent (their job_execution), name, start, end.
    stages          SimpleAggregateFunction(groupArrayArray, Array(Tuple(String, String, String, Int64, Int64))),
    -- The same facts again, compact: what a read across a month reads (numbers and short texts, never the spans'
    -- attribute maps above, which only the rows of a pipeline whose figures were not written are read for). Plain
    -- tuples merged by max() with the version first, so the latest version wins as argMax would, and a read takes
    -- them as they are stored (FINAL), with no aggregate state to decode.
    -- A job's, from its span: its version, name, stage, status, failure reason, allow_failure, runner id, runner
    -- type, runner tags (JSON text), created_at, start and end (ns), GitLab's queued duration (s), then the walk's
    -- figures the control plane writes at the root's end (docs/reads.md "Attributes"; '' where not written): wait
    -- (s), waiting for, queue (s), run (s), attempt, retried, on the path, slack (s).
    job_facts       SimpleAggregateFunction(max, Tuple(UInt64, String, String, String, String, String, String, String, String,
                        String, Int64, Int64, String, String, String, String, String, String, String, String, String)),
    -- A pipeline's, from its span: its version, ref, sha, source, status, start and end (ns), parent span id ('' for
    -- a root pipeline), tracestate.
    pipeline_facts  SimpleAggregateFunction(max, Tuple(UInt64, String, String, String, String, Int64, Int64, String, String)),
    -- The queue wait that ended last: its end (ns); and the runner's job_execution that ended last: its end (ns),
    -- span id, start (ns), the pipeline source it read (CI_PIPELINE_SOURCE).
    queue_end       SimpleAggregateFunction(max, Int64),
    execution       SimpleAggregateFunction(max, Tuple(Int64, String, Int64, String)),
    -- The runner's build stages again, compact: span id and parent span id hashed (cityHash64), the part of the run
    -- the stage counts for (1-based in src/critical-path's RUNNER_PARTS: 1 prepare_executor … 9 other; the stage
    -- names below are its STAGE_PARTS, and a test holds them equal), start and end in ms.
    stage_parts     SimpleAggregateFunction(groupArrayArray, Array(Tuple(UInt64, UInt64, UInt8, Int64, Int64))),
    INDEX idx_first_start first_start_ms TYPE minmax GRANULARITY 1
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (project_id, pipeline_id, job_id)
TTL day + INTERVAL 90 DAY
SETTINGS ttl_only_drop_parts = 1;

-- Dropped and created again, as the CI view above, so that running this file again replaces the definition.
-- Identity as the CI view reads it (the resource's first, the gateway's stamp); GitLab's account only from
-- the control plane (its mark), as everywhere readers trust it.
DROP VIEW IF EXISTS otel.ci_job_runs_mv;
CREATE MATERIALIZED VIEW otel.ci_job_runs_mv TO otel.ci_job_runs AS
SELECT
    toUInt64OrZero(if(ResourceAttributes['ci.project.id'] != '', ResourceAttributes['ci.project.id'], SpanAttributes['ci.project.id'])) AS project_id,
    toUInt64OrZero(if(ResourceAttributes['ci.pipeline.id'] != '', ResourceAttributes['ci.pipeline.id'], SpanAttributes['ci.pipeline.id'])) AS pipeline_id,
    toUInt64OrZero(if(ResourceAttributes['ci.job.id'] != '', ResourceAttributes['ci.job.id'], SpanAttributes['ci.job.id'])) AS job_id,
    toDate(Timestamp) AS day,
    min(intDiv(toUnixTimestamp64Nano(Timestamp), 1000000)) AS first_start_ms,
    maxIf(toUInt64OrZero(SpanAttributes['ci.root_pipeline.id']), SpanName = 'pipeline') AS root_pipeline_id,
    argMaxStateIf(
        (toString(SpanName), SpanId, ParentSpanId, toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
         TraceState, CAST(SpanAttributes, 'Map(String, String)')),
        toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']),
        SpanName IN ('pipeline', 'bridge', 'job')) AS gitlab,
    argMaxStateIf(
        (SpanId, ParentSpanId, toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), CAST(SpanAttributes, 'Map(String, String)')),
        toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
        SpanName = 'queue_wait') AS queue,
    argMaxStateIf(
        (SpanId, ParentSpanId, toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), CAST(SpanAttributes, 'Map(String, String)')),
        toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
        SpanName = 'job_execution') AS runner,
    groupArrayIf(
        (SpanId, ParentSpanId, toString(SpanName), toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration)),
        SpanName NOT IN ('pipeline', 'bridge', 'job', 'queue_wait', 'job_execution')) AS stages,
    maxIf(
        (toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']),
         SpanAttributes['cicd.pipeline.task.name'], SpanAttributes['ci.job.stage'], SpanAttributes['ci.job.status'],
         SpanAttributes['ci.job.failure_reason'], SpanAttributes['ci.job.allow_failure'],
         if(SpanAttributes['cicd.worker.id'] != '', SpanAttributes['cicd.worker.id'],
            if(ResourceAttributes['ci.runner.id'] != '', ResourceAttributes['ci.runner.id'], SpanAttributes['ci.runner.id'])),
         SpanAttributes['ci.runner.type'], SpanAttributes['ci.runner.tags'], SpanAttributes['ci.job.created_at'],
         toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
         SpanAttributes['ci.job.queued_duration_seconds'],
         SpanAttributes['ci.job.critical_path.wait_seconds'], SpanAttributes['ci.job.critical_path.waiting_for'],
         SpanAttributes['ci.job.critical_path.queue_seconds'], SpanAttributes['ci.job.critical_path.run_seconds'],
         SpanAttributes['ci.job.attempt'], SpanAttributes['ci.job.retried'],
         SpanAttributes['ci.job.critical_path'], SpanAttributes['ci.job.slack_seconds']),
        SpanName = 'job') AS job_facts,
    maxIf(
        (toUInt64OrZero(SpanAttributes['ci.pipeline.span.version']),
         SpanAttributes['vcs.ref.head.name'], SpanAttributes['vcs.ref.head.revision'], SpanAttributes['ci.pipeline.source'],
         SpanAttributes['ci.pipeline.status'], toUnixTimestamp64Nano(Timestamp), toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
         ParentSpanId, TraceState),
        SpanName = 'pipeline') AS pipeline_facts,
    maxIf(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), SpanName = 'queue_wait') AS queue_end,
    maxIf(
        (toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), SpanId, toUnixTimestamp64Nano(Timestamp), SpanAttributes['ci.pipeline.source']),
        SpanName = 'job_execution') AS execution,
    groupArrayIf(
        (cityHash64(SpanId), cityHash64(ParentSpanId),
         toUInt8(transform(toString(SpanName),
             ['prepare_executor', 'prepare_script', 'pull_image', 'get_sources', 'clear_worktree', 'restore_cache',
              'download_artifacts', 'step_script', 'build_script', 'step_run', 'after_script', 'archive_cache',
              'archive_cache_on_failure', 'upload_artifacts', 'upload_artifacts_on_success', 'upload_artifacts_on_failure'],
             [1, 1, 2, 3, 3, 4, 4, 5, 5, 5, 6, 7, 7, 8, 8, 8], 9)),
         intDiv(toUnixTimestamp64Nano(Timestamp) + 500000, 1000000),
         intDiv(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration) + 500000, 1000000)),
        SpanName NOT IN ('pipeline', 'bridge', 'job', 'queue_wait', 'job_execution')) AS stage_parts
FROM otel.otel_traces
WHERE TraceId != ''
  AND (
        -- GitLab's account of a pipeline, a trigger job, a job and its queue wait: the control plane's.
        (SpanName IN ('pipeline', 'bridge', 'job', 'queue_wait') AND ResourceAttributes['ci.telemetry.emitter'] = 'control_plane')
        -- The runner's: its job_execution and the build stages under it (its resource's service.name is `runner`).
        OR SpanName = 'job_execution'
        OR (ServiceName = 'runner' AND SpanName NOT IN ('pipeline', 'bridge', 'job', 'queue_wait'))
      )
GROUP BY project_id, pipeline_id, job_id, day
HAVING project_id > 0 AND pipeline_id > 0;
