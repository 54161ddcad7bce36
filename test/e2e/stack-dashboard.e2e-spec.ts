import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD_STAGES, BuildStage } from '../../simulator/stock-runner';
import { pickUpPipelineJob } from '../helpers/ci-pipeline';
import { ClickHouse, startClickHouse } from '../helpers/clickhouse';
import { criticalPath, RUNNER_PARTS, RunnerPart } from '../../src/critical-path/critical-path';
import type { JobRunRow } from '../../src/across/job-run';
import { jobRunsOfTrace } from '../../src/across/job-runs-of-trace';
import { weightedPercentile } from '../../src/across/percentiles';
import { wasteLedger } from '../../src/across/waste';
import { tracestateFor } from '../../src/trace-context/trace-context';
import { dateTime64, insertOtelTraces, otelSpanRow, OtelTracesRow, otelTracesRowsOfResourceSpans } from '../helpers/clickhouse-exporter';
import { withCriticalPathAttributes } from '../helpers/critical-path-attributes';
import { PipelinesRun, runPipelines, stageSeconds } from '../helpers/clickhouse-pipelines';
import { sampledPipelineRows, tenPercentSample } from '../helpers/clickhouse-sampling';
import type { WebhookSecret } from '../helpers/gitlab-webhooks';
import { expandGrafanaQuery, GrafanaQueryContext } from '../helpers/grafana-query';
import type { OtlpSink } from '../helpers/otlp-sink';
import { PipelineTrace, Stages } from '../helpers/pipeline-trace';
import { randomSource } from '../helpers/seeded-random';
import type { ServiceProcess } from '../helpers/service';
import { startWorld, World } from '../helpers/world';

