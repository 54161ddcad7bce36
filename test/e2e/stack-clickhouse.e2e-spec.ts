import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD_STAGES, BuildStage, exportJobAsRunner } from '../../demo/stock-runner';
import { pickUpPipelineJob, PickedUpJob } from '../helpers/ci-pipeline';
import { ClickHouse, startClickHouse } from '../helpers/clickhouse';
import { dateTime64, insertOtelTraces, OtelTracesRow, otelTracesRows } from '../helpers/clickhouse-exporter';
import { OtlpSink, startOtlpSink } from '../helpers/otlp-sink';
import { waitFor } from '../helpers/ports';
import { ServiceProcess, startService } from '../helpers/service';

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

const stageSeconds = (scriptSeconds: number): Record<BuildStage, number> => ({
  prepare_executor: 3,
  get_sources: 2,
  restore_cache: 4,
  step_script: scriptSeconds,
  after_script: 1,
  archive_cache: 2,
  upload_artifacts: 1,
});

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

  beforeAll(async () => {
    [clickhouse, sink] = await Promise.all([startClickHouse(), startOtlpSink()]);
    service = await startService({ OTLP_UPSTREAM_URL: sink.url });
    await clickhouse.query(SCHEMA);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await sink?.stop();
    await clickhouse?.stop();
  });

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
    await waitFor('the runner spans at the sink', async () => (sink.spans().length >= expectedSpans ? true : undefined));

    const exported = sink.exports.filter((received) => received.signal === 'traces').flatMap((received) => otelTracesRows(received.body));
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
