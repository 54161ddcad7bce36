import { CONTROL_PLANE_MARK } from '../../src/otlp/control-plane-mark';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, Server, Socket } from 'node:net';
import { join } from 'node:path';
import { ClickHouseTraceReads, QueryStatistics } from '../../src/reads/clickhouse-trace-reads';
import { criticalPath } from '../../src/critical-path/critical-path';
import { jobRunsOfTrace } from '../../src/across/job-runs-of-trace';
import { groupByPipeline } from '../../src/across/pipeline-runs';
import { ReadsUnavailableError, StoredSpan, TimeWindow, TraceRead } from '../../src/reads/trace-reads';
import { ClickHouseOverHttp, startClickHouse } from '../helpers/clickhouse';
import { dateTime64, insertOtelTraces, otelSpanRow, OtelTracesRow, otelTracesRowsOfResourceSpans } from '../helpers/clickhouse-exporter';
import { PipelinesRun, runPipelines } from '../helpers/clickhouse-pipelines';
import type { WebhookSecret } from '../helpers/gitlab-webhooks';
import type { OtlpSink } from '../helpers/otlp-sink';
import { PipelineTrace } from '../helpers/pipeline-trace';
import { withCriticalPathAttributes } from '../helpers/critical-path-attributes';
import { describeReadsEndpoints, writeCollectorFiles } from '../helpers/reads-cases';
import { traceCommand } from '../../src/cli/trace-command';
import { describeTraceReadsConformance } from '../suites/trace-reads.suite';
import { ACROSS_PROJECT, acrossWorld, describeAcrossEndpoints } from '../suites/across-endpoints.suite';
import { describeJobRunRowsConformance } from '../suites/job-run-rows.suite';
import { freePort } from '../helpers/ports';
import type { ServiceProcess } from '../helpers/service';
import { startWorld, World } from '../helpers/world';

/** Every span of a trace: no cap (the cap is the read API's, tested over both backends in test/suites/trace-reads.suite.ts). */
const ALL = { limit: 1_000_000 };
const spansOf = async (read: Promise<TraceRead | null>): Promise<StoredSpan[] | null> => (await read)?.spans ?? null;

