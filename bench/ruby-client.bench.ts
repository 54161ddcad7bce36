/**
 * GitLab's view of the decorator: the Ruby client's `decorate` (clients/ruby, issue 30) against a bare Ruby call to
 * the service's bare route, at load (issue 37): 16 Ruby threads paced together at 500 calls a second, a new job per
 * call, in the same run, p50 and p99 of each call's time and their ratios (target: decorate's p99 ≤ 1.5× the bare
 * call's). An extra baseline, labelled as such, is the same bare Ruby call to the decorator route (the service's
 * whole work, none of the client's): client / bare-decorator is what the client itself adds (its deadline, pool,
 * breaker and answer checks). Two bounds, bare Ruby calls sending what `decorate` sends (the runner and the job,
 * asking for the changes): one grant write (a route that makes the decorator's one store call, its grant with the
 * traced job, and nothing else), which every enabled pickup must wait for (SPEC §4: the grant is durable before the
 * answer says enabled); and the decorator's floor (every step SPEC §4 and §10 ask of a pickup, made by the decorator's
 * own calls, bench/job-payload.server.ts). Against the bare call they say how much of the target a pickup's own
 * steps already take on this machine; decorate against the floor is what the service and the client add above them.
 * Last, the time a call takes while the breaker is open (no call is made).
 *
 * Run (needs ruby on PATH, which `npm test` installs, and redis-server for the default store):
 *
 *   npm run bench -- ruby-client
 *   npm run bench -- ruby-client --rounds 1 --seconds 1 --warmup-seconds 0.5   (a quick check that it still runs)
 *
 * Options: --threads 16  --rate 500 (calls a second, all threads together)  --rounds 3  --seconds 10 (per way and
 *          round)  --warmup-seconds 2  --deadline 0.05 (the client's, seconds)  --store redis|memory
 *          --server-dir <dir> (serve another revision: a checkout whose bench was built into <dir>/out, as
 *          the job-payload-revisions bench builds one; the Ruby side and the load stay this checkout's)
 *          --upstream embedded|sink (where the control plane's spans go: the embedded collector in the server's process,
 *          as the quick start runs, or a separate OTLP sink process, as a deployment with its own Collector has)
 *
 * The server is bench/job-payload.server.ts (the internal API built as src/main.ts builds it, with the bare
 * route beside it), with a real redis-server by default, LOG_LEVEL info with stdout to a file, flags from
 * config/flags.json (every job enabled). A call's time runs from when its thread starts it to its answer; how far
 * behind its due time Ruby started it is shown too (16 threads share one interpreter lock). The machine is shared
 * and noisy: only the ratios, measured side by side, mean anything; rounds alternate the order of the ways. Exits 1
 * when a call was not answered 200 or a decorate call was not decorated for any reason but its deadline (calls
 * past the deadline are counted and shown: on a loaded machine they are the client doing its job). With Redis, last,
 * the commands that held Redis for 200 µs or more (its slow log): a pickup arriving then waits behind them.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { freePort } from '../test/helpers/ports';
import { RedisServer, startRedis } from '../test/helpers/redis';
import { repoRoot } from '../simulator/repo-root';
import { runBench } from './lib/bench-env';
import {
  BARE_ROUTE,
  BenchServer,
  benchServerEnv,
  ECHO_STORE_ROUTE,
  FLOOR_ROUTE,
  QUIET_CPU_SHARE,
  QUIET_MAX_MS,
  serverScript,
  startBenchServer,
} from './lib/bench-server';
import { BytesSink, startBytesSink } from './lib/child-process';
import { jobPayloadBodies, PIPELINE_SIZES } from './lib/job-payload-body';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';
import { watchRedisHolds } from './lib/redis-holds';

type Way = 'bare' | 'bare-decorator' | 'grant-write' | 'floor' | 'client' | 'breaker-open';
const WAYS: readonly Way[] = ['bare', 'bare-decorator', 'grant-write', 'floor', 'client'];
/** A Redis command this long or longer is reported as holding Redis up (its slow log's threshold). */
const HOLD_US = 200;
const LABELS: Record<Way, string> = {
  bare: 'bare Ruby call, bare route (baseline)',
  'bare-decorator': 'bare Ruby call, decorator (extra baseline)',
  'grant-write': 'bare Ruby call, one grant write (bound)',
  floor: 'bare Ruby call, decorator floor (bound)',
  client: 'client.decorate',
  'breaker-open': 'client.decorate, breaker open',
};
/** Request shapes the calls start from; Ruby gives each call a job id never decorated before. */
const TEMPLATES = 25;

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '10' },
    'warmup-seconds': { type: 'string', default: '2' },
    threads: { type: 'string', default: '16' },
    rate: { type: 'string', default: '500' },
    deadline: { type: 'string', default: '0.05' },
    store: { type: 'string', default: 'redis' },
    'server-dir': { type: 'string' },
    upstream: { type: 'string', default: 'embedded' },
  },
});
if (args.upstream !== 'embedded' && args.upstream !== 'sink') throw new Error(`--upstream is embedded or sink, not ${args.upstream}`);

