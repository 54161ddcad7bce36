/**
 * The read API (SPEC §12) under load, in two parts.
 *
 * 1. Reads against pickups (issue 56 item 3; bench/trace-reads.pickups.ts): the built service on each backend holding
 *    one 100,000-span pipeline (100 jobs × 1,000 spans), job pickups at a fixed rate without reads and then while its
 *    trace is read back to back: pickup p99 during reads against without, side by side, and the service's RSS.
 *
 * 2. The ClickHouse backend on a month of spans: is every lookup bounded, and how fast? ClickHouse's engine (chdb)
 *    behind its HTTP interface (test/chdb/http-interface.js), read by the service's own ClickHouseTraceReads through
 *    the official client. otel_traces is filled in SQL (INSERT … SELECT FROM numbers()): pipelines of 40 jobs in four
 *    stages, each job a `job` span, its `queue_wait`, the runner's `job_execution` and seven build stages, each
 *    pipeline a `pipeline` span (401 spans a pipeline), spread over 30 days across 50 projects; the CI view fills
 *    itself as it does behind the Collector (its materialized view fires on the insert). Then both tables are merged
 *    (OPTIMIZE … FINAL), as days-old partitions are in a running install. Measured, one lookup at a time: a job's
 *    trace and a pipeline's trace (window: the job's or pipeline's own times, as GitLab passes them; and the
 *    pipeline's with only the 31-day default window), a project's jobs over 7 days, and the critical path of a
 *    2,000-span pipeline read back from ClickHouse. For each: p50/p95 and the rows ClickHouse read (its
 *    X-ClickHouse-Summary), the proof that a lookup reads its trace and not the month.
 *
 *   npm run bench -- trace-reads                  # both: 3 rounds of 20 s a phase (--rounds N); 10 million spans
 *   npm run bench -- trace-reads --quick          # part 1 only, 5 s a phase, the same 100,000-span pipeline
 *   npm run bench -- trace-reads --quick --service-root ../main   # part 1 against another checkout's build
 *   npm run bench -- trace-reads --smoke          # both, small: that it runs
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { ClickHouseTraceReads, QueryStatistics } from '../src/reads/clickhouse-trace-reads';
import { criticalPath } from '../src/critical-path/critical-path';
import type { TimeWindow, TraceRead } from '../src/reads/trace-reads';
import { startClickHouse } from '../test/helpers/clickhouse';
import { insertOtelTraces, otelTracesRowsOfResourceSpans } from '../test/helpers/clickhouse-exporter';
import { PipelineTrace } from '../test/helpers/pipeline-trace';
import { repoRoot } from '../simulator/repo-root';
import { runBench } from './lib/bench-env';
import { DAY_MS, GENERATE_MONTH_SQL, JOBS_PER_PIPELINE, monthOf, pipelineWindow, SPANS_PER_PIPELINE } from './lib/month-of-spans';
import { percentile } from './lib/percentiles';
import { printTable } from './lib/table';
import { readsAgainstPickups } from './trace-reads.pickups';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    // Another checkout whose built service (dist/main.js) part 1 measures, for a before/after: e.g. a worktree of main.
    'service-root': { type: 'string' },
    seconds: { type: 'string' },
    rounds: { type: 'string' },
    rate: { type: 'string' },
    spans: { type: 'string' },
    lookups: { type: 'string' },
  },
});

/** The lookups measure the backend's reads whole: no cap (the read API's is READS_MAX_SPANS). */
const ALL = { limit: 1_000_000 };

async function main(): Promise<void> {
  const root = repoRoot();
  const small = args.smoke;
  await readsAgainstPickups(args['service-root'] ?? root, {
    jobs: small ? 10 : 100,
    spansPerJob: small ? 100 : 1000,
    seconds: Number(args.seconds ?? (small ? 1 : args.quick ? 5 : 20)),
    rounds: Number(args.rounds ?? (small ? 1 : 3)),
    rate: Number(args.rate ?? (small ? 20 : 100)),
  });
  if (args.quick) return;
  console.log();
  await lookups(root);
}