const SCHEMA = readFileSync(join(__dirname, '..', '..', 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8');

/**
 * The embedded engine with the deployment's schema, read by the official client over HTTP; what both suites load into.
 * `writePath`: false for a world that writes the control plane's figures itself, on the traces it chooses.
 */
const clickHouseBackend =
  (password: string, writePath = true) =>
  async () => {
    const clickhouse = await startClickHouse({ http: { password } });
    await clickhouse.query(SCHEMA);
    let reads: ClickHouseTraceReads | undefined;
    return {
      load: async (exports: Parameters<typeof withCriticalPathAttributes>[0]) => {
        // With what the control plane writes at each pipeline's end: the CI view's critical path columns.
        await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(writePath ? withCriticalPathAttributes(exports) : exports));
        reads = new ClickHouseTraceReads({ url: clickhouse.url, password: clickhouse.password, timeoutMs: 10_000 });
        return reads;
      },
      close: async () => {
        await reads?.close();
        await clickhouse.stop();
      },
    };
  };

describeReadsEndpoints('ClickHouse (the official client over HTTP, on the embedded engine)', clickHouseBackend('reads'));

describeTraceReadsConformance('ClickHouse (the official client over HTTP, on the embedded engine)', clickHouseBackend('conformance'));

describeJobRunRowsConformance('ClickHouse (ci_job_runs, filled by its materialized view, on the embedded engine)', clickHouseBackend('job runs', false));

describeAcrossEndpoints('ClickHouse (ci_job_runs, on the embedded engine)', clickHouseBackend('across'));

describe('`npm run -s trace -- --compare` where the service reads ClickHouse (SPEC §13)', () => {
  let clickhouse: ClickHouseOverHttp;
  const work = mkdtempSync(join(tmpdir(), 'cjt-trace-compare-clickhouse-'));
  const filesDir = join(work, 'files');
  const world = acrossWorld();
  const slower = ACROSS_PROJECT * 1000 + 20;
  let env: Record<string, string>;

  const trace = async (asked: Record<string, string>, ...args: string[]) => {
    let out = '';
    let err = '';
    const status = await traceCommand(args, asked, { out: (text) => (out += text), err: (text) => (err += text) });
    return { status, out, err };
  };
  /** What follows the waterfall: the baseline, the delta by part, the jobs. */
  const comparison = (out: string) => out.slice(out.indexOf('\n\n') + 2);

  beforeAll(async () => {
    clickhouse = await startClickHouse({ http: { password: 'trace command' } });
    await clickhouse.query(SCHEMA);
    const exports = withCriticalPathAttributes(world.exports);
    await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(exports));
    writeCollectorFiles(filesDir, exports);
    const passwordFile = join(work, 'clickhouse-password');
    writeFileSync(passwordFile, clickhouse.password, { mode: 0o600 });
    env = { DATA_DIR: join(work, 'data'), CLICKHOUSE_URL: clickhouse.url, CLICKHOUSE_PASSWORD_FILE: passwordFile };
  }, 90_000);
  afterAll(async () => {
    await clickhouse?.stop();
  });

  it('prints the same comparison as from the embedded files, read from ClickHouse: the 60 s on test restoring its cache', async () => {
    const onClickHouse = await trace(env, '--compare', String(slower), '--project', String(ACROSS_PROJECT));
    const onFiles = await trace({ DATA_DIR: filesDir }, '--compare', String(slower));
    expect([onClickHouse.status, onClickHouse.err]).toEqual([0, '']);
    expect(onClickHouse.out).toContain(`ClickHouse at ${clickhouse.url}`);
    expect(comparison(onClickHouse.out)).toMatch(/\+1m 00s {2}restoring caches/);
    expect(comparison(onClickHouse.out)).toEqual(comparison(onFiles.out));
  });

  it("lists a compare's baseline candidates, then reads their rows: the latest ended of the ref and source, and whether that was all", async () => {
    const queries: string[] = [];
    const reads = new ClickHouseTraceReads({
      url: clickhouse.url,
      password: clickhouse.password,
      timeoutMs: 10_000,
      onQuery: (query) => queries.push(query.query),
    });
    try {
      const whole = { fromMs: Date.parse(world.from), toMs: Date.parse(world.to) };
      const pipelines = groupByPipeline(await reads.jobRunRows(ACROSS_PROJECT, whole, {}));
      const target = pipelines.at(-1)!;
      const before = pipelines.slice(0, -1).reverse();
      const lookback = { fromMs: target.createdAt - 31 * 86_400_000, toMs: target.createdAt };
      const latest = (count: number, source = target.source) =>
        reads.latestEndedRunRows(ACROSS_PROJECT, { ref: target.ref, source, except: target.pipelineId, count }, lookback);
      const rowsOf = (ids: readonly number[]) => pipelines.filter((pipeline) => ids.includes(pipeline.pipelineId)).flatMap((pipeline) => pipeline.rows);
      const byJob = (rows: readonly { jobId: number }[]) => [...rows].sort((a, b) => a.jobId - b.jobId);

      queries.length = 0;
      const five = await latest(5);
      expect(queries).toEqual(['latest ended pipelines', 'job run rows']);
      const fiveIds = before.slice(0, 5).map((pipeline) => pipeline.pipelineId);
      expect(groupByPipeline(five.rows).map((pipeline) => pipeline.pipelineId)).toEqual([...fiveIds].reverse());
      expect(byJob(five.rows)).toEqual(byJob(rowsOf(fiveIds)));
      expect(five.complete).toBe(false);

      const all = await latest(40);
      expect(groupByPipeline(all.rows).map((pipeline) => pipeline.pipelineId)).toEqual([...before].reverse().map((pipeline) => pipeline.pipelineId));
      expect(all.complete).toBe(true);

      expect(await latest(40, 'schedule')).toEqual({ rows: [], complete: true });
    } finally {
      await reads.close();
    }
  });

  it('asks for the project, and says when ClickHouse holds no such pipeline', async () => {
    const unnamed = await trace(env, '--compare', String(slower));
    expect(unnamed.status).toBe(64);
    expect(unnamed.err).toContain('--project');
    const missing = await trace(env, '--compare', String(slower), '--project', '999');
    expect(missing.status).toBe(1);
    expect(missing.err).toContain(`no pipeline ${slower} of project 999`);
  });
});

/**
 * The ClickHouse backend of the read port (SPEC §12) through the official client over real HTTP, against
 * ClickHouse's engine (chdb behind test/chdb/http-interface.js), on the rows the Collector's exporter writes
 * for pipelines run for real through the service.
 */
