/**
 * The reads across pipelines (SPEC §13, issue 58's "Performance"), in three parts.
 *
 * 1. The what-if replay alone: `whatIf` (src/across/runner-queue.ts) over a recorded fleet of 50,000 jobs of one tag
 *    set (12 runners at 90 % load, GitLab's pickup latency 1 to 5 s: test/helpers/job-run-rows.ts `recordedFleet`),
 *    asking for 3 more runners. CPU time of this process (`process.cpuUsage`) a replay, against 5 s of one core.
 *
 * 2. ClickHouse (chdb behind its HTTP interface, as trace-reads): the trace-reads month (10 M spans, 50 projects of
 *    500 pipelines, generated in SQL: bench/lib/month-of-spans.ts) and beside it one project raised to 5,000 pipelines
 *    of 40 jobs over the same 30 days, written through the Collector exporter's emulation (bench/across.project.ts)
 *    so the materialized view fills `otel.ci_job_runs` as it does behind a Collector. Then the tables are merged
 *    (OPTIMIZE … FINAL). The built service reads them over HTTP with an internal-API token, one read at a time:
 *    compare (pipelines spread over the month against their default baseline, and against a named one: its floor),
 *    regressions, waste and the runner queue over 30 days. For each, p50/p95 against its target and the rows ClickHouse read for the read's queries,
 *    from each answer's X-ClickHouse-Summary, counted by a pass-through between the service and ClickHouse
 *    (bench/lib/clickhouse-summary-proxy.ts: the embedded engine keeps no system.query_log).
 *
 * 3. The same reads on the embedded files (the default install): the raised project's latest pipelines alone (all
 *    5,000 by default), written as the embedded collector writes them, one file raised to hold them
 *    (LOCAL_COLLECTOR_MAX_BYTES: the default keeps two files of 64 MiB).
 *
 * A read that does not answer 200 (a 503 past READS_TIMEOUT_MS, set to its most, 60 s) is a failure: the bench exits
 * non-zero, and stops asking that read after three.
 *
 *   npm run bench -- across                     # 10 M spans, 5,000 pipelines, 40 reads of each kind; files: the
 *                                               # latest 400 (what the default files hold), 10 reads of each kind
 *   npm run bench -- across --spans 2000000 --pipelines 1000 --lookups 10 --files-pipelines 500
 *   npm run bench -- across --smoke             # small, in seconds: that it runs (a 100-pipeline month, 40 raised
 *                                               # pipelines, 2 reads of each kind, a what-if of 5,000 jobs)
 *
 * Options: --spans N (the month's spans), --pipelines N (the raised project's), --lookups N (reads of each kind on
 * ClickHouse), --files-pipelines N (0: no files part), --files-lookups N, --what-if-jobs N, --replays N, --before CHECKOUT
 * (another checkout, built, whose service then reads the same ClickHouse: the side-by-side baseline), --before-lookups N.
 */
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { whatIf } from '../src/across/runner-queue';
import { localCollectorDirectory, signalFile } from '../src/collector/collector-files';
import { ClickHouse, startClickHouse } from '../test/helpers/clickhouse';
import { insertOtelTraces, otelTracesRowsOfResourceSpans, OtelTracesRow } from '../test/helpers/clickhouse-exporter';
import { recordedFleet } from '../test/helpers/job-run-rows';
import { ServiceProcess, startService } from '../test/helpers/service';
import { repoRoot } from '../simulator/repo-root';
import {
  RAISED_JOBS_PER_PIPELINE,
  RaisedProject,
  raisedPipeline,
  raisedPipelineId,
  raisedRef,
  SLOWER_BY_SECONDS,
  SLOWER_JOB,
  slowerFrom,
} from './across.project';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import { QueryRead, startSummaryProxy, SummaryProxy } from './lib/clickhouse-summary-proxy';
import { DAY_MS, GENERATE_MONTH_SQL, monthOf, SPANS_PER_PIPELINE } from './lib/month-of-spans';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    spans: { type: 'string' },
    pipelines: { type: 'string' },
    lookups: { type: 'string' },
    'files-pipelines': { type: 'string' },
    'files-lookups': { type: 'string' },
    'what-if-jobs': { type: 'string' },
    replays: { type: 'string' },
    before: { type: 'string' },
    'before-lookups': { type: 'string' },
  },
});