async function lookups(root: string): Promise<void> {
  const smoke = args.smoke;
  const spans = Number(args.spans ?? (smoke ? 100 * SPANS_PER_PIPELINE : 10_000_000));
  const lookups = Number(args.lookups ?? (smoke ? 5 : 200));
  // 50 projects: 500 pipelines each over the month at 10 million spans; a few for the smoke run's 100 pipelines.
  const PROJECTS = smoke ? 4 : 50;
  const now = Date.now();
  const { pipelines, baseMs, spacingMs } = monthOf(spans, now);

  const clickhouse = await startClickHouse({ http: { password: 'bench' } });
  try {
    await clickhouse.query(readFileSync(join(root, 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8'));
    let started = performance.now();
    await clickhouse.query(GENERATE_MONTH_SQL(pipelines * SPANS_PER_PIPELINE, PROJECTS, baseMs, spacingMs));
    const generateSeconds = (performance.now() - started) / 1000;

    // The critical path's pipeline: 200 jobs of seven build stages each, in 20 stages of 10, each stage's jobs
    // queued after the stage before ended (2,001 spans; the path is one job a stage).
    const bigProject = PROJECTS + 1;
    const big = new PipelineTrace(bigProject, 900_000, now - 2 * DAY_MS);
    for (let job = 0; job < 200; job += 1) {
      const stage = Math.floor(job / 10);
      const queuedAt = stage * 150 + (job % 10);
      const script = 60 + ((job * 37) % 50);
      big.job({
        jobId: 9_000_000 + job,
        name: `job-${job}`,
        stage: `stage-${stage}`,
        queuedAt,
        pickedUpAt: queuedAt + 5,
        finishedAt: queuedAt + 5 + 13 + script,
        stages: [
          ['prepare_executor', 3],
          ['get_sources', 2],
          ['restore_cache', 4],
          ['step_script', script],
          ['after_script', 1],
          ['archive_cache', 2],
          ['upload_artifacts', 1],
        ],
      });
    }
    big.pipeline(900_000, { status: 'success', finishedAt: 20 * 150 });
    await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(big.resourceSpans()));

    started = performance.now();
    await clickhouse.query('OPTIMIZE TABLE otel.otel_traces FINAL; OPTIMIZE TABLE otel.ci_job_telemetry_traces FINAL');
    const optimizeSeconds = (performance.now() - started) / 1000;
    const [traces] = await clickhouse.query(
      "SELECT uniqExact(partition) AS days, count() AS parts FROM system.parts WHERE database = 'otel' AND table = 'otel_traces' AND active",
    );
    const [view] = await clickhouse.query('SELECT count() AS rows FROM otel.ci_job_telemetry_traces');
    const [spanCount] = await clickhouse.query('SELECT count() AS rows FROM otel.otel_traces');
    console.log(
      `otel_traces: ${spanCount.rows} spans in ${traces.days} daily partitions (${traces.parts} parts), generated in ${generateSeconds.toFixed(1)} s, merged in ${optimizeSeconds.toFixed(1)} s; ` +
        `the CI view: ${view.rows} rows; ${pipelines} pipelines of ${JOBS_PER_PIPELINE} jobs, ${PROJECTS} projects`,
    );

    let statistics: QueryStatistics[] = [];
    const byQuery = new Map<string, number[]>();
    const reads = new ClickHouseTraceReads({
      url: clickhouse.url,
      password: clickhouse.password,
      timeoutMs: 30_000,
      onQuery: (query) => statistics.push(query),
    });
    const results: string[][] = [['lookup', 'n', 'p50 ms', 'p95 ms', 'goal p95', 'spans (median)', 'rows read (median)', 'rows read (max)']];
    // Pipelines spread over the month, the same ones for every lookup kind.
    const sample = Array.from({ length: lookups }, (_, index) => Math.floor(((index + 0.5) * pipelines) / lookups));
    const measure = async (name: string, goalMs: number, each: (index: number) => Promise<number>) => {
      const latencies: number[] = [];
      const rowsRead: number[] = [];
      const counts: number[] = [];
      for (let index = 0; index < sample.length; index += 1) {
        statistics = [];
        const before = performance.now();
        counts.push(await each(index));
        latencies.push(performance.now() - before);
        rowsRead.push(statistics.reduce((sum, query) => sum + query.readRows, 0));
        for (const query of statistics) byQuery.set(`${name}: ${query.query}`, [...(byQuery.get(`${name}: ${query.query}`) ?? []), query.readRows]);
      }
      results.push([
        name,
        String(sample.length),
        percentile(latencies, 50).toFixed(1),
        percentile(latencies, 95).toFixed(1),
        `${goalMs}`,
        String(percentile(counts, 50)),
        String(percentile(rowsRead, 50)),
        String(Math.max(...rowsRead)),
      ]);
    };
    const expectSpans = (read: TraceRead | null, what: string) => {
      const found = read?.spans;
      if (found === undefined || found.length !== SPANS_PER_PIPELINE) throw new Error(`${what}: ${found?.length ?? 'no'} spans, not ${SPANS_PER_PIPELINE}`);
      return found.length;
    };
    const month: TimeWindow = { fromMs: now - 31 * DAY_MS, toMs: now };

    await measure("a job's trace (its pipeline's times)", 100, async (index) => {
      const p = sample[index];
      const window = pipelineWindow(p, baseMs, spacingMs);
      const job = 1_000_000 + p * JOBS_PER_PIPELINE + (index % JOBS_PER_PIPELINE);
      return expectSpans(await reads.jobTrace(1 + (p % PROJECTS), job, window, ALL), `job ${job}`);
    });
    await measure("a pipeline's trace (its times)", 100, async (index) => {
      const p = sample[index];
      return expectSpans(await reads.pipelineTrace(1 + (p % PROJECTS), 100_000 + p, pipelineWindow(p, baseMs, spacingMs), ALL), `pipeline ${p}`);
    });
    await measure("a pipeline's trace (31 days)", 100, async (index) => {
      const p = sample[index];
      return expectSpans(await reads.pipelineTrace(1 + (p % PROJECTS), 100_000 + p, month, ALL), `pipeline ${p}`);
    });
    await measure("a project's jobs, 7 days", 1000, async (index) => {
      const jobs = await reads.projectJobs(1 + (index % PROJECTS), { fromMs: now - 7 * DAY_MS, toMs: now });
      if (jobs.length === 0) throw new Error(`project ${1 + (index % PROJECTS)}: no jobs in 7 days`);
      return jobs.length;
    });
    const bigSpans = (await reads.pipelineTrace(bigProject, 900_000, { fromMs: big.at(-60), toMs: big.at(3100) }, ALL))!.spans;
    await measure(
      "2,000-span pipeline's trace",
      100,
      async () => (await reads.pipelineTrace(bigProject, 900_000, { fromMs: big.at(-60), toMs: big.at(3100) }, ALL))!.spans.length,
    );
    await measure("2,000-span pipeline's critical path", 20, async () => {
      const path = criticalPath(bigSpans);
      if (path === null || path.path.length !== 20) throw new Error(`critical path of the 2,000-span pipeline: ${path?.path.length ?? 'none'} jobs, not 20`);
      return bigSpans.length;
    });
    await reads.close();

    printTable(results);
    console.log();
    printTable([
      ['query of the lookup', 'rows read (median)', 'rows read (max)'],
      ...[...byQuery].map(([query, rows]) => [query, String(percentile(rows, 50)), String(Math.max(...rows))]),
    ]);
    console.log('rows read: what ClickHouse counted for the lookup (all of its queries); the critical path reads nothing (computed on the spans read above)');
  } finally {
    await clickhouse.stop();
  }
}

runBench(main);