describe('ClickHouseTraceReads on a real ClickHouse engine over HTTP', () => {
  let clickhouse: ClickHouseOverHttp;
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let run: PipelinesRun;
  let reads: ClickHouseTraceReads;
  let world: World<ClickHouseOverHttp>;
  const statistics: QueryStatistics[] = [];
  // Pipelines created two minutes before their jobs are picked up (Pipeline Hooks write whole seconds).
  const created = Math.floor(Date.now() / 1000) * 1000 - 120_000;
  const at = (seconds: number) => new Date(created + seconds * 1000);
  const today: TimeWindow = { fromMs: created - 3_600_000, toMs: Date.now() + 3_600_000 };
  const spanIds = (spans: readonly StoredSpan[]) => spans.map((span) => span.spanId).sort();
  const rowsOf = (traceId: string) => run.rows.filter((row) => row.TraceId === traceId);
  const pipelineRow = (pipelineId: number) =>
    run.rows.find((row) => row.SpanName === 'pipeline' && row.ResourceAttributes['ci.pipeline.id'] === String(pipelineId))!;
  /** A job span's rows, oldest version first: the one sent when the job ended, then the one with the critical path. */
  const jobRows = (jobId: number) =>
    run.rows
      .filter((row) => row.SpanName === 'job' && row.ResourceAttributes['ci.job.id'] === String(jobId))
      .sort((a, b) => Number(a.SpanAttributes['ci.pipeline.span.version'] ?? 0) - Number(b.SpanAttributes['ci.pipeline.span.version'] ?? 0));
  const jobRow = (jobId: number) => jobRows(jobId).at(-1)!;

  beforeAll(async () => {
    world = await startWorld({ clickhouse: { http: { password: 'reads secret' } }, sink: true, webhookSecret: true, service: true });
    ({ clickhouse, sink, webhookSecret: secret, service } = world);
    await clickhouse.query(SCHEMA);
    run = await runPipelines(service, sink, secret, [
      {
        pipelineId: 700,
        projectId: 7,
        status: 'failed',
        createdAt: at(0),
        finishedAt: at(300),
        jobs: [
          { jobId: 7001, name: 'compile', runnerId: 21, runnerType: 'instance_type', queuedSeconds: 10, scriptSeconds: 20, status: 'success' },
          { jobId: 7002, name: 'rspec', runnerId: 22, runnerType: 'group_type', queuedSeconds: 40, scriptSeconds: 10, status: 'failed' },
        ],
      },
      {
        pipelineId: 800,
        projectId: 42,
        status: 'success',
        createdAt: at(0),
        finishedAt: at(200),
        jobs: [{ jobId: 8001, name: 'compile', runnerId: 23, runnerType: 'project_type', queuedSeconds: 30, scriptSeconds: 20, status: 'success' }],
      },
    ]);
    await insertOtelTraces(clickhouse, run.rows);
    reads = new ClickHouseTraceReads({
      url: clickhouse.url,
      password: clickhouse.password,
      timeoutMs: 10_000,
      onQuery: (query) => statistics.push(query),
    });
  }, 90_000);
  afterAll(async () => {
    await reads?.close();
    await world?.stop();
  });

  it("reads a pipeline's whole trace back: every span the collector was given, each once, as it was given", async () => {
    const traceId = pipelineRow(700).TraceId;
    const spans = (await spansOf(reads.pipelineTrace(7, 700, today, ALL)))!;
    expect(spanIds(spans)).toEqual([...new Set(rowsOf(traceId).map((row) => row.SpanId))].sort());
    // Two jobs: job, queue_wait, job_execution and its stages each; one pipeline span.
    expect(spans.filter((span) => span.name === 'job')).toHaveLength(2);
    expect(spans.filter((span) => span.name === 'pipeline')).toHaveLength(1);

    const rspec = spans.find((span) => span.name === 'job' && span.attributes['cicd.pipeline.task.name'] === 'rspec')!;
    const stored = jobRow(7002);
    expect(rspec).toMatchObject({
      traceId,
      spanId: stored.SpanId,
      parentSpanId: pipelineRow(700).SpanId,
      statusCode: 2,
      statusMessage: 'script_failure',
      kind: 1,
      scopeName: stored.ScopeName,
    });
    expect(rspec.endNanos - rspec.startNanos).toBe(BigInt(stored.Duration));
    // As the exporter stored them, in text; a number or a bool read back as one (ci.job.id is an int to GitLab).
    const asText = (values: Record<string, unknown>) => Object.fromEntries(Object.entries(values).map(([key, value]) => [key, String(value)]));
    expect(asText(rspec.attributes)).toEqual(stored.SpanAttributes);
    expect(asText(rspec.resource)).toEqual(stored.ResourceAttributes);
    expect(rspec.attributes).toMatchObject({ 'ci.job.id': 7002, 'cicd.pipeline.task.name': 'rspec', 'ci.job.status': 'failed' });
    const pipeline = spans.find((span) => span.name === 'pipeline')!;
    expect(pipeline.traceState).toBe(pipelineRow(700).TraceState);
  });

  it("reads a job's trace back by the job's id: the whole trace its subtree is cut from", async () => {
    const pipeline = (await spansOf(reads.pipelineTrace(7, 700, today, ALL)))!;
    const job = (await spansOf(reads.jobTrace(7, 7001, today, ALL)))!;
    expect(spanIds(job)).toEqual(spanIds(pipeline));
    expect(job.some((span) => span.name === 'job_execution' && span.resource['ci.job.id'] === 7001)).toBe(true);
  });

  it("answers nothing for another project's pipeline or job, nor outside the window", async () => {
    await expect(reads.pipelineTrace(42, 700, today, ALL)).resolves.toBeNull();
    await expect(reads.jobTrace(42, 7001, today, ALL)).resolves.toBeNull();
    await expect(reads.pipelineTrace(7, 800, today, ALL)).resolves.toBeNull();
    await expect(reads.pipelineTrace(7, 701, today, ALL)).resolves.toBeNull();
    const lastWeek = { fromMs: created - 7 * 86_400_000, toMs: created - 6 * 86_400_000 };
    await expect(reads.pipelineTrace(7, 700, lastWeek, ALL)).resolves.toBeNull();
    await expect(reads.projectJobs(7, lastWeek)).resolves.toEqual([]);
  });

  it('gives the latest version of a pipeline that finished again, once, whatever order the versions were stored in', async () => {
    const first = pipelineRow(800);
    const version = Number(first.SpanAttributes['ci.pipeline.span.version'] ?? 0);
    const again = {
      ...first,
      StatusCode: 'Error',
      StatusMessage: 'deploy: script_failure',
      SpanAttributes: { ...first.SpanAttributes, 'ci.pipeline.status': 'failed', 'ci.pipeline.span.version': String(version + 1) },
    };
    // The newer version, then the older one stored twice (a retried export).
    await insertOtelTraces(clickhouse, [again]);
    await insertOtelTraces(clickhouse, [first, first]);

    const spans = (await spansOf(reads.pipelineTrace(42, 800, today, ALL)))!;
    const pipelines = spans.filter((span) => span.name === 'pipeline');
    expect(pipelines).toHaveLength(1);
    expect(pipelines[0]).toMatchObject({ statusCode: 2, statusMessage: 'deploy: script_failure' });
    expect(pipelines[0].attributes['ci.pipeline.status']).toBe('failed');
    expect(spanIds(spans)).toEqual([...new Set(rowsOf(first.TraceId).map((row) => row.SpanId))].sort());
  });

  it("lists a project's job runs with their queue wait, status, retries, critical path and weight", async () => {
    // The path the service wrote when pipeline 700 ended: the one the read API computes from the trace.
    const path = criticalPath((await spansOf(reads.pipelineTrace(7, 700, today, ALL)))!)!;
    const onPath = new Map(path.path.map((element) => [element.job_id, element.duration_seconds]));
    // Then rspec retried (a later job of the same name), its span as the Job Hook sent it: the pipeline has not ended again.
    const rspec = jobRows(7002)[0];
    const retry = {
      ...rspec,
      SpanId: 'abcdefabcdef7003',
      StatusCode: 'Unset',
      StatusMessage: '',
      ResourceAttributes: { ...rspec.ResourceAttributes, 'ci.job.id': '7003' },
      SpanAttributes: { ...rspec.SpanAttributes, 'ci.job.id': '7003', 'ci.job.status': 'success' },
    };
    const compile = jobRow(7001);
    await insertOtelTraces(clickhouse, [retry]);

    const jobs = await reads.projectJobs(7, today);
    // Aggregated in ClickHouse per job name (issue 56 item 3): rspec ran twice, failed once, was retried once.
    expect(jobs.map((job) => [job.name, job.runs, job.failures, job.retries])).toEqual([
      ['rspec', 2, 1, 1],
      ['compile', 1, 0, 0],
    ]);
    const planned = (jobId: number) => run.jobs.find((job) => job.planned.jobId === jobId)!;
    const compileSummary = jobs.find((job) => job.name === 'compile')!;
    const { planned: plan, queuedAt, pickedUpBetween } = planned(7001);
    expect(compileSummary.queue_seconds.p50).toBeGreaterThanOrEqual(plan.queuedSeconds);
    expect(compileSummary.queue_seconds.p50).toBeLessThanOrEqual((pickedUpBetween[1] - queuedAt.getTime()) / 1000);
    // The retry, not yet in a path the service wrote: unknown, left out of the share; 7002's is known.
    for (const [name, jobId] of [
      ['compile', 7001],
      ['rspec', 7002],
    ] as const) {
      const summary = jobs.find((job) => job.name === name)!;
      expect(summary.critical_path.share).toBe(onPath.has(jobId) ? 1 : 0);
      if (onPath.has(jobId)) expect(summary.critical_path.p50_seconds).toBeCloseTo(onPath.get(jobId)!, 3);
      else expect(summary.critical_path.p50_seconds).toBeNull();
    }
    // The job span runs from queued to finished: the duration is the run, as GitLab counts it.
    const span = (await spansOf(reads.jobTrace(7, 7001, today, ALL)))!.find((candidate) => candidate.spanId === compile.SpanId)!;
    expect(compileSummary.duration_seconds.p50).toBeCloseTo(Number(span.endNanos - span.startNanos) / 1e9 - compileSummary.queue_seconds.p50, 2);

    await expect(reads.projectJobs(7, today, 'master')).resolves.toHaveLength(2);
    await expect(reads.projectJobs(7, today, 'main')).resolves.toEqual([]);
    await expect(reads.projectJobs(42, today)).resolves.toEqual([expect.objectContaining({ name: 'compile', runs: 1 })]);
  });

  it("gives the rows of job runs of the pipelines the service ran, as their whole traces make them, with GitLab's runner and its tags", async () => {
    statistics.length = 0;
    const rows = await reads.jobRunRows(7, today, {});
    // Pipeline 700 holds rspec's retry, stored after the root's end without the figures the control plane writes
    // there (the test above): it is read as a whole trace, and still gives the rows its trace makes.
    expect(statistics.map((query) => query.query)).toEqual(['job run rows', 'job run spans']);
    const trace = (await spansOf(reads.pipelineTrace(7, 700, today, ALL)))!;
    const byJob = (a: { jobId: number }, b: { jobId: number }) => a.jobId - b.jobId;
    expect(rows.sort(byJob)).toEqual(jobRunsOfTrace(trace, 7).sort(byJob));
    // The Job Hook's runner (its id, type and tags, as the simulator's hooks send them), the Pipeline Hook's commit.
    expect(rows.find((row) => row.jobId === 7001)).toMatchObject({
      pipelineId: 700,
      runnerId: 21,
      runnerType: 'instance_type',
      runnerTags: 'docker,linux',
      sha: 'bcbb5ec396a2c0f828686f14fac9b80b780504f2',
      ref: 'master',
      runnerSpans: true,
    });
    expect(rows.find((row) => row.jobId === 7002)).toMatchObject({ status: 'failed', runnerId: 22, runnerType: 'group_type' });
    statistics.length = 0;
    const other = await reads.jobRunRows(42, today, {});
    expect(other.map((row) => [row.pipelineId, row.jobId])).toEqual([[800, 8001]]);
    // Every figure of pipeline 800 the service wrote at its end: read from the compact columns alone, the same rows.
    expect(statistics.map((query) => query.query)).toEqual(['job run rows']);
    expect(other).toEqual(jobRunsOfTrace((await spansOf(reads.pipelineTrace(42, 800, today, ALL)))!, 42));
  });

  it('gives the critical path computed from the spans the collector was given: a child pipeline, a manual job, a retry', async () => {
    const trace = new PipelineTrace(70, 505, created - 600_000)
      .job({
        jobId: 50,
        name: 'build',
        queuedAt: 0,
        pickedUpAt: 1,
        finishedAt: 30,
        stages: [
          ['get_sources', 4],
          ['step_script', 25],
        ],
      })
      .bridge(51, 505, 506, { createdAt: 31, finishedAt: 90 })
      .job({ jobId: 60, name: 'compile', pipelineId: 506, queuedAt: 33, pickedUpAt: 35, finishedAt: 60 })
      .job({ jobId: 61, name: 'child-test', pipelineId: 506, queuedAt: 61, pickedUpAt: 62, finishedAt: 88 })
      .pipeline(506, { status: 'success', createdAt: 31, finishedAt: 90 }, 51)
      .job({ jobId: 52, name: 'deploy', manual: true, queuedAt: 300, pickedUpAt: 302, finishedAt: 330, status: 'failed' })
      .job({ jobId: 53, name: 'deploy', queuedAt: 340, pickedUpAt: 341, finishedAt: 360 })
      .pipeline(505, { status: 'success', finishedAt: 361 });
    await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(trace.resourceSpans()));

    const expected = criticalPath(trace.spans())!;
    // The failed attempt of deploy is on the path: its retry waited for it (issue 56, earlier attempts stay blockers).
    expect(expected.path.map((element) => element.job_id)).toEqual([50, 60, 61, 52, 53]);
    for (const read of [
      await spansOf(reads.pipelineTrace(70, 506, today, ALL)),
      await spansOf(reads.jobTrace(70, 61, today, ALL)),
      await spansOf(reads.pipelineTrace(70, 505, today, ALL)),
    ])
      expect(criticalPath(read!)).toEqual(expected);
  });

  it('reads the same spans and job runs when ClickHouse gzips its answers (CLICKHOUSE_COMPRESSION=gzip) as when it does not', async () => {
    const gzipped = new ClickHouseTraceReads({ url: clickhouse.url, password: clickhouse.password, timeoutMs: 10_000, compression: 'gzip' });
    try {
      const plain = (await spansOf(reads.pipelineTrace(7, 700, today, ALL)))!;
      expect(await spansOf(gzipped.pipelineTrace(7, 700, today, ALL))).toEqual(plain);
      expect(plain.length).toBeGreaterThan(0);
      const runs = await reads.jobRunRows(7, today, {});
      expect(await gzipped.jobRunRows(7, today, {})).toEqual(runs);
      expect(runs.length).toBeGreaterThan(0);
    } finally {
      await gzipped.close();
    }
  });

  it('says how many rows each lookup read: a handful of granules, not the tables', async () => {
    statistics.length = 0;
    await spansOf(reads.pipelineTrace(7, 700, today, ALL));
    expect(statistics.map((query) => query.query)).toEqual(['locate pipeline', 'trace spans']);
    for (const query of statistics) expect(query.readRows).toBeGreaterThan(0);
  });

  describe('values with quotes, backslashes and NUL bytes', () => {
    const NASTY = `it's a \\'quote\\' \\\\ back\\slash \0 nul\t'; DROP TABLE otel.otel_traces; --`;
    const NASTY_TRACE = `f00d'\\\0' OR '1'='1`;
    const start = BigInt(created + 60_000) * 1_000_000n;

    beforeAll(async () => {
      const identity = { 'service.name': 'gitlab-ci', 'ci.project.id': '77', 'ci.pipeline.id': '7700', [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value };
      const rows: OtelTracesRow[] = [
        otelSpanRow({
          Timestamp: dateTime64(start),
          TraceId: NASTY_TRACE,
          SpanId: `5pan'\\\0`,
          SpanName: 'pipeline',
          ResourceAttributes: { ...identity, [`key'\\\0`]: NASTY },
          SpanAttributes: { ...identity, 'vcs.ref.head.name': NASTY, 'cicd.pipeline.name': NASTY },
          StatusMessage: NASTY,
          TraceState: `ot=th:0,vendor=${NASTY}`,
          Duration: '60000000000',
        }),
        otelSpanRow({
          Timestamp: dateTime64(start + 1_000_000_000n),
          TraceId: NASTY_TRACE,
          SpanId: 'job7701',
          ParentSpanId: `5pan'\\\0`,
          SpanName: 'job',
          ResourceAttributes: { ...identity, 'ci.job.id': '7701' },
          SpanAttributes: { ...identity, 'ci.job.id': '7701', 'cicd.pipeline.task.name': NASTY, 'ci.job.status': 'success' },
          Duration: '30000000000',
        }),
        // Another trace of the same project: what a query built by concatenation would let through.
        otelSpanRow({
          Timestamp: dateTime64(start),
          TraceId: 'f00d',
          SpanId: 'other',
          SpanName: 'pipeline',
          ResourceAttributes: { ...identity, 'ci.pipeline.id': '7800' },
          SpanAttributes: { 'vcs.ref.head.name': 'main' },
        }),
      ];
      await insertOtelTraces(clickhouse, rows);
    });

    it('reads them back byte for byte, by id and by job', async () => {
      for (const spans of [await spansOf(reads.pipelineTrace(77, 7700, today, ALL)), await spansOf(reads.jobTrace(77, 7701, today, ALL))]) {
        expect(spans!.map((span) => span.spanId).sort()).toEqual([`5pan'\\\0`, 'job7701']);
        const pipeline = spans!.find((span) => span.name === 'pipeline')!;
        expect(pipeline).toMatchObject({ traceId: NASTY_TRACE, statusMessage: NASTY, traceState: `ot=th:0,vendor=${NASTY}` });
        expect(pipeline.resource[`key'\\\0`]).toBe(NASTY);
        expect(pipeline.attributes['vcs.ref.head.name']).toBe(NASTY);
      }
    });

    it('filters on them as values, never as SQL', async () => {
      await expect(reads.projectJobs(77, today, NASTY)).resolves.toEqual([expect.objectContaining({ name: NASTY, runs: 1 })]);
      await expect(reads.projectJobs(77, today, `main' OR '1'='1`)).resolves.toEqual([]);
      await expect(reads.projectJobs(77, today, `${NASTY}\\`)).resolves.toEqual([]);
      await expect(clickhouse.query('SELECT count() AS spans FROM otel.otel_traces')).resolves.toEqual([{ spans: expect.any(Number) }]);
    });
  });

  describe('when ClickHouse cannot answer', () => {
    let silent: Server;
    const held: Socket[] = [];
    afterAll(async () => {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent?.close(resolve));
    });

    it('throws ReadsUnavailableError, never null, for a wrong password, a closed port, and a server that does not answer in time', async () => {
      const wrongPassword = new ClickHouseTraceReads({ url: clickhouse.url, password: 'not it', timeoutMs: 5_000 });
      await expect(wrongPassword.pipelineTrace(7, 700, today, ALL)).rejects.toThrow(ReadsUnavailableError);
      await expect(wrongPassword.projectJobs(7, today)).rejects.toThrow(/Authentication failed/);
      await wrongPassword.close();

      const closed = new ClickHouseTraceReads({ url: `http://127.0.0.1:${await freePort()}`, password: 'x', timeoutMs: 5_000 });
      await expect(closed.jobTrace(7, 7001, today, ALL)).rejects.toThrow(ReadsUnavailableError);
      await closed.close();

      // Accepts the connection and the request, and never answers.
      silent = createServer((socket) => held.push(socket));
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const port = (silent.address() as { port: number }).port;
      const hung = new ClickHouseTraceReads({ url: `http://127.0.0.1:${port}`, password: 'x', timeoutMs: 300 });
      const error = await hung.pipelineTrace(7, 700, today, ALL).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(ReadsUnavailableError);
      expect((error as ReadsUnavailableError).retryAfterSeconds).toBeGreaterThan(0);
      await hung.close();

      // A read the service gives up (its deadline in the reads pool) aborts its query, whatever the client's own timeout.
      const patient = new ClickHouseTraceReads({ url: `http://127.0.0.1:${port}`, password: 'x', timeoutMs: 60_000 });
      const given = new AbortController();
      const read = patient.pipelineTrace(7, 700, today, { limit: 10, signal: given.signal }).catch((caught: unknown) => caught);
      given.abort();
      expect(await read).toBeInstanceOf(ReadsUnavailableError);
      const jobs = patient.projectJobs(7, today, undefined, AbortSignal.abort()).catch((caught: unknown) => caught);
      expect(await jobs).toBeInstanceOf(ReadsUnavailableError);
      await patient.close();
    });
  });
});