const ROOT = join(__dirname, '..', '..');
const SCHEMA = readFileSync(join(ROOT, 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8');

interface Target {
  datasource: { type: string; uid: string };
  rawSql?: string;
  expr?: string;
}
interface Panel {
  title: string;
  type: string;
  datasource: { type: string; uid: string };
  targets: Target[];
}
interface Dashboard {
  panels: Panel[];
  templating: { list: Array<{ name: string; query: string; datasource: { type: string; uid: string } }> };
}
const dashboard = JSON.parse(readFileSync(join(ROOT, 'deploy', 'grafana', 'dashboards', 'ci-job-telemetry.json'), 'utf8')) as Dashboard;
const CLICKHOUSE_TYPE = 'grafana-clickhouse-datasource';
const panel = (title: string) => {
  const found = dashboard.panels.find((candidate) => candidate.title === title);
  if (found === undefined) throw new Error(`no panel "${title}"`);
  return found;
};

const TRACE_A = 'a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1';
const TRACE_B = 'b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2';
const TRACE_OLD = 'c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3';

/**
 * The otel_traces rows of one job a stock runner exported through the gateway: a job_execution span
 * with the runner's span attributes, a child span per build stage, and the gateway-stamped resource.
 */
function runnerJobRows(job: {
  traceId: string;
  projectId: number;
  pipelineId: number;
  jobId: number;
  status: 'success' | 'failed';
  start: string;
  stageSeconds: Record<BuildStage, number>;
}): OtelTracesRow[] {
  const resource = {
    'service.name': 'runner',
    'ci.job.id': String(job.jobId),
    'ci.project.id': String(job.projectId),
    'ci.pipeline.id': String(job.pipelineId),
    'ci.runner.id': '17',
  };
  const startNanos = BigInt(Date.parse(job.start)) * 1_000_000n;
  const total = BUILD_STAGES.reduce((sum, stage) => sum + job.stageSeconds[stage], 0);
  const jobSpanId = job.jobId.toString(16).padStart(16, '0');
  const row = (
    spanId: string,
    parent: string,
    name: string,
    start: bigint,
    seconds: number,
    attributes: Record<string, string>,
    status: string,
  ): OtelTracesRow =>
    otelSpanRow({
      Timestamp: dateTime64(start),
      TraceId: job.traceId,
      SpanId: spanId,
      ParentSpanId: parent,
      SpanName: name,
      ServiceName: 'runner',
      ResourceAttributes: resource,
      ScopeName: 'gitlab-ci-runner',
      SpanAttributes: attributes,
      Duration: String(BigInt(seconds) * 1_000_000_000n),
      StatusCode: status,
    });
  const rows = [
    row(
      jobSpanId,
      'ffffffffffff0000',
      'job_execution',
      startNanos,
      total,
      { ...resource, 'ci.job.status': job.status, 'ci.runner.executor': 'shell' },
      job.status === 'failed' ? 'Error' : 'Unset',
    ),
  ];
  let stageStart = startNanos;
  for (const [index, stage] of BUILD_STAGES.entries()) {
    rows.push(
      row(
        `${job.jobId.toString(16).padStart(14, '0')}${index.toString(16).padStart(2, '0')}`,
        jobSpanId,
        stage,
        stageStart,
        job.stageSeconds[stage],
        {},
        'Unset',
      ),
    );
    stageStart += BigInt(job.stageSeconds[stage]) * 1_000_000_000n;
  }
  return rows;
}

const CONTEXT: GrafanaQueryContext = {
  from: new Date('2026-11-21T09:00:00Z'),
  to: new Date('2026-11-21T12:00:00Z'),
  intervalSeconds: 3600,
  variables: { project: ['7', '42'], trace_id: [TRACE_A], job: ['test'] },
};

describe('Grafana dashboard queries on a real ClickHouse engine (deploy/grafana)', () => {
  let clickhouse: ClickHouse;
  const run = (sql: string, context = CONTEXT) => clickhouse.query(expandGrafanaQuery(sql, context));

  beforeAll(async () => {
    clickhouse = await startClickHouse();
    await clickhouse.query(SCHEMA);
    await insertOtelTraces(clickhouse, [
      // Project 7, pipeline 700: build, test (failed), deploy.
      ...runnerJobRows({
        traceId: TRACE_A,
        projectId: 7,
        pipelineId: 700,
        jobId: 4001,
        status: 'success',
        start: '2026-11-21T10:00:00Z',
        stageSeconds: stageSeconds(40),
      }),
      ...runnerJobRows({
        traceId: TRACE_A,
        projectId: 7,
        pipelineId: 700,
        jobId: 4002,
        status: 'failed',
        start: '2026-11-21T10:02:00Z',
        stageSeconds: stageSeconds(75),
      }),
      ...runnerJobRows({
        traceId: TRACE_A,
        projectId: 7,
        pipelineId: 700,
        jobId: 4003,
        status: 'success',
        start: '2026-11-21T10:05:00Z',
        stageSeconds: stageSeconds(90),
      }),
      // Project 42, pipeline 800, later.
      ...runnerJobRows({
        traceId: TRACE_B,
        projectId: 42,
        pipelineId: 800,
        jobId: 5001,
        status: 'success',
        start: '2026-11-21T11:10:00Z',
        stageSeconds: stageSeconds(20),
      }),
      // Project 7 ten days earlier: outside the dashboard's time range.
      ...runnerJobRows({
        traceId: TRACE_OLD,
        projectId: 7,
        pipelineId: 600,
        jobId: 3001,
        status: 'failed',
        start: '2026-11-11T10:00:00Z',
        stageSeconds: stageSeconds(500),
      }),
    ]);
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it('runs every ClickHouse query of the dashboard, variables and panels, with the macros expanded', async () => {
    const queries = [
      ...dashboard.templating.list.filter((variable) => variable.datasource.type === CLICKHOUSE_TYPE).map((variable) => variable.query),
      ...dashboard.panels
        .flatMap((candidate) => candidate.targets)
        .filter((target) => target.datasource.type === CLICKHOUSE_TYPE)
        .map((target) => target.rawSql!),
    ];
    expect(queries.length).toBeGreaterThanOrEqual(6);
    for (const sql of queries) await expect(run(sql)).resolves.toBeInstanceOf(Array);
  });

  it('offers the projects and the pipelines of the time range, the latest pipeline first', async () => {
    const [project, traceId] = ['project', 'trace_id'].map((name) => dashboard.templating.list.find((variable) => variable.name === name)!.query);
    expect(await run(project)).toEqual([{ project_id: 7 }, { project_id: 42 }]);
    expect(await run(traceId)).toEqual([{ trace_id: TRACE_B }, { trace_id: TRACE_A }]);
  });

  it("Pipeline trace: the chosen pipeline's spans as a waterfall, jobs with their stages", async () => {
    const rows = await run(panel('Pipeline trace').targets[0].rawSql!);
    expect(rows).toHaveLength(3 * (1 + BUILD_STAGES.length));
    expect(new Set(rows.map((row) => row.traceID))).toEqual(new Set([TRACE_A]));
    expect(rows.slice(0, 3).map((row) => [row.operationName, row.parentSpanID, row.startTime, row.duration])).toEqual([
      ['job 4001', 'ffffffffffff0000', Date.parse('2026-11-21T10:00:00Z'), 53_000],
      ['prepare_executor', '0000000000000fa1', Date.parse('2026-11-21T10:00:00Z'), 3_000],
      ['get_sources', '0000000000000fa1', Date.parse('2026-11-21T10:00:03Z'), 2_000],
    ]);
    const failed = rows.find((row) => row.operationName === 'job 4002')!;
    expect(failed.tags).toEqual([
      { key: 'ci.job.status', value: 'failed' },
      { key: 'otel.status_code', value: 'Error' },
    ]);
    expect(failed.serviceTags).toContainEqual({ key: 'ci.pipeline.id', value: '700' });
  });

  it('Stage durations: p50 and p95 per project and stage, within the time range only', async () => {
    const rows = await run(panel('Stage durations p50/p95 by project and stage').targets[0].rawSql!);
    expect(rows.filter((row) => row.stage === 'step_script')).toEqual([
      { project: 7, stage: 'step_script', spans: 3, p50_seconds: 75, p95_seconds: 90 },
      { project: 42, stage: 'step_script', spans: 1, p50_seconds: 20, p95_seconds: 20 },
    ]);
    expect(rows.find((row) => row.project === 7 && row.stage === 'prepare_executor')).toEqual({
      project: 7,
      stage: 'prepare_executor',
      spans: 3,
      p50_seconds: 3,
      p95_seconds: 3,
    });
    expect(rows).toHaveLength(2 * BUILD_STAGES.length);
    expect(rows.some((row) => row.stage === 'job_execution')).toBe(false);

    const onlyProject42 = await run(panel('Stage durations p50/p95 by project and stage').targets[0].rawSql!, {
      ...CONTEXT,
      variables: { ...CONTEXT.variables, project: ['42'] },
    });
    expect(new Set(onlyProject42.map((row) => row.project))).toEqual(new Set([42]));
  });

  it('Jobs by status: jobs of the time range by the status the runner reported', async () => {
    expect(await run(panel('Jobs by status').targets[0].rawSql!)).toEqual([
      { status: 'success', jobs: 3 },
      { status: 'failed', jobs: 1 },
    ]);
    expect(await run(panel('Jobs by status over time').targets[0].rawSql!)).toEqual([
      { time: '2026-11-21 10:00:00', status: 'failed', jobs: 1 },
      { time: '2026-11-21 10:00:00', status: 'success', jobs: 2 },
      { time: '2026-11-21 11:00:00', status: 'success', jobs: 1 },
    ]);
  });
});

/** `YYYY-MM-DD HH:MM:SS`, as ClickHouse writes a DateTime in UTC. */
const dateTime = (epochMs: number) => new Date(epochMs).toISOString().slice(0, 19).replace('T', ' ');

describe("Queue wait and pipeline duration panels on the control plane's spans (issue 19)", () => {
  let clickhouse: ClickHouse;
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let run: PipelinesRun;
  let world: World;
  // Three projects' pipelines created in the same second (Pipeline Hooks write whole seconds), two minutes
  // before their jobs are picked up, so that every job was queued after its pipeline was created.
  const created = Math.floor(Date.now() / 1000) * 1000 - 120_000;
  const at = (seconds: number) => new Date(created + seconds * 1000);
  let context: GrafanaQueryContext;
  const runPanel = (title: string, variables: Record<string, string[]> = {}) =>
    clickhouse.query(expandGrafanaQuery(panel(title).targets[0].rawSql!, { ...context, variables: { ...context.variables, ...variables } }));

  /**
   * The p50 or p95 a panel shows for a queue wait: what the test made that job wait, plus the time its
   * pickup request took at most, rounded as the panel rounds (one decimal).
   */
  const waited = (jobId: number) => {
    const job = run.jobs.find((candidate) => candidate.planned.jobId === jobId)!;
    const least = job.planned.queuedSeconds;
    const most = Math.ceil((job.pickedUpBetween[1] - job.queuedAt.getTime()) / 100) / 10;
    return {
      asymmetricMatch: (seconds: unknown) => typeof seconds === 'number' && seconds >= least && seconds <= most,
      toAsymmetricMatcher: () => `between ${least} and ${most} (job ${jobId})`,
    };
  };

  beforeAll(async () => {
    world = await startWorld({ clickhouse: true, sink: true, webhookSecret: true, service: true });
    ({ clickhouse, sink, webhookSecret: secret, service } = world);
    await clickhouse.query(SCHEMA);
    run = await runPipelines(service, sink, secret, [
      {
        pipelineId: 700,
        projectId: 7,
        status: 'success',
        createdAt: at(0),
        finishedAt: at(300),
        jobs: [
          { jobId: 7001, name: 'compile', runnerId: 21, runnerType: 'instance_type', queuedSeconds: 10, scriptSeconds: 20, status: 'success' },
          { jobId: 7002, name: 'lint', runnerId: 22, runnerType: 'group_type', queuedSeconds: 40, scriptSeconds: 10, status: 'success' },
          { jobId: 7003, name: 'rspec', runnerId: 21, runnerType: 'instance_type', queuedSeconds: 90, scriptSeconds: 30, status: 'success' },
        ],
      },
      {
        pipelineId: 800,
        projectId: 42,
        status: 'failed',
        createdAt: at(0),
        finishedAt: at(480),
        jobs: [
          { jobId: 8001, name: 'compile', runnerId: 23, runnerType: 'project_type', queuedSeconds: 30, scriptSeconds: 20, status: 'success' },
          { jobId: 8002, name: 'rspec', runnerId: 21, runnerType: 'instance_type', queuedSeconds: 20, scriptSeconds: 30, status: 'failed' },
          { jobId: 8003, name: 'lint', runnerId: 22, runnerType: 'group_type', queuedSeconds: 60, scriptSeconds: 10, status: 'success' },
        ],
      },
      {
        pipelineId: 900,
        projectId: 99,
        status: 'success',
        createdAt: at(0),
        finishedAt: at(180),
        jobs: [
          { jobId: 9001, name: 'compile', runnerId: 24, runnerType: 'project_type', queuedSeconds: 5, scriptSeconds: 10, status: 'success' },
          { jobId: 9002, name: 'rspec', runnerId: 24, runnerType: 'project_type', queuedSeconds: 15, scriptSeconds: 10, status: 'success' },
          { jobId: 9003, name: 'lint', runnerId: 22, runnerType: 'group_type', queuedSeconds: 50, scriptSeconds: 10, status: 'success' },
        ],
      },
    ]);
    await insertOtelTraces(clickhouse, run.rows);
    const traceOf = (pipelineId: number) => run.jobs.find((job) => job.pipeline.pipelineId === pipelineId)!.picked.tracing.trace_id;
    context = {
      from: new Date(created - 3_600_000),
      to: new Date(created + 3_600_000),
      intervalSeconds: 3600,
      variables: { project: ['7', '42', '99'], trace_id: [traceOf(800)], job: ['rspec'] },
    };
  }, 120_000);
  afterAll(() => world?.stop());

  it('runs every ClickHouse query of the dashboard on these spans', async () => {
    const queries = dashboard.panels
      .flatMap((candidate) => candidate.targets)
      .filter((target) => target.datasource.type === CLICKHOUSE_TYPE)
      .map((target) => target.rawSql!);
    for (const sql of queries) await expect(clickhouse.query(expandGrafanaQuery(sql, context))).resolves.toBeInstanceOf(Array);
  });

  it('Queue wait by project: p50 and p95 of what the jobs waited for a runner, the longest p95 first', async () => {
    expect(await runPanel('Queue wait p50/p95 by project')).toEqual([
      // 10, 40, 90 s
      { project: 7, jobs: 3, p50_seconds: waited(7002), p95_seconds: waited(7003) },
      // 20, 30, 60 s
      { project: 42, jobs: 3, p50_seconds: waited(8001), p95_seconds: waited(8003) },
      // 5, 15, 50 s
      { project: 99, jobs: 3, p50_seconds: waited(9002), p95_seconds: waited(9003) },
    ]);
  });

  it('Queue wait by runner type: the same waits by the type of the runner that picked the job up, for the chosen projects', async () => {
    expect(await runPanel('Queue wait p50/p95 by runner type')).toEqual([
      // 10, 90, 20 s
      { runner_type: 'instance_type', jobs: 3, p50_seconds: waited(8002), p95_seconds: waited(7003) },
      // 40, 60, 50 s
      { runner_type: 'group_type', jobs: 3, p50_seconds: waited(9003), p95_seconds: waited(8003) },
      // 30, 5, 15 s
      { runner_type: 'project_type', jobs: 3, p50_seconds: waited(9002), p95_seconds: waited(8001) },
    ]);
    expect(await runPanel('Queue wait p50/p95 by runner type', { project: ['42'] })).toEqual([
      { runner_type: 'group_type', jobs: 1, p50_seconds: waited(8003), p95_seconds: waited(8003) },
      { runner_type: 'project_type', jobs: 1, p50_seconds: waited(8001), p95_seconds: waited(8001) },
      { runner_type: 'instance_type', jobs: 1, p50_seconds: waited(8002), p95_seconds: waited(8002) },
    ]);
  });

  it('Pipeline duration over time: p50 and p95 from creation to finish of the root pipelines', async () => {
    // 300, 480 and 180 s, all created in the same bucket.
    expect(await runPanel('Pipeline duration p50/p95 over time')).toEqual([
      { time: dateTime(Math.floor(created / 3_600_000) * 3_600_000), p50_seconds: 300, p95_seconds: 480 },
    ]);
    expect(await runPanel('Pipeline duration p50/p95 over time', { project: ['99'] })).toEqual([
      { time: dateTime(Math.floor(created / 3_600_000) * 3_600_000), p50_seconds: 180, p95_seconds: 180 },
    ]);
  });

  it('Slowest pipelines: the longest first, with GitLab status, what failed, why it was kept, and the trace to open', async () => {
    const traceOf = (pipelineId: number) => run.jobs.find((job) => job.pipeline.pipelineId === pipelineId)!.picked.tracing.trace_id;
    expect(await runPanel('Slowest pipelines')).toEqual([
      {
        project: 42,
        pipeline: 800,
        status: 'failed',
        duration_seconds: 480,
        created: dateTime(created),
        failure: 'rspec: script_failure',
        sampling_reason: 'head',
        trace_id: traceOf(800),
      },
      {
        project: 7,
        pipeline: 700,
        status: 'success',
        duration_seconds: 300,
        created: dateTime(created),
        failure: '',
        sampling_reason: 'head',
        trace_id: traceOf(700),
      },
      {
        project: 99,
        pipeline: 900,
        status: 'success',
        duration_seconds: 180,
        created: dateTime(created),
        failure: '',
        sampling_reason: 'head',
        trace_id: traceOf(900),
      },
    ]);
  });

  it("Pipeline trace: one tree, the pipeline at its root, each job's span over its queue wait and its runner's spans", async () => {
    const rows = await runPanel('Pipeline trace');
    expect(rows).toHaveLength(1 + 3 * (1 + 1 + 1 + BUILD_STAGES.length));
    const roots = rows.filter((row) => row.parentSpanID === '');
    expect(roots.map((row) => row.operationName)).toEqual(['pipeline 800']);
    const ids = new Set(rows.map((row) => row.spanID));
    expect(rows.filter((row) => row.parentSpanID !== '' && !ids.has(row.parentSpanID))).toEqual([]);
    expect(roots[0].tags).toEqual([
      { key: 'ci.pipeline.status', value: 'failed' },
      { key: 'otel.status_code', value: 'Error' },
      { key: 'otel.status_description', value: 'rspec: script_failure' },
    ]);
    expect(roots[0].serviceTags).toEqual([
      { key: 'ci.project.id', value: '42' },
      { key: 'ci.pipeline.id', value: '800' },
    ]);

    const rspec = rows.find((row) => row.operationName === 'rspec')!;
    expect(rspec.parentSpanID).toBe(roots[0].spanID);
    expect(rspec.tags).toEqual([
      { key: 'ci.job.status', value: 'failed' },
      { key: 'ci.runner.type', value: 'instance_type' },
      { key: 'otel.status_code', value: 'Error' },
      { key: 'otel.status_description', value: 'script_failure' },
      // Sent when it ended, then with the critical path at the pipeline's end (issue 36): the panel shows the latest.
      { key: 'ci.pipeline.span.versions', value: '2' },
    ]);
    const children = rows.filter((row) => row.parentSpanID === rspec.spanID).map((row) => row.operationName);
    expect(children.sort()).toEqual(['job 8002', 'queue_wait']);
  });

  it("the panels across pipelines (issue 58) read the same jobs from ci_job_runs: each job's wait by the tag set of its runner, and its waste", async () => {
    // One bucket, whatever the hour: GitLab's hooks tag every runner linux, docker; waits of 5 to 90 s, p50 30 s, p95 90 s.
    const month = { ...context, intervalSeconds: 30 * 86_400 };
    const queue = await clickhouse.query(expandGrafanaQuery(panel('Queue wait p50/p95 by runner tag set over time').targets[0].rawSql!, month));
    expect(queue).toEqual([{ time: expect.any(String), tag_set: 'docker,linux', p50_seconds: waited(8001), p95_seconds: waited(7003) }]);

    const waste = await runPanel('Waste by job');
    expect(waste).toHaveLength(run.jobs.length);
    for (const job of run.jobs) {
      expect(waste).toContainEqual(
        expect.objectContaining({
          project: job.pipeline.projectId,
          job: job.planned.name,
          runs: 1,
          retried_seconds: 0,
          queue_seconds: waited(job.planned.jobId),
        }),
      );
    }
  });

  it('leaves the runner-only panels as they were: no control-plane span among stages or job statuses', async () => {
    const stagesRows = await runPanel('Stage durations p50/p95 by project and stage');
    expect(new Set(stagesRows.map((row) => row.stage))).toEqual(new Set(BUILD_STAGES));
    expect(await runPanel('Jobs by status')).toEqual([
      { status: 'success', jobs: 8 },
      { status: 'failed', jobs: 1 },
    ]);
  });
});

describe('Pipeline counts and rates from a sample that keeps every failure (issue 28, SPEC §11)', () => {
  let clickhouse: ClickHouse;
  // 23 pipelines at 10 % head sampling, outcome keeping failures: 3 failed (kept by outcome, 100 s each), 2 of
  // the 20 that succeeded (head-sampled, 300 s each) in ClickHouse.
  const created = new Date('2026-11-21T10:00:00Z');
  const context: GrafanaQueryContext = { ...CONTEXT, variables: { ...CONTEXT.variables, project: ['7'] } };
  const runPanel = (title: string) => clickhouse.query(expandGrafanaQuery(panel(title).targets[0].rawSql!, context));

  beforeAll(async () => {
    clickhouse = await startClickHouse();
    await clickhouse.query(SCHEMA);
    await insertOtelTraces(clickhouse, tenPercentSample(created).flatMap(sampledPipelineRows));
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it('Pipelines and failure rate by project: 3 failed of 23, not 3 of the 5 traced', async () => {
    expect(await runPanel('Pipelines and failure rate by project')).toEqual([
      { project: 7, pipelines: 23, failed: 3, failure_rate: expect.closeTo(3 / 23, 9), kept: 5 },
    ]);
  });

  it('Pipeline failure rate over time: the same true rate per bucket', async () => {
    expect(await runPanel('Pipeline failure rate over time')).toEqual([{ time: '2026-11-21 10:00:00', failure_rate: expect.closeTo(3 / 23, 9) }]);
  });

  it('Pipelines by sampling reason: what is traced, and how many pipelines it stands for', async () => {
    expect(await runPanel('Pipelines by sampling reason')).toEqual([
      { reason: 'failed', kept: 3, estimated: 3 },
      { reason: 'head', kept: 2, estimated: 20 },
    ]);
  });

  it('Pipeline duration: the quantiles of the 23 pipelines, not of the 5 traced (3 of which were kept for failing)', async () => {
    // Unweighted, the median of 100, 100, 100, 300, 300 would read 100 s.
    expect(await runPanel('Pipeline duration p50/p95 over time')).toEqual([{ time: '2026-11-21 10:00:00', p50_seconds: 300, p95_seconds: 300 }]);
  });

  it('Slowest pipelines: says why each was kept', async () => {
    const rows = await runPanel('Slowest pipelines');
    expect(rows.map((row) => [row.pipeline, row.status, row.sampling_reason])).toEqual([
      [2805, 'success', 'head'],
      [2804, 'success', 'head'],
      [2803, 'failed', 'failed'],
      [2802, 'failed', 'failed'],
      [2801, 'failed', 'failed'],
    ]);
  });
});

describe("Pipelines kept and dropped by outcome sampling: a Prometheus panel on the service's decision counter", () => {
  it('counts ci_job_telemetry_outcome_decisions_total over the time range by decision and reason', () => {
    const decisions = panel('Pipelines kept and dropped by outcome sampling');
    expect(decisions.datasource).toEqual({ type: 'prometheus', uid: 'prometheus' });
    expect(decisions.targets.map((target) => [target.datasource.uid, target.expr])).toEqual([
      ['prometheus', 'sum by (decision, reason) (increase(ci_job_telemetry_outcome_decisions_total[$__range]))'],
    ]);
  });
});

describe("Spans rejected by the gateway: the panel's series is one the service exports", () => {
  let service: ServiceProcess;
  let world: World;

  beforeAll(async () => {
    world = await startWorld({ sink: true, service: true });
    ({ service } = world);
  });
  afterAll(() => world?.stop());

  it('selects the rejected-span counter the gateway increments for a span outside the job trace', async () => {
    const target = panel('Spans rejected by the gateway').targets[0];
    expect(target.datasource.type).toBe('prometheus');
    const selector = /(\w+)\{([^}]*)\}/.exec(target.expr!)!;
    const [metric, matchers] = [selector[1], [...selector[2].matchAll(/(\w+)\s*(=~|=)\s*"([^"]*)"/g)]];

    const job = await pickUpPipelineJob(service, { jobId: 6001, projectId: 7, pipelineId: 900 });
    const foreign = {
      resourceSpans: [
        {
          resource: { attributes: [] },
          scopeSpans: [
            {
              spans: [
                {
                  traceId: 'dddddddddddddddddddddddddddddddd',
                  spanId: '1111111111111111',
                  name: 'stray',
                  kind: 1,
                  startTimeUnixNano: '1',
                  endTimeUnixNano: '2',
                },
              ],
            },
          ],
        },
      ],
    };
    // To the job's capability URL, as anything in the job exports: the credential is the URL.
    const response = await fetch(job.tracing.otel_endpoints![0].url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(foreign),
    });
    expect(response.status).toBe(200);

    const exposition = await (await fetch(`${service.url}/metrics`)).text();
    const selected = exposition
      .split('\n')
      .filter((line) => line.startsWith(`${metric}{`))
      .filter((line) =>
        matchers.every(([, label, operator, value]) => {
          const actual = new RegExp(`${label}="([^"]*)"`).exec(line)?.[1];
          return actual !== undefined && (operator === '=' ? actual === value : new RegExp(`^(?:${value})$`).test(actual));
        }),
      );
    expect(selected).toEqual([expect.stringMatching(/outcome="rejected_foreign_trace"\} 1$/)]);
  });
});

describe('the critical path panels, on what the control plane writes at a pipeline end (issue 36)', () => {
  let clickhouse: ClickHouse;
  const context: GrafanaQueryContext = {
    from: new Date('2026-11-25T09:00:00Z'),
    to: new Date('2026-11-25T12:00:00Z'),
    intervalSeconds: 3600,
    variables: { project: ['7'], trace_id: [] },
  };
  const runPanel = (title: string) => clickhouse.query(expandGrafanaQuery(panel(title).targets[0].rawSql!, context));
  // Two pipelines of project 7 (build, then test and lint in parallel: test is on the path, lint is not), and a
  // third still running, whose path is not written yet.
  const ended = [
    new PipelineTrace(7, 600, Date.parse('2026-11-25T10:00:00Z'))
      .job({
        jobId: 6001,
        name: 'build',
        queuedAt: 0,
        pickedUpAt: 10,
        finishedAt: 70,
        stages: [
          ['get_sources', 10],
          ['step_script', 50],
        ],
      })
      .job({ jobId: 6002, name: 'test', queuedAt: 71, pickedUpAt: 81, finishedAt: 201 })
      .job({ jobId: 6003, name: 'lint', queuedAt: 71, pickedUpAt: 72, finishedAt: 90 })
      .pipeline(600, { status: 'success', finishedAt: 202 }),
    new PipelineTrace(7, 601, Date.parse('2026-11-25T10:30:00Z'))
      .job({
        jobId: 6011,
        name: 'build',
        queuedAt: 0,
        pickedUpAt: 20,
        finishedAt: 60,
        stages: [
          ['get_sources', 10],
          ['step_script', 30],
        ],
      })
      .job({ jobId: 6012, name: 'test', queuedAt: 61, pickedUpAt: 66, finishedAt: 166 })
      .job({ jobId: 6013, name: 'lint', queuedAt: 61, pickedUpAt: 62, finishedAt: 100 })
      .pipeline(601, { status: 'success', finishedAt: 167 }),
  ];
  const running = new PipelineTrace(7, 602, Date.parse('2026-11-25T11:00:00Z')).job({ jobId: 6021, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 });
  const paths = ended.map((trace) => criticalPath(trace.spans())!);

  beforeAll(async () => {
    clickhouse = await startClickHouse();
    await clickhouse.query(SCHEMA);
    const exports = [...ended, running].flatMap((trace) => trace.resourceSpans());
    await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(withCriticalPathAttributes(exports)));
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it("splits the path's time by part across pipelines, as the control plane knows it: the mean per pipeline and each part's share", async () => {
    const rows = await runPanel('Critical path: time by part');
    const total = paths.reduce((sum, path) => sum + path.duration_seconds, 0);
    // The control plane sees GitLab's times, not the runner's stages: the runs on the path are one part, `run`.
    const seconds = (path: (typeof paths)[0], name: string) =>
      name === 'run' ? RUNNER_PARTS.reduce((sum, part) => sum + path.totals[part], 0) : path.totals[name as keyof (typeof paths)[0]['totals']];
    const part = (name: string) => ({
      part: name,
      mean_seconds_per_pipeline: Math.round((10 * (seconds(paths[0], name) + seconds(paths[1], name))) / 2) / 10,
      percent_of_path: Math.round((1000 * (seconds(paths[0], name) + seconds(paths[1], name))) / total) / 10,
    });
    // The runs are most of the path; then the queue waits (build's 10 s and 20 s, test's 10 s and 5 s), then GitLab's
    // second before each test; nobody waited for a person, a retry, a timer or a resource group (issue 56).
    expect(rows).toEqual([part('run'), part('queue'), part('delay'), part('delayed_wait'), part('manual_wait'), part('resource_wait'), part('retry_wait')]);
    expect(part('queue')).toMatchObject({ mean_seconds_per_pipeline: (10 + 10 + 20 + 5) / 2 });
    expect(part('manual_wait')).toMatchObject({ mean_seconds_per_pipeline: 0 });
    const shares = rows.reduce((sum, row) => sum + (row.percent_of_path as number), 0);
    expect(shares).toBeCloseTo(100, 0);
  });

  it('lists the jobs most often on the path with their median time on it; a running pipeline is not counted', async () => {
    // On the path, a job counts from becoming pending to its end: build 70 s and 60 s, test 130 s and 105 s.
    // quantileExact(0.5) of two values is the larger.
    expect(await runPanel('Jobs most often on the critical path')).toEqual([
      { project: 7, job: 'test', runs: 2, percent_on_path: 100, p50_seconds_on_path: 130 },
      { project: 7, job: 'build', runs: 2, percent_on_path: 100, p50_seconds_on_path: 70 },
      { project: 7, job: 'lint', runs: 2, percent_on_path: 0, p50_seconds_on_path: null },
    ]);
  });
});

describe('the panels across pipelines, on otel.ci_job_runs (issue 58, SPEC §13): regressions, waste by job, queue wait by tag set', () => {
  // Seeded (randomSource): the same pipelines on every run.
  const SEED = 5801;
  const HOUR = 3_600_000;
  const FIRST_CREATED = Date.parse('2026-11-26T00:00:00Z');
  const PIPELINES = 24;
  /** From this pipeline on, test restores its cache a minute longer. */
  const SLOWER_FROM = 14;
  /** This pipeline's test fails once and is retried. */
  const FLAKY_AT = 5;
  /** This pipeline's lint finds no cache: a restore of a fraction of the usual. */
  const CACHE_MISS_AT = 9;
  const BUCKET_SECONDS = 6 * 3600;
  const context: GrafanaQueryContext = {
    from: new Date(FIRST_CREATED - HOUR),
    to: new Date(FIRST_CREATED + (PIPELINES + 1) * HOUR),
    intervalSeconds: BUCKET_SECONDS,
    variables: { project: ['7'], trace_id: [], job: ['test'] },
  };
  const linuxDocker = { id: 31, type: 'instance_type', tags: ['linux', 'docker'] };
  const arm64Docker = { id: 33, type: 'project_type', tags: ['docker', 'arm64'] };
  const total = (stages: Stages) => stages.reduce((sum, [, seconds]) => sum + seconds, 0);

  /**
   * A project's pipelines, one an hour: build, then test and lint side by side, test on the path. Times in tenths of a
   * second, so that every figure the panels round to a tenth is exact. Every third pipeline was head-sampled at 50 %
   * and stands for two (SPEC §11).
   */
  function project(projectId: number, seed: number, extraTestSeconds: number): PipelineTrace[] {
    const random = randomSource(seed);
    const noisy = (seconds: number) => Math.round(seconds * (8.5 + 3 * random()));
    const tenths = (value: number) => value / 10;
    return Array.from({ length: PIPELINES }, (_, index) => {
      const pipelineId = projectId * 1000 + index;
      const job = (k: number) => pipelineId * 10 + k;
      const trace = new PipelineTrace(projectId, pipelineId, FIRST_CREATED + index * HOUR, index % 3 === 0 ? tracestateFor(50) : undefined);
      const buildStages: Stages = [
        ['prepare_executor', 3],
        ['get_sources', tenths(noisy(5))],
        ['restore_cache', tenths(noisy(8))],
        ['step_script', tenths(noisy(40))],
        ['archive_cache', tenths(noisy(4))],
        ['upload_artifacts', 2],
      ];
      const buildPicked = tenths(10 + noisy(1));
      const buildEnd = buildPicked + total(buildStages) + 1;
      trace.job({
        jobId: job(1),
        name: 'build',
        stage: 'build',
        queuedAt: 1,
        pickedUpAt: buildPicked,
        finishedAt: buildEnd,
        stages: buildStages,
        runner: linuxDocker,
      });
      let testQueued = buildEnd + 1;
      if (index === FLAKY_AT) {
        const failedStages: Stages = [
          ['prepare_executor', 3],
          ['restore_cache', 10],
          ['step_script', 30],
        ];
        const picked = testQueued + tenths(noisy(2));
        const failedEnd = picked + total(failedStages) + 1;
        trace.job({
          jobId: job(4),
          name: 'test',
          stage: 'test',
          status: 'failed',
          queuedAt: testQueued,
          pickedUpAt: picked,
          finishedAt: failedEnd,
          stages: failedStages,
          runner: linuxDocker,
        });
        testQueued = failedEnd + 1;
      }
      const testStages: Stages = [
        ['prepare_executor', 3],
        ['restore_cache', tenths(noisy(10)) + (index >= SLOWER_FROM ? extraTestSeconds : 0)],
        ['step_script', tenths(noisy(100))],
        ['archive_cache', tenths(noisy(3))],
      ];
      const testPicked = testQueued + tenths(noisy(2));
      const testEnd = testPicked + total(testStages) + 1;
      trace.job({
        jobId: job(index === FLAKY_AT ? 5 : 2),
        name: 'test',
        stage: 'test',
        queuedAt: testQueued,
        pickedUpAt: testPicked,
        finishedAt: testEnd,
        stages: testStages,
        runner: linuxDocker,
        ...(index === FLAKY_AT ? { retriesCount: 1 } : {}),
      });
      // Few arm64 runners: lint waits longer for one.
      const lintStages: Stages = [
        ['restore_cache', index === CACHE_MISS_AT ? 0.2 : tenths(noisy(4))],
        ['step_script', tenths(noisy(20))],
      ];
      const lintPicked = buildEnd + 1 + tenths(noisy(30));
      const lintEnd = lintPicked + total(lintStages) + 1;
      trace.job({
        jobId: job(3),
        name: 'lint',
        stage: 'test',
        queuedAt: buildEnd + 1,
        pickedUpAt: lintPicked,
        finishedAt: lintEnd,
        stages: lintStages,
        runner: arm64Docker,
      });
      const sha = `${projectId.toString(16).padStart(8, '0')}${index.toString(16).padStart(32, '0')}`;
      trace.pipeline(pipelineId, { status: 'success', finishedAt: Math.max(testEnd, lintEnd) + 1, ref: 'main', sha, source: 'push' });
      return trace;
    });
  }

  const traces = project(7, SEED, 60);
  // Another project, far slower: none of it may show under project 7.
  const other = project(8, SEED + 1, 600);
  /** The rows the reads across pipelines compute from the same traces (src/across/job-runs-of-trace.ts). */
  const rows: JobRunRow[] = traces.flatMap((trace) => jobRunsOfTrace(trace.spans(), 7));
  const weightOf = (row: JobRunRow) => Math.round(row.adjustedCount * 1000);
  const tenth = (seconds: number) => Math.round(seconds * 10) / 10;
  /** ClickHouse's quantileExactWeighted with the panels' integer weights: the least value whose cumulative weight reaches q. */
  const quantile = (values: Array<readonly [number, number]>, q: number) => tenth(weightedPercentile(values, q)! / 1000);
  const bucketOf = (epochMs: number) => dateTime(Math.floor(epochMs / (BUCKET_SECONDS * 1000)) * BUCKET_SECONDS * 1000);

  let clickhouse: ClickHouse;
  const runPanel = (title: string, variables: Record<string, string[]> = {}) =>
    clickhouse.query(expandGrafanaQuery(panel(title).targets[0].rawSql!, { ...context, variables: { ...context.variables, ...variables } }));

  beforeAll(async () => {
    clickhouse = await startClickHouse();
    await clickhouse.query(SCHEMA);
    const exports = [...traces, ...other].flatMap((trace) => trace.resourceSpans());
    await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(withCriticalPathAttributes(exports)));
  }, 60_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it("offers the project's job names, the one that takes the most time first", async () => {
    const variable = dashboard.templating.list.find((candidate) => candidate.name === 'job')!;
    const busiest = [...new Set(rows.map((row) => row.name))].map((name) => ({
      name,
      seconds: rows.filter((row) => row.name === name).reduce((sum, row) => sum + row.finishedAt! - row.pendingAt, 0),
    }));
    const options = await clickhouse.query(expandGrafanaQuery(variable.query, context));
    expect(options.map((option) => option.job)).toEqual(busiest.sort((a, b) => b.seconds - a.seconds).map((job) => job.name));
  });

  it("Regressions: the job's runner stages per time bucket, the median of its pipelines, and the step where restore_cache became a minute longer", async () => {
    const rowsOf = await runPanel('Regressions: runner stages of $job over time');
    const expected = new Map<string, Array<readonly [number, number]>>();
    for (const row of rows) {
      if (row.name !== 'test' || row.status !== 'success' || row.retried || !row.runnerSpans) continue;
      for (const part of ['prepare_executor', 'restore_cache', 'step_script', 'archive_cache'] as RunnerPart[]) {
        const key = `${bucketOf(row.pipelineCreatedAt)}\u0000${part}`;
        expected.set(key, [...(expected.get(key) ?? []), [row.partsMs[part], weightOf(row)]]);
      }
    }
    expect(rowsOf).toEqual(
      [...expected]
        .map(([key, values]) => ({ time: key.split('\u0000')[0], part: key.split('\u0000')[1], median_seconds: quantile(values, 0.5) }))
        .sort((a, b) => a.time.localeCompare(b.time) || a.part.localeCompare(b.part)),
    );
    // What a person sees: restore_cache a minute longer in the buckets whose pipelines all came after the step.
    const createdIn = (time: string) =>
      Array.from({ length: PIPELINES }, (_, index) => index).filter((index) => bucketOf(FIRST_CREATED + index * HOUR) === time);
    const restore = rowsOf.filter((row) => row.part === 'restore_cache');
    const before = restore.filter((row) => createdIn(row.time as string).every((index) => index < SLOWER_FROM));
    const after = restore.filter((row) => createdIn(row.time as string).every((index) => index >= SLOWER_FROM));
    expect(before.length * after.length).toBeGreaterThan(0);
    for (const row of before) expect(row.median_seconds).toBeLessThan(15);
    for (const row of after) expect(row.median_seconds).toBeGreaterThan(65);

    const lint = await runPanel('Regressions: runner stages of $job over time', { job: ['lint'] });
    expect(new Set(lint.map((row) => row.part))).toEqual(new Set(['restore_cache', 'step_script']));
  });

  it('Waste by job: what the API answers, per job, the most waste first; nothing of another project', async () => {
    const ledger = wasteLedger(rows);
    expect(await runPanel('Waste by job')).toEqual(
      ledger.jobs.map((job) => ({
        project: 7,
        job: job.name,
        runs: job.runs,
        runner_seconds: tenth(job.runner_seconds.total),
        on_critical_path_seconds: tenth(job.runner_seconds.on_critical_path),
        retried_seconds: tenth(job.retry_seconds.total),
        flaky_commits: job.flaky.commits,
        flaky_failed_seconds: tenth(job.flaky.runner_seconds.total),
        cache_seconds: tenth(job.cache_seconds.total),
        cache_misses_inferred: job.cache_misses,
        queue_seconds: tenth(job.queue_seconds.reduce((sum, queue) => sum + queue.seconds.total, 0)),
      })),
    );
    // The flaky test's failed attempt is the retry and the flaky time; lint's one restore of nothing is its miss.
    const [test, lint] = ['test', 'lint'].map((name) => ledger.jobs.find((job) => job.name === name)!);
    expect(test.retry_seconds.total).toBeGreaterThan(40);
    expect(test.flaky.commits).toBe(FLAKY_AT % 3 === 0 ? 2 : 1);
    expect(lint.cache_misses).toBe(CACHE_MISS_AT % 3 === 0 ? 2 : 1);
  });

  it('Queue wait by runner tag set: p50 and p95 per tag set and time bucket, the arm64 jobs waiting longest', async () => {
    const expected = new Map<string, Array<readonly [number, number]>>();
    for (const row of rows) {
      const key = `${bucketOf(row.pendingAt)}\u0000${row.runnerTags === '' ? '(untagged)' : row.runnerTags}`;
      expected.set(key, [...(expected.get(key) ?? []), [row.queueMs, weightOf(row)]]);
    }
    const panelRows = await runPanel('Queue wait p50/p95 by runner tag set over time');
    expect(panelRows).toEqual(
      [...expected]
        .map(([key, values]) => ({
          time: key.split('\u0000')[0],
          tag_set: key.split('\u0000')[1],
          p50_seconds: quantile(values, 0.5),
          p95_seconds: quantile(values, 0.95),
        }))
        .sort((a, b) => a.time.localeCompare(b.time) || a.tag_set.localeCompare(b.tag_set)),
    );
    expect(new Set(panelRows.map((row) => row.tag_set))).toEqual(new Set(['arm64,docker', 'docker,linux']));
    for (const time of new Set(panelRows.map((row) => row.time))) {
      const [arm64, linux] = ['arm64,docker', 'docker,linux'].map((tags) => panelRows.find((row) => row.time === time && row.tag_set === tags)!);
      expect(arm64.p50_seconds as number).toBeGreaterThan(linux.p50_seconds as number);
    }
  });
});