const smoke = args.smoke;
const count = (value: string | undefined, whole: number, small: number) => {
  const given = Number(value ?? (smoke ? small : whole));
  if (!Number.isSafeInteger(given) || given < 0) throw new Error(`not a count: ${value}`);
  return given;
};
const SPANS = count(args.spans, 10_000_000, 100 * SPANS_PER_PIPELINE);
// The month's projects: 50 of 500 pipelines each at 10 million spans, as trace-reads; a few for the smoke run's 100.
const MONTH_PROJECTS = smoke ? 4 : 50;
const PIPELINES = count(args.pipelines, 5_000, 40);
const LOOKUPS = Math.max(1, count(args.lookups, 40, 2));
// 400 pipelines of this shape (about 330 KiB each) are what the embedded collector's default two 64 MiB files hold.
const FILES_PIPELINES = Math.min(PIPELINES, count(args['files-pipelines'], 400, 40));
const FILES_LOOKUPS = Math.max(1, count(args['files-lookups'], 10, 2));
const WHAT_IF_JOBS = count(args['what-if-jobs'], 50_000, 5_000);
const REPLAYS = Math.max(1, count(args.replays, 5, 1));
/** Another checkout, built (`npm run build` there), whose service reads the same ClickHouse after this one: the baseline. */
const BEFORE = args.before;
const BEFORE_LOOKUPS = Math.max(1, count(args['before-lookups'], 3, 1));

const RAISED_PROJECT = 1000;
/** READS_TIMEOUT_MS at its most: a slow read is measured, not cut at the default 4 s. */
const READS_TIMEOUT_MS = 60_000;
/** A read kind is no longer asked after this many answers other than 200. */
const FAILURES_BEFORE_GIVING_UP = 3;
const MIB = 1024 * 1024;

/** Issue 58's targets, p95 (ms); the runner queue has none. */
const TARGET_MS = { compare: 300, regressions: 2000, waste: 1500, queue: null } as const;
const WHAT_IF_TARGET_CPU_MS = 5000;

// A smoke run's sizes say nothing of the targets: its figures are printed, not judged.
const verdict = (value: number, target: number | null) => (target === null ? '' : smoke ? 'not judged' : value <= target ? 'met' : 'missed');
const ms = (value: number) => (Number.isNaN(value) ? '-' : value < 10 ? value.toFixed(2) : value.toFixed(0));
const thousands = (value: number) => (Number.isNaN(value) ? '-' : Math.round(value).toLocaleString('en-US'));

