/**
 * Issue 56 item 3, measured: do reads of a large trace hold up job pickups? The built service (dist/main.js) on each
 * backend of the read API, holding one 100,000-span pipeline (100 jobs × 1,000 spans their programs exported, about
 * 30 MiB as the embedded collector writes it): job pickups at a fixed rate with no reads, then the same load while a
 * reader reads that pipeline's trace back to back. Printed side by side, from the same run: pickup p99 without and
 * during reads and their ratio (the target: within 2×), what the reads took and answered, and the service's
 * RSS before, at most during, and after the reads.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { startClickHouse } from '../test/helpers/clickhouse';
import { insertOtelTraces, otelTracesRowsOfResourceSpans } from '../test/helpers/clickhouse-exporter';
import { withCriticalPathAttributes } from '../test/helpers/critical-path-attributes';
import { ServiceProcess, startService } from '../test/helpers/service';
import { largePipeline } from '../test/suites/large-pipeline';
import { localCollectorDirectory, signalFile } from '../src/collector/collector-files';
import { rollingAuthHeader } from './lib/bench-env';
import { runFixedRate } from './lib/fixed-rate-load';
import { jobPayloadBodies } from './lib/job-payload-body';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';
import { DECORATOR_ROUTE } from './lib/bench-server';

export interface PickupsOptions {
  readonly jobs: number;
  readonly spansPerJob: number;
  /** Seconds of pickups in each phase (no reads, then reads). */
  readonly seconds: number;
  /** Pairs of phases, alternating: no reads, reads. */
  readonly rounds: number;
  /** Pickups per second. */
  readonly rate: number;
}

interface BackendRun {
  readonly backend: string;
  readonly quietP99: number;
  readonly quietP50: number;
  readonly busyP99: number;
  readonly busyP50: number;
  /** Each round's p99 during reads over its p99 without. */
  readonly roundRatios: number[];
  readonly pickupFailures: number;
  /** The pickup generator's worst lag behind its schedule, both phases: above a few ms, this process was busy. */
  readonly generatorLagMs: number;
  readonly reads: number;
  readonly readStatuses: string;
  readonly readP50: number;
  readonly firstReadMs: number;
  readonly answerMiB: number;
  readonly completeness: string;
  readonly rssBeforeMiB: number;
  readonly rssMaxMiB: number;
  readonly rssAfterMiB: number;
}

const MIB = 1024 * 1024;
const PROJECT = 7;
const PIPELINE = 4200;

/** The process's resident set, from /proc: its worker threads included. */
function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? 0) / 1024;
}

/** `completeness`, the last member of a trace answer. */
function completenessOf(body: Buffer): Record<string, unknown> {
  const tail = body.subarray(body.lastIndexOf('"completeness":')).toString();
  return JSON.parse(tail.slice('"completeness":'.length, -1)) as Record<string, unknown>;
}

