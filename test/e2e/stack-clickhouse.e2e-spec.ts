import { CONTROL_PLANE_MARK } from '../../src/otlp/control-plane-mark';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD_STAGES, exportJobAsRunner } from '../../simulator/stock-runner';
import { pickUpPipelineJob, PickedUpJob } from '../helpers/ci-pipeline';
import { ClickHouse, ClickHouseRow, startClickHouse } from '../helpers/clickhouse';
import { dateTime64, insertOtelTraces, otelSpanRow, OtelTracesRow, otelTracesRows } from '../helpers/clickhouse-exporter';
import { PipelinesRun, runPipelines, stageSeconds } from '../helpers/clickhouse-pipelines';
import { HEAD_10_PERCENT, sampledPipelineRows, sampledTraceId, tenPercentSample } from '../helpers/clickhouse-sampling';
import type { WebhookSecret } from '../helpers/gitlab-webhooks';
import type { OtlpSink } from '../helpers/otlp-sink';
import { waitFor } from '../helpers/ports';
import type { ServiceProcess } from '../helpers/service';
import { startWorld, World } from '../helpers/world';

const SCHEMA = readFileSync(join(__dirname, '..', '..', 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8');

/**
 * The columns and types the Collector's clickhouse exporter (collector-contrib 0.136, Map
 * attributes) creates and inserts into: a fact carried over, so a schema of ours that drifts from
 * what the exporter writes fails here and not on the first insert in production.
 */
const EXPORTER_COLUMNS: Array<[string, string]> = [
  ['Timestamp', 'DateTime64(9)'],
  ['TraceId', 'String'],
  ['SpanId', 'String'],
  ['ParentSpanId', 'String'],
  ['TraceState', 'String'],
  ['SpanName', 'LowCardinality(String)'],
  ['SpanKind', 'LowCardinality(String)'],
  ['ServiceName', 'LowCardinality(String)'],
  ['ResourceAttributes', 'Map(LowCardinality(String), String)'],
  ['ScopeName', 'String'],
  ['ScopeVersion', 'String'],
  ['SpanAttributes', 'Map(LowCardinality(String), String)'],
  ['Duration', 'UInt64'],
  ['StatusCode', 'LowCardinality(String)'],
  ['StatusMessage', 'String'],
  ['Events.Timestamp', 'Array(DateTime64(9))'],
  ['Events.Name', 'Array(LowCardinality(String))'],
  ['Events.Attributes', 'Array(Map(LowCardinality(String), String))'],
  ['Links.TraceId', 'Array(String)'],
  ['Links.SpanId', 'Array(String)'],
  ['Links.TraceState', 'Array(String)'],
  ['Links.Attributes', 'Array(Map(LowCardinality(String), String))'],
];

/** The view's columns, as a new install creates them and an upgraded one ends up with. */
const VIEW_COLUMNS: Array<[string, string]> = [
  ['start', 'DateTime64(9)'],
  ['trace_id', 'String'],
  ['span_id', 'String'],
  ['parent_span_id', 'String'],
  ['project_id', 'UInt64'],
  ['pipeline_id', 'UInt64'],
  ['job_id', 'UInt64'],
  ['runner_id', 'UInt64'],
  ['runner_type', 'LowCardinality(String)'],
  ['service_name', 'LowCardinality(String)'],
  ['span_name', 'LowCardinality(String)'],
  ['job_name', 'LowCardinality(String)'],
  ['status_code', 'LowCardinality(String)'],
  ['status_message', 'String'],
  ['job_status', 'LowCardinality(String)'],
  ['pipeline_status', 'LowCardinality(String)'],
  ['duration_ns', 'UInt64'],
  ['span_version', 'UInt64'],
  ['sampling_reason', 'LowCardinality(String)'],
  ['adjusted_count', 'Float64'],
  ['job_stage', 'LowCardinality(String)'],
  ['queued_seconds', 'Float64'],
  ['ref', 'LowCardinality(String)'],
  ['critical_path', 'Nullable(Bool)'],
  ['slack_seconds', 'Nullable(Float64)'],
  ['critical_path_seconds', 'Nullable(Float64)'],
  ['critical_path_parts', 'Map(LowCardinality(String), Float64)'],
];

/**
 * The table and view as installs made before issue 19 have them (this file's earlier version, comments
 * left out): no runner_type, job_name, status_message or pipeline_status, and only spans with a job id.
 */
const SCHEMA_BEFORE_ISSUE_19 = `
CREATE TABLE IF NOT EXISTS otel.ci_job_telemetry_traces
(
    start DateTime64(9) CODEC(Delta, ZSTD(1)), trace_id String CODEC(ZSTD(1)), span_id String CODEC(ZSTD(1)),
    parent_span_id String CODEC(ZSTD(1)), project_id UInt64, pipeline_id UInt64, job_id UInt64, runner_id UInt64,
    service_name LowCardinality(String), span_name LowCardinality(String), status_code LowCardinality(String),
    job_status LowCardinality(String), duration_ns UInt64,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1
)
ENGINE = MergeTree PARTITION BY toDate(start) ORDER BY (project_id, pipeline_id, job_id, start)
TTL toDateTime(start) + INTERVAL 90 DAY SETTINGS ttl_only_drop_parts = 1;
CREATE MATERIALIZED VIEW IF NOT EXISTS otel.ci_job_telemetry_traces_mv TO otel.ci_job_telemetry_traces AS
SELECT
    Timestamp AS start, TraceId AS trace_id, SpanId AS span_id, ParentSpanId AS parent_span_id,
    toUInt64OrZero(if(ResourceAttributes['ci.project.id'] != '', ResourceAttributes['ci.project.id'], SpanAttributes['ci.project.id'])) AS project_id,
    toUInt64OrZero(if(ResourceAttributes['ci.pipeline.id'] != '', ResourceAttributes['ci.pipeline.id'], SpanAttributes['ci.pipeline.id'])) AS pipeline_id,
    toUInt64OrZero(if(ResourceAttributes['ci.job.id'] != '', ResourceAttributes['ci.job.id'], SpanAttributes['ci.job.id'])) AS job_id,
    toUInt64OrZero(if(ResourceAttributes['ci.runner.id'] != '', ResourceAttributes['ci.runner.id'], SpanAttributes['ci.runner.id'])) AS runner_id,
    ServiceName AS service_name, SpanName AS span_name,
    multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'Error', StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'Ok', 'Unset') AS status_code,
    SpanAttributes['ci.job.status'] AS job_status, Duration AS duration_ns
FROM otel.otel_traces
WHERE job_id > 0 AND project_id > 0 AND TraceId != '';`;

/** otel.otel_traces alone: the part of the schema before the view's table. */
const OTEL_TRACES_ONLY = SCHEMA.slice(0, SCHEMA.indexOf('CREATE TABLE IF NOT EXISTS otel.ci_job_telemetry_traces'));

/** A span that reached the Collector from outside CI: a web service's, exported straight to it. */
function outsideCiRow(template: OtelTracesRow, serviceName: string, resource: Record<string, string>): OtelTracesRow {
  return {
    ...template,
    SpanId: 'feedfacecafebeef',
    ServiceName: serviceName,
    ResourceAttributes: { 'service.name': serviceName, ...resource },
    SpanAttributes: { 'http.route': '/checkout' },
    SpanName: 'GET /checkout',
  };
}

describe('ci_job_telemetry_traces on a real ClickHouse engine (SPEC §9)', () => {
  let clickhouse: ClickHouse;
  let sink: OtlpSink;
  let service: ServiceProcess;
  let world: World;

  beforeAll(async () => {
    world = await startWorld({ clickhouse: true, sink: true, service: true });
    ({ clickhouse, sink, service } = world);
    await clickhouse.query(SCHEMA);
  }, 60_000);
  afterAll(() => world?.stop());

  it("creates otel_traces with exactly the columns and types the Collector's exporter writes", async () => {
    const columns = await clickhouse.query('DESCRIBE TABLE otel.otel_traces');
    expect(columns.map((column) => [column.name, column.type])).toEqual(EXPORTER_COLUMNS);
  });

  it('turns a pipeline a stock runner pushed through the gateway into one row per CI span, and nothing else', async () => {
    const pipelineStart = Date.parse('2026-11-21T10:00:00Z');
    const jobs: Array<{ picked: PickedUpJob; startedAt: number; script: number; status: 'success' | 'failed' }> = [];
    for (const [index, spec] of [
      { jobId: 3001, script: 40, status: 'success' as const },
      { jobId: 3002, script: 75, status: 'failed' as const },
    ].entries()) {
      const picked = await pickUpPipelineJob(service, { jobId: spec.jobId, projectId: 7, pipelineId: 600, runnerId: 17 });
      jobs.push({ picked, startedAt: pipelineStart + index * 120_000, script: spec.script, status: spec.status });
    }
    for (const job of jobs) {
      await exportJobAsRunner(job.picked.tracing, {
        jobId: job.picked.jobId,
        projectId: 7,
        runnerId: 17,
        pipelineId: job.picked.pipelineVariable,
        pipelineSource: 'push',
        executor: 'shell',
        status: job.status,
        startedAt: new Date(job.startedAt),
        stageSeconds: stageSeconds(job.script),
      });
    }
    const expectedSpans = jobs.length * (1 + BUILD_STAGES.length);
    const runnerSpans = () => sink.spans().filter((span) => span.resource['service.name'] === 'runner');
    await waitFor('the runner spans at the sink', async () => (runnerSpans().length >= expectedSpans ? true : undefined));

    // The runner's spans only: the control plane's own (queue_wait here, with the fixture's queued_at) are
    // the next test's, with GitLab's webhooks.
    const exported = sink.exports
      .filter((received) => received.signal === 'traces')
      .flatMap((received) => otelTracesRows(received.body, received.contentType))
      .filter((row) => row.ServiceName === 'runner');
    expect(exported).toHaveLength(expectedSpans);
    const outside = [
      outsideCiRow(exported[0], 'checkout', {}),
      // A runner's own span with no job identity (its process, not a job) is not a CI span either.
      { ...outsideCiRow(exported[0], 'runner', {}), SpanId: 'badc0ffee0ddf00d', SpanName: 'runner_heartbeat' },
    ];
    await insertOtelTraces(clickhouse, [...exported, ...outside]);

    const rows = await clickhouse.query(
      "SELECT trace_id, span_id, parent_span_id, project_id, pipeline_id, job_id, runner_id, service_name, span_name, status_code, job_status, toString(start) AS start, duration_ns FROM otel.ci_job_telemetry_traces ORDER BY start, span_name = 'job_execution' DESC",
    );
    expect(rows).toHaveLength(expectedSpans);
    expect(rows.some((row) => row.span_name === 'GET /checkout' || row.span_name === 'runner_heartbeat')).toBe(false);

    const traceId = jobs[0].picked.tracing.trace_id;
    for (const job of jobs) {
      const jobRows = rows.filter((row) => row.job_id === job.picked.jobId);
      const [execution, ...stages] = jobRows;
      const stages_ = stageSeconds(job.script);
      const total = BUILD_STAGES.reduce((sum, stage) => sum + stages_[stage], 0);
      expect(execution).toMatchObject({
        trace_id: traceId,
        parent_span_id: job.picked.tracing.span_parent_id,
        project_id: 7,
        pipeline_id: 600,
        job_id: job.picked.jobId,
        runner_id: 17,
        service_name: 'runner',
        span_name: 'job_execution',
        status_code: job.status === 'failed' ? 'Error' : 'Unset',
        job_status: job.status,
        start: dateTime64(BigInt(job.startedAt) * 1_000_000n),
        duration_ns: total * 1_000_000_000,
      });
      let stageStart = job.startedAt;
      expect(stages.map((row) => row.span_name)).toEqual([...BUILD_STAGES]);
      for (const [index, stage] of BUILD_STAGES.entries()) {
        expect(stages[index]).toMatchObject({
          trace_id: traceId,
          parent_span_id: execution.span_id,
          project_id: 7,
          pipeline_id: 600,
          job_id: job.picked.jobId,
          runner_id: 17,
          start: dateTime64(BigInt(stageStart) * 1_000_000n),
          duration_ns: stages_[stage] * 1_000_000_000,
        });
        stageStart += stages_[stage] * 1000;
      }
    }
  });
});

describe("ci_job_telemetry_traces holds the control plane's spans too: pipeline, job, queue_wait (issue 19)", () => {
  let clickhouse: ClickHouse;
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let run: PipelinesRun;
  let rows: ClickHouseRow[];
  let world: World;
  // Pipeline Hooks write whole seconds.
  const createdAt = new Date(Math.floor(Date.now() / 1000) * 1000 - 120_000);
  const finishedAt = new Date(createdAt.getTime() + 420_000);

  beforeAll(async () => {
    world = await startWorld({ clickhouse: true, sink: true, webhookSecret: true, service: true });
    ({ clickhouse, sink, webhookSecret: secret, service } = world);
    await clickhouse.query(SCHEMA);
    run = await runPipelines(service, sink, secret, [
      {
        pipelineId: 610,
        projectId: 7,
        status: 'failed',
        createdAt,
        finishedAt,
        jobs: [
          { jobId: 3101, name: 'compile', runnerId: 17, runnerType: 'instance_type', queuedSeconds: 12, scriptSeconds: 30, status: 'success' },
          { jobId: 3102, name: 'rspec', runnerId: 18, runnerType: 'group_type', queuedSeconds: 45, scriptSeconds: 60, status: 'failed' },
        ],
      },
    ]);
    const outside = [
      outsideCiRow(run.rows[0], 'checkout', {}),
      // A pipeline id without a project id is no CI span either.
      { ...outsideCiRow(run.rows[0], 'batch', { 'ci.pipeline.id': '610' }), SpanId: 'c0ffeec0ffeec0ff' },
    ];
    await insertOtelTraces(clickhouse, [...run.rows, ...outside]);
    rows = await clickhouse.query('SELECT * REPLACE (toString(start) AS start) FROM otel.ci_job_telemetry_traces ORDER BY start, job_id, span_name');
  }, 90_000);
  afterAll(() => world?.stop());

  it('has the columns of issue 19: runner_type, job_name, status_message, pipeline_status', async () => {
    const columns = await clickhouse.query('DESCRIBE TABLE otel.ci_job_telemetry_traces');
    expect(columns.map((column) => [column.name, column.type])).toEqual(VIEW_COLUMNS);
  });

  it('holds one row per span of the pipeline, runner and control plane alike (per version), and nothing from outside CI', () => {
    const byName = (name: string) => rows.filter((row) => row.span_name === name);
    expect(byName('pipeline')).toHaveLength(1);
    // Each job span twice: when the job ended, and with the critical path written at the pipeline's end (issue 36).
    expect(byName('job')).toHaveLength(4);
    expect(new Set(byName('job').map((row) => row.span_id)).size).toBe(2);
    expect(byName('job').filter((row) => row.critical_path !== null)).toHaveLength(2);
    expect(byName('queue_wait')).toHaveLength(2);
    expect(byName('job_execution')).toHaveLength(2);
    expect(rows).toHaveLength(1 + 4 + 2 + 2 * (1 + BUILD_STAGES.length));
    expect(rows.filter((row) => row.service_name === 'checkout' || row.service_name === 'batch')).toEqual([]);
  });

  it('keeps the pipeline span, with no job id: project, pipeline, GitLab status, what failed, created to finished', () => {
    const [pipeline] = rows.filter((row) => row.span_name === 'pipeline');
    expect(pipeline).toEqual({
      start: dateTime64(BigInt(createdAt.getTime()) * 1_000_000n),
      trace_id: run.jobs[0].picked.tracing.trace_id,
      span_id: expect.stringMatching(/^[0-9a-f]{16}$/),
      parent_span_id: '',
      project_id: 7,
      pipeline_id: 610,
      job_id: 0,
      runner_id: 0,
      runner_type: '',
      service_name: 'gitlab-ci',
      span_name: 'pipeline',
      job_name: '',
      status_code: 'Error',
      status_message: 'rspec: script_failure',
      job_status: '',
      pipeline_status: 'failed',
      duration_ns: 420 * 1_000_000_000,
      // Its one version (issue 27): the finish in ms, then the status's rank.
      span_version: (finishedAt.getTime() * 8 + 4) * 128,
      // Traced at 100 %: head-sampled, no threshold, standing for itself.
      sampling_reason: 'head',
      adjusted_count: 1,
      job_stage: '',
      queued_seconds: 0,
      ref: 'master',
      // Not a job's: neither on the path nor off it.
      critical_path: null,
      slack_seconds: null,
      critical_path_seconds: null,
      // Written when the pipeline ended (issue 36): rspec, which ended last after 45 s in the queue, is the path.
      critical_path_parts: {
        delay: expect.any(Number),
        manual_wait: 0,
        retry_wait: 0,
        delayed_wait: 0,
        resource_wait: 0,
        queue: expect.closeTo(45, 0),
        run: expect.any(Number),
      },
    });
  });

  it("keeps each job's span and its queue wait, with the runner type that picked it up, the wait as the duration", () => {
    const [pipeline] = rows.filter((row) => row.span_name === 'pipeline');
    for (const job of run.jobs) {
      const jobRow = rows.find((row) => row.span_name === 'job' && row.job_id === job.planned.jobId && row.span_version === 0)!;
      // Its later version says how the job stood to the critical path: rspec on it, compile beside it.
      const written = rows.find((row) => row.span_name === 'job' && row.job_id === job.planned.jobId && row.span_version === pipeline.span_version)!;
      expect({ ...written, critical_path: undefined, critical_path_seconds: undefined, slack_seconds: undefined, span_version: undefined }).toEqual({
        ...jobRow,
        critical_path: undefined,
        critical_path_seconds: undefined,
        slack_seconds: undefined,
        span_version: undefined,
      });
      expect(written.critical_path).toBe(job.planned.name === 'rspec');
      const failed = job.planned.status === 'failed';
      expect(jobRow).toMatchObject({
        start: dateTime64(BigInt(job.queuedAt.getTime()) * 1_000_000n),
        trace_id: pipeline.trace_id,
        // The span the runner's job_execution names as its parent.
        span_id: job.picked.tracing.span_parent_id,
        parent_span_id: pipeline.span_id,
        project_id: 7,
        pipeline_id: 610,
        runner_id: job.planned.runnerId,
        runner_type: job.planned.runnerType,
        service_name: 'gitlab-ci',
        job_name: job.planned.name,
        status_code: failed ? 'Error' : 'Unset',
        status_message: failed ? 'script_failure' : '',
        job_status: job.planned.status,
        pipeline_status: '',
        duration_ns: (job.finishedAt.getTime() - job.queuedAt.getTime()) * 1_000_000,
      });

      const queue = rows.find((row) => row.span_name === 'queue_wait' && row.job_id === job.planned.jobId)!;
      expect(queue).toMatchObject({
        start: dateTime64(BigInt(job.queuedAt.getTime()) * 1_000_000n),
        trace_id: pipeline.trace_id,
        parent_span_id: jobRow.span_id,
        project_id: 7,
        pipeline_id: 610,
        runner_id: job.planned.runnerId,
        runner_type: job.planned.runnerType,
        service_name: 'gitlab-ci',
        status_code: 'Unset',
        job_status: '',
      });
      // From queued_at to the pickup, which happened while the test's request was in flight.
      const [pickedFrom, pickedTo] = job.pickedUpBetween.map((at) => (at - job.queuedAt.getTime()) * 1_000_000);
      expect(queue.duration_ns).toBeGreaterThanOrEqual(job.planned.queuedSeconds * 1_000_000_000);
      expect(queue.duration_ns).toBeGreaterThanOrEqual(pickedFrom);
      expect(queue.duration_ns).toBeLessThanOrEqual(pickedTo);

      // The runner's spans are as they were before issue 19: no runner type, no job name of their own.
      const execution = rows.find((row) => row.span_name === 'job_execution' && row.job_id === job.planned.jobId)!;
      expect(execution).toMatchObject({
        parent_span_id: jobRow.span_id,
        runner_id: job.planned.runnerId,
        runner_type: '',
        service_name: 'runner',
        job_name: '',
        job_status: job.planned.status,
        status_code: failed ? 'Error' : 'Unset',
      });
    }
  });

  it('holds whole trees: every parent is a span of the same trace, and the pipeline is the only root', () => {
    const ids = new Set(rows.map((row) => row.span_id));
    expect(rows.filter((row) => row.parent_span_id === '').map((row) => row.span_name)).toEqual(['pipeline']);
    expect(rows.filter((row) => row.parent_span_id !== '' && !ids.has(row.parent_span_id))).toEqual([]);
    expect(new Set(rows.map((row) => row.trace_id)).size).toBe(1);
  });
});

describe('01-ci-job-telemetry.sql upgrades an install made before issue 19, and runs again harmlessly', () => {
  let clickhouse: ClickHouse;
  const span = (spanId: string, name: string, resource: Record<string, string>, attributes: Record<string, string> = {}): OtelTracesRow =>
    otelSpanRow({
      Timestamp: dateTime64(BigInt(Date.parse('2026-11-21T10:00:00Z')) * 1_000_000n),
      TraceId: 'a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1',
      SpanId: spanId,
      SpanName: name,
      ResourceAttributes: resource,
      SpanAttributes: attributes,
      Duration: '5000000000',
    });
  const job = { 'ci.project.id': '7', 'ci.pipeline.id': '610', 'ci.job.id': '3101', 'ci.runner.id': '17' };

  beforeAll(async () => {
    clickhouse = await startClickHouse();
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it('adds the new columns where a new install has them, keeps the rows, and replaces the view', async () => {
    await clickhouse.query(OTEL_TRACES_ONLY + SCHEMA_BEFORE_ISSUE_19);
    await insertOtelTraces(clickhouse, [
      span('0000000000000001', 'job_execution', { 'service.name': 'runner', ...job }),
      // Dropped by the old view: no job id.
      span('0000000000000002', 'pipeline', {
        'service.name': 'gitlab-ci',
        [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value,
        'ci.project.id': '7',
        'ci.pipeline.id': '610',
      }),
    ]);
    expect(await clickhouse.query('SELECT span_name FROM otel.ci_job_telemetry_traces')).toEqual([{ span_name: 'job_execution' }]);

    await clickhouse.query(SCHEMA);
    const columns = await clickhouse.query('DESCRIBE TABLE otel.ci_job_telemetry_traces');
    expect(columns.map((column) => [column.name, column.type])).toEqual(VIEW_COLUMNS);
    expect(await clickhouse.query("SELECT engine FROM system.tables WHERE database = 'otel' AND name = 'ci_job_telemetry_traces_mv'")).toEqual([
      { engine: 'MaterializedView' },
    ]);

    await insertOtelTraces(clickhouse, [
      span(
        '0000000000000003',
        'pipeline',
        { 'service.name': 'gitlab-ci', [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value, 'ci.project.id': '7', 'ci.pipeline.id': '611' },
        { 'ci.pipeline.status': 'success' },
      ),
      span(
        '0000000000000004',
        'queue_wait',
        { 'service.name': 'gitlab-ci', [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value, ...job, 'ci.job.id': '3111' },
        { 'ci.runner.type': 'instance_type' },
      ),
    ]);
    // Run again, on an install that is current: nothing changes, and the view copies each span once.
    await clickhouse.query(SCHEMA);
    await insertOtelTraces(clickhouse, [
      span('0000000000000005', 'queue_wait', {
        'service.name': 'gitlab-ci',
        [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value,
        ...job,
        'ci.job.id': '3112',
        'ci.runner.type': 'group_type',
      }),
    ]);
    // Written before the upgrade, with no tracestate kept: head-sampled, as every span was then, counting 1.
    expect(await clickhouse.query("SELECT sampling_reason, adjusted_count FROM otel.ci_job_telemetry_traces WHERE span_id = '0000000000000001'")).toEqual([
      { sampling_reason: 'head', adjusted_count: 1 },
    ]);
    // Issue 36: whether on the critical path is unknown for rows from before, and jobs are found by id.
    expect(
      await clickhouse.query("SELECT critical_path, slack_seconds, critical_path_parts FROM otel.ci_job_telemetry_traces WHERE span_id = '0000000000000001'"),
    ).toEqual([{ critical_path: null, slack_seconds: null, critical_path_parts: {} }]);
    expect(
      await clickhouse.query("SELECT name, type FROM system.data_skipping_indices WHERE database = 'otel' AND table = 'ci_job_telemetry_traces' ORDER BY name"),
    ).toEqual([
      { name: 'idx_job_id', type: 'minmax' },
      { name: 'idx_trace_id', type: 'bloom_filter' },
    ]);
    expect(
      await clickhouse.query('SELECT span_id, span_name, pipeline_id, job_id, runner_type, pipeline_status FROM otel.ci_job_telemetry_traces ORDER BY span_id'),
    ).toEqual([
      // Written before the upgrade: the new columns read ''.
      { span_id: '0000000000000001', span_name: 'job_execution', pipeline_id: 610, job_id: 3101, runner_type: '', pipeline_status: '' },
      { span_id: '0000000000000003', span_name: 'pipeline', pipeline_id: 611, job_id: 0, runner_type: '', pipeline_status: 'success' },
      { span_id: '0000000000000004', span_name: 'queue_wait', pipeline_id: 610, job_id: 3111, runner_type: 'instance_type', pipeline_status: '' },
      // ci.runner.type from the resource when the span has none.
      { span_id: '0000000000000005', span_name: 'queue_wait', pipeline_id: 610, job_id: 3112, runner_type: 'group_type', pipeline_status: '' },
    ]);
  });
});

describe('ci_job_telemetry_spans says why a span was kept and how many it stands for (issue 28, SPEC §11)', () => {
  let clickhouse: ClickHouse;
  const createdAt = new Date('2026-11-21T10:00:00Z');
  const viewOf = (where: string) =>
    clickhouse.query(
      `SELECT span_id, span_name, pipeline_id, sampling_reason, adjusted_count FROM otel.ci_job_telemetry_spans WHERE ${where} ORDER BY span_id`,
    );

  beforeAll(async () => {
    clickhouse = await startClickHouse();
    await clickhouse.query(SCHEMA);
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it("copies GitLab's account of a job only from the control plane: a job span written straight to the collector is not in the view (issue 56)", async () => {
    const identity = { 'service.name': 'gitlab-ci', 'ci.project.id': '7', 'ci.pipeline.id': '2950', 'ci.job.id': '29500' };
    const jobRow = (spanId: string, resource: Record<string, string>, status: string) =>
      otelSpanRow({
        Timestamp: dateTime64(BigInt(createdAt.getTime()) * 1_000_000n),
        TraceId: 'd5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5',
        SpanId: spanId,
        SpanName: 'job',
        ResourceAttributes: resource,
        SpanAttributes: { 'ci.job.status': status, 'cicd.pipeline.task.name': 'rspec' },
      });
    // GitLab said failed (the control plane's span); a hosted runner's program wrote a `job` span saying success.
    await insertOtelTraces(clickhouse, [
      jobRow('0000000000002951', { ...identity, [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value }, 'failed'),
      jobRow('0000000000002952', identity, 'success'),
    ]);
    expect(await clickhouse.query('SELECT span_id, job_status FROM otel.ci_job_telemetry_spans WHERE pipeline_id = 2950 ORDER BY span_id')).toEqual([
      { span_id: '0000000000002951', job_status: 'failed' },
    ]);
  });

  it('weighs a pipeline kept by outcome 1 and a head-sampled one 1/p, and reads back the reason', async () => {
    await insertOtelTraces(clickhouse, tenPercentSample(createdAt).flatMap(sampledPipelineRows));
    const pipelines = await viewOf("span_name = 'pipeline'");
    expect(pipelines).toEqual([
      { span_id: '0000000000000af1', span_name: 'pipeline', pipeline_id: 2801, sampling_reason: 'failed', adjusted_count: 1 },
      { span_id: '0000000000000af2', span_name: 'pipeline', pipeline_id: 2802, sampling_reason: 'failed', adjusted_count: 1 },
      { span_id: '0000000000000af3', span_name: 'pipeline', pipeline_id: 2803, sampling_reason: 'failed', adjusted_count: 1 },
      { span_id: '0000000000000af4', span_name: 'pipeline', pipeline_id: 2804, sampling_reason: 'head', adjusted_count: expect.closeTo(10, 9) },
      { span_id: '0000000000000af5', span_name: 'pipeline', pipeline_id: 2805, sampling_reason: 'head', adjusted_count: expect.closeTo(10, 9) },
    ]);
    // The runner's spans carry no tracestate: they count 1, and a pipeline's weight is its pipeline span's.
    expect(await viewOf("span_name = 'job_execution'")).toEqual(
      [2801, 2802, 2803, 2804, 2805].map((pipelineId, index) => ({
        span_id: (pipelineId * 10 + 1).toString(16).padStart(16, '0'),
        span_name: 'job_execution',
        pipeline_id: pipelineId,
        sampling_reason: index < 3 ? 'failed' : 'head',
        adjusted_count: 1,
      })),
    );
  });

  it('reads th wherever the tracestate has it: among other sub-keys, after other vendors, short or padded', async () => {
    const cases: Array<[string, number]> = [
      ['', 1],
      ['ot=th:0', 1],
      // 10 % as SAMPLING.md writes it (13 digits, padded with one zero) and as the decorator hands it out (14).
      ['ot=th:e666666666666;rv:0123456789abcd', 10],
      [HEAD_10_PERCENT, 10],
      ['foo=bar,ot=th:c', 4],
      ['vendor=a:b;th:f , ot=rv:0123456789abcd;th:8 ,other=x', 2],
      ['ot=th:f8', 32],
      // Not a threshold: another vendor's th, a th-like sub-key, uppercase, more than 14 digits.
      ['foo=th:8', 1],
      ['ot=thx:8', 1],
      ['ot=th:E6', 1],
      ['ot=th:123456789abcdef', 1],
    ];
    await insertOtelTraces(
      clickhouse,
      cases.map(([traceState], index) =>
        otelSpanRow({
          Timestamp: dateTime64(BigInt(createdAt.getTime()) * 1_000_000n),
          TraceId: 'd4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4',
          SpanId: `00000000000001${index.toString(16).padStart(2, '0')}`,
          SpanName: 'queue_wait',
          TraceState: traceState,
          ResourceAttributes: {
            'service.name': 'gitlab-ci',
            [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value,
            'ci.project.id': '7',
            'ci.pipeline.id': '2900',
            'ci.job.id': String(29000 + index),
          },
        }),
      ),
    );
    const counts = await viewOf("trace_id = 'd4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4'");
    expect(counts.map((row) => row.adjusted_count)).toEqual(cases.map(([, count]) => expect.closeTo(count, 9)));
  });

  it('takes the reason from the resource, else from the span, else head; and from the latest version of a span', async () => {
    const identity = { 'ci.project.id': '7', 'ci.pipeline.id': '2950' };
    const pipeline = (version: number, resource: Record<string, string>) =>
      otelSpanRow({
        Timestamp: dateTime64(BigInt(createdAt.getTime()) * 1_000_000n),
        TraceId: sampledTraceId(2950),
        SpanId: '0000000000000b86',
        SpanName: 'pipeline',
        TraceState: 'ot=th:0',
        ResourceAttributes: { 'service.name': 'gitlab-ci', [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value, ...identity, ...resource },
        SpanAttributes: { ...identity, 'ci.pipeline.span.version': String(version) },
      });
    const job = (jobId: number, resource: Record<string, string>, span: Record<string, string>) =>
      otelSpanRow({
        Timestamp: dateTime64(BigInt(createdAt.getTime()) * 1_000_000n),
        TraceId: sampledTraceId(2950),
        SpanId: jobId.toString(16).padStart(16, '0'),
        SpanName: 'job_execution',
        ResourceAttributes: { 'service.name': 'runner', ...identity, 'ci.job.id': String(jobId), ...resource },
        SpanAttributes: span,
      });
    await insertOtelTraces(clickhouse, [
      job(29501, { 'ci.sampling.reason': 'slow' }, { 'ci.sampling.reason': 'queued' }),
      job(29502, {}, { 'ci.sampling.reason': 'queued' }),
      // A hosted runner's span that reached the Collector without the gateway.
      job(29503, {}, {}),
      pipeline(1, { 'ci.sampling.reason': 'no_outcome' }),
      pipeline(2, { 'ci.sampling.reason': 'failed' }),
    ]);
    expect(await viewOf(`trace_id = '${sampledTraceId(2950)}'`)).toEqual([
      { span_id: '0000000000000b86', span_name: 'pipeline', pipeline_id: 2950, sampling_reason: 'failed', adjusted_count: 1 },
      { span_id: (29501).toString(16).padStart(16, '0'), span_name: 'job_execution', pipeline_id: 2950, sampling_reason: 'slow', adjusted_count: 1 },
      { span_id: (29502).toString(16).padStart(16, '0'), span_name: 'job_execution', pipeline_id: 2950, sampling_reason: 'queued', adjusted_count: 1 },
      { span_id: (29503).toString(16).padStart(16, '0'), span_name: 'job_execution', pipeline_id: 2950, sampling_reason: 'head', adjusted_count: 1 },
    ]);
  });
});