async function main(): Promise<void> {
  const root = repoRoot();
  // Fewer, and the first pipelines have no default baseline to compare with, nor regressions a series to split.
  if (PIPELINES < 20 || (FILES_PIPELINES > 0 && FILES_PIPELINES < 20)) throw new Error('--pipelines and --files-pipelines: at least 20 (or files 0)');
  if (smoke) console.log('smoke run: small sizes, so that it runs; no figure below is judged');
  whatIfReplay();

  const now = Date.now();
  const month = monthOf(SPANS, now);
  // The raised project's pipelines over the same 30 days as the month's.
  const project: RaisedProject = {
    projectId: RAISED_PROJECT,
    pipelines: PIPELINES,
    firstCreatedAt: month.baseMs,
    spacingMs: Math.floor((30 * DAY_MS - 3 * 3_600_000) / Math.max(1, PIPELINES)),
    seed: 58,
  };
  const window = { from: new Date(now - 30 * DAY_MS).toISOString(), to: new Date(now).toISOString() };
  const work = mkdtempSync(join(tmpdir(), 'cjt-across-bench-'));
  try {
    const filesDataDir = join(work, 'files-data');
    await onClickHouse(root, work, project, month, window, filesDataDir);
    if (FILES_PIPELINES > 0) {
      console.log();
      await onFiles(root, work, project, window, filesDataDir);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Part 1: the what-if's replay alone, on one thread. */
function whatIfReplay(): void {
  const runners = 12;
  const tags = 'arm64,docker';
  const rows = recordedFleet({ seed: 58, runners, jobs: WHAT_IF_JOBS, utilization: 0.9, pickupLatencyMs: [1000, 5000], tags });
  const cpuMs: number[] = [];
  const wallMs: number[] = [];
  let learned = '';
  for (let replay = 0; replay < REPLAYS; replay++) {
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    const answer = whatIf(rows, { tags, runners: 3 });
    wallMs.push(performance.now() - started);
    const cpu = process.cpuUsage(cpuBefore);
    cpuMs.push((cpu.user + cpu.system) / 1000);
    if (answer.jobs !== WHAT_IF_JOBS) throw new Error(`the what-if replayed ${answer.jobs} jobs, not ${WHAT_IF_JOBS}`);
    learned = `${answer.concurrency.runners} runners learned (${runners} recorded${answer.concurrency.identified ? '' : ', not identified'}), queue p95 ${answer.queue_seconds.recorded.p95} s recorded, ${answer.queue_seconds.before.p95} s replayed, ${answer.queue_seconds.after.p95} s with 3 more`;
  }
  console.log(`what-if replay: ${WHAT_IF_JOBS.toLocaleString('en-US')} jobs of one tag set, ${REPLAYS} replays; ${learned}`);
  printTable([
    ['figure', 'median', 'max', 'first', 'target', ''],
    [
      'CPU of this process a replay (ms)',
      ms(median(cpuMs)),
      ms(Math.max(...cpuMs)),
      ms(cpuMs[0]),
      `≤ ${WHAT_IF_TARGET_CPU_MS}`,
      verdict(median(cpuMs), WHAT_IF_TARGET_CPU_MS),
    ],
    ['wall time a replay (ms)', ms(median(wallMs)), ms(Math.max(...wallMs)), ms(wallMs[0]), '', ''],
  ]);
  console.log();
}

interface Window {
  readonly from: string;
  readonly to: string;
}

interface ReadKind {
  readonly name: string;
  readonly targetMs: number | null;
  /** The read's path for its `index`th asking. */
  readonly path: (index: number) => string;
  /** What is wrong with a 200 answer, if anything. */
  readonly check: (body: Record<string, unknown>) => string | null;
}

interface Measured {
  readonly kind: ReadKind;
  readonly latencies: number[];
  readonly answerBytes: number[];
  /** Per read: the rows ClickHouse read for its queries, how many queries, their answers' bytes on the wire. */
  readonly rowsRead: number[];
  readonly queries: number[];
  readonly wireBytes: number[];
  readonly byQuery: Map<string, number[]>;
  readonly failures: Map<string, number>;
  /** The last answer that was 200. */
  last?: Record<string, unknown>;
}

/** The reads of SPEC §13 the issue sets targets for, over `pipelines` of the raised project created in the window. */
function readKinds(window: Window, pipelines: number, compareTargets: readonly number[]): ReadKind[] {
  const base = `/internal/ci/telemetry/projects/${RAISED_PROJECT}`;
  const range = `from=${encodeURIComponent(window.from)}&to=${encodeURIComponent(window.to)}`;
  const allPipelines = (body: Record<string, unknown>) =>
    body.pipelines === pipelines ? null : `rests on ${String(body.pipelines)} pipelines, not ${pipelines}`;
  return [
    {
      name: 'compare (default baseline)',
      targetMs: TARGET_MS.compare,
      path: (index) => `${base}/pipelines/${raisedPipelineId(compareTargets[index % compareTargets.length])}/compare`,
      check: compareChecks,
    },
    {
      // The same comparisons against the pipeline ten before: two trace reads, no candidates read (the floor of compare).
      name: 'compare (named baseline)',
      targetMs: TARGET_MS.compare,
      path: (index) => {
        const target = compareTargets[index % compareTargets.length];
        return `${base}/pipelines/${raisedPipelineId(target)}/compare?baseline=${raisedPipelineId(target - 10)}`;
      },
      check: compareChecks,
    },
    { name: 'regressions, 30 days', targetMs: TARGET_MS.regressions, path: () => `${base}/regressions?${range}`, check: allPipelines },
    { name: 'waste, 30 days', targetMs: TARGET_MS.waste, path: () => `${base}/waste?${range}`, check: allPipelines },
    { name: 'runners/queue, 30 days', targetMs: TARGET_MS.queue, path: () => `${base}/runners/queue?${range}`, check: allPipelines },
  ];
}

/** A comparison's parts add up to its delta to the millisecond (SPEC §13), or what is wrong. */
function compareChecks(body: Record<string, unknown>): string | null {
  const parts = Object.values(body.contributions as Record<string, number>).reduce((sum, seconds) => sum + Math.round(seconds * 1000), 0);
  return parts === Math.round((body.duration_delta_seconds as number) * 1000) ? null : 'its parts do not add up to its delta';
}

/**
 * Main-branch pipelines spread over those the backend holds (from `first`), each with 40 before it, so that each has
 * a default baseline (the median of the last 20 of its ref and source).
 */
function compareTargets(first: number, lookups: number): number[] {
  const eligible: number[] = [];
  for (let index = first + Math.min(40, Math.floor((PIPELINES - first) / 2)); index < PIPELINES; index++) if (raisedRef(index) === 'main') eligible.push(index);
  return Array.from({ length: lookups }, (_, i) => eligible[Math.floor(((i + 0.5) * eligible.length) / lookups)]);
}

/** Each kind asked `lookups` times, one read at a time, after one read to start the service's reads thread. */
async function measureReads(
  service: ServiceProcess,
  kinds: readonly ReadKind[],
  lookups: number,
  proxy?: SummaryProxy,
): Promise<{ measured: Measured[]; firstMs: number }> {
  const header = await rollingAuthHeader(service.secrets.internalApiSecret);
  const pool = new Pool(service.url, { connections: 1, headersTimeout: 10 * 60_000, bodyTimeout: 10 * 60_000 });
  const ask = async (path: string) => {
    const started = performance.now();
    const response = await pool.request({ method: 'GET', path, headers: header.current() });
    const body = Buffer.from(await response.body.arrayBuffer());
    return { status: response.statusCode, ms: performance.now() - started, body };
  };
  try {
    // The first read starts the pool's thread; on the files it indexes the collector's file first, which may take
    // longer than a read may (a 503 while it works): asked again until it answers.
    let firstMs = 0;
    for (let attempt = 0; ; attempt++) {
      const first = await ask(kinds[0].path(0));
      firstMs += first.ms;
      if (first.status === 200) break;
      if (attempt === 20) throw new Error(`the first read never answered: ${first.status} ${first.body.toString().slice(0, 300)}`);
    }
    proxy?.take();
    const measured: Measured[] = [];
    for (const kind of kinds) {
      const run: Measured = { kind, latencies: [], answerBytes: [], rowsRead: [], queries: [], wireBytes: [], byQuery: new Map(), failures: new Map() };
      for (let index = 0; index < lookups; index++) {
        const answer = await ask(kind.path(index));
        const queries: QueryRead[] = proxy?.take() ?? [];
        let problem: string | null = answer.status === 200 ? null : `${answer.status}`;
        if (problem === null) {
          run.latencies.push(answer.ms);
          run.answerBytes.push(answer.body.length);
          run.rowsRead.push(queries.reduce((sum, query) => sum + query.readRows, 0));
          run.queries.push(queries.length);
          run.wireBytes.push(queries.reduce((sum, query) => sum + query.wireBytes, 0));
          for (const query of queries) run.byQuery.set(query.query, [...(run.byQuery.get(query.query) ?? []), query.readRows]);
          run.last = JSON.parse(answer.body.toString('utf8')) as Record<string, unknown>;
          problem = kind.check(run.last);
        }
        if (problem !== null) {
          run.failures.set(problem, (run.failures.get(problem) ?? 0) + 1);
          if (answer.status !== 200 && [...run.failures.values()].reduce((a, b) => a + b, 0) >= FAILURES_BEFORE_GIVING_UP) break;
        }
      }
      measured.push(run);
    }
    return { measured, firstMs };
  } finally {
    header.stop();
    await pool.close();
  }
}

function printReads(measured: readonly Measured[], withRows: boolean): void {
  const header = ['read', 'n', 'p50 ms', 'p95 ms', 'target p95', '', 'answer KiB (median)'];
  if (withRows) header.push('queries', 'rows read (median)', 'rows read (max)', 'from ClickHouse, MiB as sent (median)');
  header.push('failures');
  printTable([
    header,
    ...measured.map((run) => {
      const p95 = percentile(run.latencies, 95);
      const row = [
        run.kind.name,
        String(run.latencies.length),
        ms(percentile(run.latencies, 50)),
        ms(p95),
        run.kind.targetMs === null ? 'none' : `≤ ${run.kind.targetMs}`,
        verdict(run.latencies.length === 0 ? Infinity : p95, run.kind.targetMs),
        (median(run.answerBytes) / 1024).toFixed(1),
      ];
      if (withRows)
        row.push(
          run.queries.length === 0 ? '-' : String(median(run.queries)),
          thousands(median(run.rowsRead)),
          thousands(run.rowsRead.length === 0 ? NaN : Math.max(...run.rowsRead)),
          (median(run.wireBytes) / MIB).toFixed(2),
        );
      row.push(run.failures.size === 0 ? 'none' : [...run.failures].map(([problem, times]) => `${times}× ${problem}`).join(', '));
      return row;
    }),
  ]);
  if (measured.some((run) => run.failures.size > 0)) process.exitCode = 1;
}

/** What the regressions read found: the step the project was given (test-3's restore_cache, +60 s) and anything else. */
function foundRegressions(measured: readonly Measured[]): string {
  const answer = measured.find((run) => run.kind.name.startsWith('regressions'))?.last as
    { change_points: Array<{ job: string | null; part: string; before_seconds: number; after_seconds: number; first_pipeline_id: number }> } | undefined;
  if (answer === undefined) return 'regressions: no answer';
  const points = answer.change_points.map(
    (point) => `${point.job ?? 'critical path'} ${point.part} ${point.before_seconds} → ${point.after_seconds} s from pipeline ${point.first_pipeline_id}`,
  );
  return `regressions found ${points.length} change point(s)${points.length === 0 ? '' : `: ${points.join('; ')}`} (the step: ${SLOWER_JOB} restore_cache +${SLOWER_BY_SECONDS} s from pipeline ${raisedPipelineId(slowerFrom(PIPELINES))})`;
}

/**
 * The raised project's pipelines, each as its exports: into ClickHouse through the exporter's emulation, in batches,
 * and those from `fileFrom` on into the embedded collector's file under `filesDataDir`.
 */
async function writeRaisedProject(
  clickhouse: ClickHouse,
  project: RaisedProject,
  filesDataDir: string,
  fileFrom: number,
): Promise<{ spans: number; exports: number; fileBytes: number }> {
  mkdirSync(localCollectorDirectory(filesDataDir), { recursive: true });
  const file = signalFile(localCollectorDirectory(filesDataDir), 'traces');
  writeFileSync(file, '');
  let batch: OtelTracesRow[] = [];
  let spans = 0;
  let exports = 0;
  for (let index = 0; index < project.pipelines; index++) {
    const pipeline = raisedPipeline(project, index);
    const rows = otelTracesRowsOfResourceSpans(pipeline.exports);
    spans += rows.length;
    exports += pipeline.exports.length;
    batch.push(...rows);
    if (index >= fileFrom) appendFileSync(file, pipeline.exports.map((resourceSpans) => `${JSON.stringify({ resourceSpans: [resourceSpans] })}\n`).join(''));
    if (batch.length >= 10_000 || index === project.pipelines - 1) {
      await insertOtelTraces(clickhouse, batch);
      batch = [];
    }
  }
  return { spans, exports, fileBytes: statSync(file).size };
}

/** Part 2. */
async function onClickHouse(
  root: string,
  work: string,
  project: RaisedProject,
  month: ReturnType<typeof monthOf>,
  window: Window,
  filesDataDir: string,
): Promise<void> {
  const clickhouse = await startClickHouse({ http: { password: 'bench' } });
  let proxy: SummaryProxy | undefined;
  let service: ServiceProcess | undefined;
  try {
    await clickhouse.query(readFileSync(join(root, 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8'));
    let started = performance.now();
    await clickhouse.query(GENERATE_MONTH_SQL(month.pipelines * SPANS_PER_PIPELINE, MONTH_PROJECTS, month.baseMs, month.spacingMs));
    const monthSeconds = (performance.now() - started) / 1000;
    started = performance.now();
    const raised = await writeRaisedProject(clickhouse, project, filesDataDir, PIPELINES - FILES_PIPELINES);
    const raisedSeconds = (performance.now() - started) / 1000;
    started = performance.now();
    // As days-old partitions are in a running install (trace-reads does the same).
    await clickhouse.query('OPTIMIZE TABLE otel.otel_traces FINAL; OPTIMIZE TABLE otel.ci_job_telemetry_traces FINAL; OPTIMIZE TABLE otel.ci_job_runs FINAL');
    const optimizeSeconds = (performance.now() - started) / 1000;
    const [traces] = await clickhouse.query(
      "SELECT uniqExact(partition) AS days, count() AS parts FROM system.parts WHERE database = 'otel' AND table = 'otel_traces' AND active",
    );
    const [spanCount] = await clickhouse.query('SELECT count() AS rows FROM otel.otel_traces');
    const [runRows] = await clickhouse.query(
      `SELECT count() AS rows, countIf(project_id = ${RAISED_PROJECT}) AS raised, uniqExact(project_id) AS projects FROM otel.ci_job_runs`,
    );
    console.log(
      `ClickHouse (chdb): otel_traces ${thousands(Number(spanCount.rows))} spans in ${String(traces.days)} daily partitions (${String(traces.parts)} parts): ` +
        `the month, ${thousands(month.pipelines * SPANS_PER_PIPELINE)} spans of ${thousands(month.pipelines)} pipelines in ${MONTH_PROJECTS} projects (SQL, ${monthSeconds.toFixed(1)} s), ` +
        `and project ${RAISED_PROJECT} raised to ${thousands(PIPELINES)} pipelines of ${RAISED_JOBS_PER_PIPELINE} jobs, ${thousands(raised.spans)} spans in ${thousands(raised.exports)} exports ` +
        `(exporter emulation, ${raisedSeconds.toFixed(1)} s); merged in ${optimizeSeconds.toFixed(1)} s; ` +
        `ci_job_runs ${thousands(Number(runRows.rows))} rows, ${thousands(Number(runRows.raised))} of project ${RAISED_PROJECT}, ${String(runRows.projects)} projects`,
    );

    proxy = await startSummaryProxy(clickhouse.url);
    const passwordFile = join(work, 'clickhouse-password');
    writeFileSync(passwordFile, clickhouse.password, { mode: 0o600 });
    /** The built service of `checkout` reading this ClickHouse through the pass-through. */
    const serviceOf = (checkout: string, name: string) =>
      startService(
        {
          DATA_DIR: mkdtempSync(join(work, `ch-data-${name}-`)),
          LOG_LEVEL: 'warn',
          CLICKHOUSE_URL: proxy!.url,
          CLICKHOUSE_PASSWORD_FILE: passwordFile,
          READS_TIMEOUT_MS: String(READS_TIMEOUT_MS),
        },
        { root: checkout, logFile: join(work, `clickhouse-service-${name}.log`) },
      );
    service = await serviceOf(root, 'now');
    const kinds = readKinds(window, PIPELINES, compareTargets(0, LOOKUPS));
    const { measured, firstMs } = await measureReads(service, kinds, LOOKUPS, proxy);
    console.log(`the built service on ClickHouse, ${LOOKUPS} reads of each kind, one at a time (the first read, to start its reads thread: ${ms(firstMs)} ms)`);
    printReads(measured, true);
    console.log(foundRegressions(measured));
    console.log();
    printTable([
      ['query of the read', 'rows read (median)', 'rows read (max)'],
      ...measured.flatMap((run) =>
        [...run.byQuery].map(([query, rows]) => [`${run.kind.name}: ${query}`, thousands(median(rows)), thousands(Math.max(...rows))]),
      ),
    ]);
    console.log(
      "rows read: what ClickHouse's X-ClickHouse-Summary counted for the read's queries; compare targets are main-branch pipelines spread over the month, each read with the default 31-day lookback",
    );
    if (BEFORE !== undefined) {
      await service.stop();
      service = await serviceOf(BEFORE, 'before');
      const before = await measureReads(service, readKinds(window, PIPELINES, compareTargets(0, BEFORE_LOOKUPS)), BEFORE_LOOKUPS, proxy);
      console.log();
      console.log(`side by side on the same ClickHouse: this checkout, then ${BEFORE} (${BEFORE_LOOKUPS} reads of each kind), p50 ms`);
      printTable([
        ['read', 'before p50', 'now p50', 'now / before', 'before rows read (median)', 'now rows read (median)'],
        ...measured.map((now, i) => {
          const was = before.measured[i];
          const [p50Was, p50Now] = [percentile(was.latencies, 50), percentile(now.latencies, 50)];
          return [now.kind.name, ms(p50Was), ms(p50Now), (p50Now / p50Was).toFixed(3), thousands(median(was.rowsRead)), thousands(median(now.rowsRead))];
        }),
      ]);
    }
  } finally {
    await service?.stop();
    await proxy?.close();
    await clickhouse.stop();
  }
}

/** Part 3. */
async function onFiles(root: string, work: string, project: RaisedProject, window: Window, filesDataDir: string): Promise<void> {
  const fileBytes = statSync(signalFile(localCollectorDirectory(filesDataDir), 'traces')).size;
  const service = await startService(
    {
      DATA_DIR: filesDataDir,
      LOG_LEVEL: 'warn',
      READS_TIMEOUT_MS: String(READS_TIMEOUT_MS),
      // One file holding all that was written, so the collector never rotates it away.
      LOCAL_COLLECTOR_MAX_BYTES: String(Math.max(64 * MIB, 2 * fileBytes)),
    },
    { root, logFile: join(work, 'files-service.log') },
  );
  try {
    const kinds = readKinds(window, FILES_PIPELINES, compareTargets(PIPELINES - FILES_PIPELINES, FILES_LOOKUPS));
    const { measured, firstMs } = await measureReads(service, kinds, FILES_LOOKUPS);
    console.log(
      `the built service on the embedded files: project ${RAISED_PROJECT}'s latest ${thousands(FILES_PIPELINES)} pipelines alone, ${(fileBytes / MIB).toFixed(1)} MiB in traces.jsonl ` +
        `(the default keeps two files of 64 MiB); ${FILES_LOOKUPS} reads of each kind (the first read, indexing the file: ${ms(firstMs)} ms)`,
    );
    printReads(measured, false);
    console.log(foundRegressions(measured));
    if (FILES_PIPELINES < project.pipelines) console.log(`the files hold the last ${FILES_PIPELINES} of the ${project.pipelines} pipelines ClickHouse holds`);
  } finally {
    await service.stop();
  }
}

runBench(main);