async function measure(backend: string, service: ServiceProcess, options: PickupsOptions): Promise<BackendRun> {
  const header = await rollingAuthHeader(service.secrets.internalApiSecret);
  const bodies = jobPayloadBodies();
  // Job ids whose pipeline (PIPELINE_SIZES' cycle) is a valid id, each pickup a new job.
  let nextJobId = 1_000_000;
  const pickups = () =>
    runFixedRate({
      origin: service.url,
      path: DECORATOR_ROUTE,
      ratePerSecond: options.rate,
      durationSeconds: options.seconds,
      connections: 8,
      headers: () => ({ 'content-type': 'application/json', ...header.current() }),
      bodyFor: () => bodies.bodyFor(nextJobId++),
    });
  const readPool = new Pool(service.url, { connections: 1 });
  const traceUrl = `/internal/ci/telemetry/projects/${PROJECT}/pipelines/${PIPELINE}/trace`;
  const read = async () => {
    const started = performance.now();
    const response = await readPool.request({ method: 'GET', path: traceUrl, headers: header.current() });
    const body = Buffer.from(await response.body.arrayBuffer());
    return { status: response.statusCode, ms: performance.now() - started, body };
  };
  try {
    // The first read starts the pool's thread and, on the files backend, indexes the 30 MiB file.
    const first = await read();
    let rssBefore = rssMiB(service.pid);
    let rssMax = rssBefore;
    const readings: Array<{ status: number; ms: number; bytes: number; completeness?: string }> = [];
    const quietLatencies: number[] = [];
    const busyLatencies: number[] = [];
    const roundRatios: number[] = [];
    let pickupFailures = 0;
    let generatorLagMs = 0;
    // Rounds alternate, no reads then reads, so that a stretch of a busy host falls on both sides, not on one.
    for (let round = 0; round < options.rounds; round++) {
      const quiet = await pickups();
      if (round === 0) rssBefore = rssMax = rssMiB(service.pid);
      const sampler = setInterval(() => (rssMax = Math.max(rssMax, rssMiB(service.pid))), 100);
      let reading = true;
      const reader = (async () => {
        while (reading) {
          const answer = await read();
          // Only the answer's tail: parsing 4 MiB here would stall this process's pickup generator and be counted as pickup latency.
          const completeness = answer.status === 200 ? completenessOf(answer.body) : undefined;
          readings.push({
            status: answer.status,
            ms: answer.ms,
            bytes: answer.body.length,
            completeness:
              completeness &&
              // A service from before READS_MAX_SPANS (a --service-root of an older checkout) says no total.
              (completeness.total_spans === undefined
                ? `${completeness.spans} spans`
                : `${completeness.spans} of ${completeness.total_spans}${completeness.truncated === true ? ', truncated' : ''}`),
          });
        }
      })();
      const busy = await pickups();
      reading = false;
      await reader;
      clearInterval(sampler);
      const quietOk = quiet.latenciesMs.subarray(0, quiet.ok);
      const busyOk = busy.latenciesMs.subarray(0, busy.ok);
      quietLatencies.push(...quietOk);
      busyLatencies.push(...busyOk);
      roundRatios.push(percentile(busyOk, 99) / percentile(quietOk, 99));
      pickupFailures += quiet.non2xx + quiet.errors + busy.non2xx + busy.errors;
      generatorLagMs = Math.max(generatorLagMs, quiet.maxSendLagMs, busy.maxSendLagMs);
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const rssAfter = rssMiB(service.pid);
    const statuses = new Map<number, number>();
    for (const reading of readings) statuses.set(reading.status, (statuses.get(reading.status) ?? 0) + 1);
    const answered = readings.filter((reading) => reading.status === 200);
    const quietAll = Float64Array.from(quietLatencies);
    const busyAll = Float64Array.from(busyLatencies);
    return {
      backend,
      quietP50: percentile(quietAll, 50),
      quietP99: percentile(quietAll, 99),
      busyP50: percentile(busyAll, 50),
      busyP99: percentile(busyAll, 99),
      roundRatios,
      pickupFailures,
      generatorLagMs,
      reads: readings.length,
      readStatuses: [...statuses].map(([status, count]) => `${count}×${status}`).join(' '),
      readP50: median(answered.map((reading) => reading.ms)),
      firstReadMs: first.ms,
      answerMiB: answered.length === 0 ? 0 : median(answered.map((reading) => reading.bytes)) / MIB,
      completeness: answered[0]?.completeness ?? `first read ${first.status}`,
      rssBeforeMiB: rssBefore,
      rssMaxMiB: rssMax,
      rssAfterMiB: rssAfter,
    };
  } finally {
    header.stop();
    await readPool.close();
  }
}

/** Both backends, one after the other, the same pipeline, the same load; one table. */
export async function readsAgainstPickups(root: string, options: PickupsOptions): Promise<void> {
  // The pipeline is built anew where it is written and then let go: 100,000 spans held in this process's heap through
  // the measurement made every major GC stall the pickup generator by 30-100 ms, counted as pickup latency.
  const createdAt = Date.now() - 3_600_000;
  const pipeline = () => largePipeline(PROJECT, PIPELINE, options.jobs, options.spansPerJob, createdAt);
  const spans = pipeline().spans().length;
  console.log(
    `reads against pickups: one pipeline of ${options.jobs} jobs × ${options.spansPerJob} spans (${spans} spans), pickups at ${options.rate}/s, ${options.rounds} rounds alternating ${options.seconds} s without reads and ${options.seconds} s with one reader reading its trace back to back`,
  );
  const runs: BackendRun[] = [];
  const logDir = mkdtempSync(join(tmpdir(), 'cjt-reads-bench-'));
  try {
    const dataDir = mkdtempSync(join(tmpdir(), 'cjt-reads-files-'));
    // As the embedded collector writes them: one export request a line.
    mkdirSync(localCollectorDirectory(dataDir), { recursive: true });
    writeFileSync(
      signalFile(localCollectorDirectory(dataDir), 'traces'),
      pipeline()
        .resourceSpans()
        .map((resourceSpans) => `${JSON.stringify({ resourceSpans: [resourceSpans] })}\n`)
        .join(''),
    );
    const files = await startService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' }, { root, logFile: join(logDir, 'files.log') });
    try {
      runs.push(await measure('embedded files', files, options));
    } finally {
      await files.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }

    // In production ClickHouse has its own hosts; here it shares two cores with the service and the load, and its query
    // threads at the default priority would be measured as the service's. At nice 19 it runs on what they leave.
    const clickhouse = await startClickHouse({ http: { password: 'bench' }, niceness: 19 });
    try {
      await clickhouse.query(readFileSync(join(root, 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8'));
      await insertOtelTraces(clickhouse, otelTracesRowsOfResourceSpans(withCriticalPathAttributes(pipeline().resourceSpans())));
      const passwordFile = join(logDir, 'clickhouse-password');
      writeFileSync(passwordFile, clickhouse.password, { mode: 0o600 });
      const dataDir = mkdtempSync(join(tmpdir(), 'cjt-reads-ch-'));
      const service = await startService(
        { DATA_DIR: dataDir, LOG_LEVEL: 'warn', CLICKHOUSE_URL: clickhouse.url, CLICKHOUSE_PASSWORD_FILE: passwordFile, READS_TIMEOUT_MS: '30000' },
        { root, logFile: join(logDir, 'clickhouse.log') },
      );
      try {
        runs.push(await measure('ClickHouse (chdb, nice 19)', service, options));
      } finally {
        await service.stop();
        rmSync(dataDir, { recursive: true, force: true });
      }
    } finally {
      await clickhouse.stop();
    }
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }

  const ms = (value: number) => value.toFixed(1);
  printTable([
    [
      'backend',
      'pickup p50/p99 no reads (ms)',
      'pickup p50/p99 during reads (ms)',
      'p99 ratio (each round)',
      'generator lag (ms)',
      'reads',
      'read p50 (ms)',
      'first read (ms)',
      'answer',
      'RSS before → max → after (MiB)',
    ],
    ...runs.map((run) => [
      run.backend,
      `${ms(run.quietP50)} / ${ms(run.quietP99)}`,
      `${ms(run.busyP50)} / ${ms(run.busyP99)}`,
      `${(run.busyP99 / run.quietP99).toFixed(2)}× (${run.roundRatios.map((ratio) => ratio.toFixed(2)).join(', ')})`,
      ms(run.generatorLagMs),
      `${run.reads} (${run.readStatuses})`,
      ms(run.readP50),
      ms(run.firstReadMs),
      `${run.answerMiB.toFixed(2)} MiB, ${run.completeness}`,
      `${run.rssBeforeMiB.toFixed(0)} → ${run.rssMaxMiB.toFixed(0)} → ${run.rssAfterMiB.toFixed(0)} (+${(run.rssMaxMiB - run.rssBeforeMiB).toFixed(0)} at most)`,
    ]),
  ]);
  for (const run of runs) if (run.pickupFailures > 0) console.log(`${run.backend}: ${run.pickupFailures} pickups failed (non-2xx or errors)`);
  if (runs.some((run) => run.pickupFailures > 0)) process.exitCode = 1;
  console.log('target (issue 56): pickup p99 during reads within 2× of without; the ratio is judged on a quiet machine');
  console.log('generator lag: how far the pickup load fell behind its schedule at worst; tens of ms mean this machine, not the service, was busy');
}