type RubyLine =
  { way: Way; round: number; samples_ms: number[]; late_ms: number[]; skipped?: number; cpu_us_per_call?: number } | { outcomes: Record<string, number> };

function runRuby(root: string, env: Record<string, string>): Promise<RubyLine[]> {
  return new Promise((resolve, reject) => {
    execFile(
      'ruby',
      ['-I', join(root, 'clients', 'ruby', 'lib'), join(root, 'bench', 'ruby-client.bench.rb')],
      { cwd: root, env: { PATH: process.env.PATH, LANG: 'C.UTF-8', ...env }, maxBuffer: 256 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error !== null) reject(new Error(`ruby-client.bench.rb failed: ${error.message}\n${stderr}`));
        else
          resolve(
            stdout
              .trim()
              .split('\n')
              .map((line) => JSON.parse(line) as RubyLine),
          );
      },
    );
  });
}

const ms = (value: number) => (value < 1 ? `${(value * 1000).toFixed(0)} µs` : `${value.toFixed(2)} ms`);

async function main(): Promise<void> {
  const root = repoRoot();
  const work = mkdtempSync(join(tmpdir(), 'cjt-ruby-client-bench-'));
  const secrets = makeSecretFiles();
  const bodies = jobPayloadBodies();
  const bodiesFile = join(work, 'requests.json');
  writeFileSync(bodiesFile, `[${Array.from({ length: TEMPLATES }, (_, i) => bodies.bodyFor(2_000_000 + i)).join(',')}]`);
  let server: BenchServer | undefined;
  let redis: RedisServer | undefined;
  let sink: BytesSink | undefined;
  try {
    if (args.store === 'redis') redis = await startRedis();
    else if (args.store !== 'memory') throw new Error(`--store must be redis or memory, not ${args.store}`);
    if (args.upstream === 'sink') sink = await startBytesSink(join(__dirname, 'otlp-gateway.sink.js'));
    server = await startBenchServer({
      script: args['server-dir'] === undefined ? serverScript(__dirname) : join(args['server-dir'], 'out', 'bench', 'job-payload.server.js'),
      cwd: args['server-dir'] ?? root,
      logFile: join(work, 'service.log'),
      env: benchServerEnv(root, secrets, {
        ...(redis === undefined ? {} : { REDIS_URL: redis.url }),
        ...(sink === undefined ? {} : { OTLP_UPSTREAM_URL: sink.origin }),
      }),
    });
    console.log('Ruby client decorate vs a bare Ruby call, same Ruby process, same server (ratios are the result; absolute numbers are noise)');
    console.log(
      `${cpus().length} CPUs, load ${loadavg()
        .map((load) => load.toFixed(2))
        .join(' ')}; ${args.threads} Ruby threads at ${args.rate} calls/s together, ${args.rounds} rounds × ${args.seconds} s per way; ` +
        `a new job per call, ${PIPELINE_SIZES.length} pipeline sizes from 10 to 40 jobs; request ${bodies.bytes} bytes; ${args.store} store; client deadline ${args.deadline} s; ` +
        `control-plane spans to ${sink === undefined ? 'the embedded collector' : 'a separate OTLP sink'}`,
    );
    const holds = redis === undefined ? undefined : await watchRedisHolds(redis.url, HOLD_US);
    const lines = await runRuby(root, {
      BENCH_ORIGIN: server.origin,
      // The Ruby side waits for a quiet server before each way by the job-payload bench's rule (bench-server.ts, quiet).
      BENCH_SERVER_PID: String(server.pid),
      BENCH_QUIET_CPU_SHARE: String(QUIET_CPU_SHARE),
      BENCH_QUIET_MAX_SECONDS: String(QUIET_MAX_MS / 1000),
      BENCH_BARE_PATH: BARE_ROUTE,
      BENCH_GRANT_WRITE_PATH: ECHO_STORE_ROUTE,
      BENCH_FLOOR_PATH: FLOOR_ROUTE,
      BENCH_DOWN_URL: `http://127.0.0.1:${await freePort()}`,
      BENCH_SECRET_FILE: secrets.internalApiSecretFile,
      BENCH_BODIES_FILE: bodiesFile,
      BENCH_PIPELINE_SIZES: PIPELINE_SIZES.join(','),
      BENCH_ROUNDS: args.rounds,
      BENCH_SECONDS: args.seconds,
      BENCH_WARMUP_SECONDS: args['warmup-seconds'],
      BENCH_THREADS: args.threads,
      BENCH_RATE: args.rate,
      BENCH_DEADLINE: args.deadline,
      BENCH_BREAKER_CALLS: String(Math.round(Number(args.seconds) * Number(args.rate))),
    });

    // Per way: the median over rounds of each round's p50 and p99.
    const rounds = new Map<Way, { p50: number[]; p99: number[]; late99: number[]; cpu: number[]; skipped: number }>();
    let outcomes: Record<string, number> = {};
    for (const line of lines) {
      if ('outcomes' in line) {
        outcomes = line.outcomes;
        continue;
      }
      const figures = rounds.get(line.way) ?? { p50: [], p99: [], late99: [], cpu: [], skipped: 0 };
      figures.skipped += line.skipped ?? 0;
      if (line.cpu_us_per_call !== undefined) figures.cpu.push(line.cpu_us_per_call);
      figures.p50.push(percentile(line.samples_ms, 50));
      figures.p99.push(percentile(line.samples_ms, 99));
      if (line.late_ms.length > 0) figures.late99.push(percentile(line.late_ms, 99));
      rounds.set(line.way, figures);
    }
    const p = (way: Way, which: 'p50' | 'p99' | 'late99' | 'cpu') => median(rounds.get(way)![which]);
    const rows = [
      ['way', 'p50', 'p99', 'p99 started late', 'Ruby CPU/call', 'p50 / bare', 'p99 / bare', 'p99 / floor', 'p50 / bare-decorator', 'p99 / bare-decorator'],
    ];
    for (const way of [...WAYS, 'breaker-open' as const]) {
      rows.push([
        LABELS[way],
        ms(p(way, 'p50')),
        ms(p(way, 'p99')),
        way === 'breaker-open' ? '-' : ms(p(way, 'late99')),
        way === 'breaker-open' ? '-' : `${p(way, 'cpu').toFixed(0)} µs`,
        (p(way, 'p50') / p('bare', 'p50')).toFixed(2),
        (p(way, 'p99') / p('bare', 'p99')).toFixed(2),
        (p(way, 'p99') / p('floor', 'p99')).toFixed(2),
        (p(way, 'p50') / p('bare-decorator', 'p50')).toFixed(3),
        (p(way, 'p99') / p('bare-decorator', 'p99')).toFixed(3),
      ]);
    }
    printTable(rows);
    /** A way's p99 against the bare call's: pooled as the table shows it, and round by round. */
    const againstBare = (way: Way) => (p(way, 'p99') / p('bare', 'p99')).toFixed(2);
    const perRound = (way: Way) =>
      rounds
        .get(way)!
        .p99.map((p99, i) => (p99 / rounds.get('bare')!.p99[i]).toFixed(2))
        .join(' ');
    const p99Ratio = p('client', 'p99') / p('bare', 'p99');
    console.log(
      `\ntarget (issue 37): p99 of decorate ≤ 1.5× the bare Ruby call's at ${args.rate} calls/s from ${args.threads} threads: ` +
        `${p99Ratio.toFixed(2)}× (${p99Ratio <= 1.5 ? 'met' : 'MISSED'}); per round ${perRound('client')}`,
    );
    console.log(
      `bounds in the same run, p99 against the bare Ruby call's: one grant write ${againstBare('grant-write')}× (per round ${perRound('grant-write')}), ` +
        `the decorator's floor ${againstBare('floor')}× (per round ${perRound('floor')}); ` +
        `decorate against its floor ${(p('client', 'p99') / p('floor', 'p99')).toFixed(2)}×`,
    );
    const skipped = rounds.get('client')!.skipped;
    if (skipped > 0) console.log(`${skipped} decorate calls found the breaker open (calls past the deadline opened it): left out of the percentiles`);
    console.log(`client outcomes: ${JSON.stringify(outcomes)}`);
    if (holds !== undefined) {
      const held = await holds.summary();
      console.log(`Redis held by one command for ${HOLD_US} µs or more, over the whole run (warm-ups and every way): ${held.length === 0 ? 'never' : ''}`);
      for (const line of held.slice(0, 6)) console.log(`  ${line}`);
    }
    const notDecorated = Object.entries(outcomes).filter(([outcome]) => outcome !== 'decorated' && outcome !== 'timeout');
    if (notDecorated.length > 0) {
      console.error(`client calls not decorated: ${JSON.stringify(Object.fromEntries(notDecorated))}`);
      process.exitCode = 1;
    }
  } finally {
    await server?.stop();
    await sink?.stop();
    await redis?.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

runBench(main);
