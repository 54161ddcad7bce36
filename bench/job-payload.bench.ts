/**
 * Job-payload decorator (`POST /internal/ci/telemetry/job_payload`, SPEC §4) against a bare Fastify
 * JSON route served by the same process, with the in-memory grant store and with a real redis-server.
 * An extra baseline, labelled as such and not the target's, answers the payload re-serialized
 * (`echo`): the decorator must send the whole payload back, the bare route does not, so echo/bare
 * shows how much of the gap is the answer alone. A third route, echo plus the decorator's grant write through
 * the service's own store (`echo-store`), shows what the store write costs. The fourth, `floor`, makes every step
 * SPEC §4 and §10 ask of an enabled pickup with the decorator's own calls and nothing else: what the decorator
 * cannot do better than, its bound (bench/job-payload.server.ts).
 *
 * Run (needs redis-server on PATH):
 *
 *   npm run bench -- job-payload [options]
 *
 * Options: --stores memory,redis  --rounds 3  --round-seconds 5  --connections 10  --rate 1000
 *          --latency-seconds 5  --latency-rounds 3  --warmup-seconds 2  --cpu-prof (keeps the server's .cpuprofile)
 *          --routes bare,bare-changes,bare-sampled,echo,echo-store,floor,decorator (load only these: with --cpu-prof, a profile of one route alone)
 *          --answer changes|payload (how the decorator and the floor are asked: the Ruby client's default, the changes
 *          without sending the payload, or the whole payload there and back; `bare-changes` is the bare route sent
 *          the changes request, the stricter baseline for it)
 *          --autocannon-rate (also measures latency with autocannon's overallRate, for comparison)
 *
 * The machine is shared and noisy, so only ratios against the baseline measured in the same run
 * mean anything: throughput rounds alternate bare/decorator (ABBA order, so drift hits both) and the
 * median of each is compared; server CPU per request (from the server's own process.cpuUsage) is the
 * least noisy figure. Every run starts on a quiet server and its CPU counts what it left behind (bench-server.ts,
 * quiet): the routes share one process, and the decorator's spans are delivered after its requests are answered.
 * Exits 1 if any request was not answered 2xx or any decision was not `enabled`; the targets (issue 12:
 * decorator/bare throughput ≥ 0.85 with the in-memory store, ≥ 0.75 with Redis) are reported, never enforced.
 *
 * Production-like: the server is built by createInternalApp as src/main.ts does, LOG_LEVEL info, pino's
 * default destination (stdout, written in 4 KiB batches) with stdout redirected to a file in a temp dir,
 * so every request pays for its real access-log line. Flags come from config/flags.json (100 %
 * rollout, 100 % sampling), so every decorator request takes the full path: JWT check, validation,
 * flag evaluation, HMACs, grant write, decorated answer.
 */
import autocannon from 'autocannon';
import { printTable } from './lib/table';
import { printCpuProfiles } from './lib/cpu-profile-summary';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { RedisServer, startRedis } from '../test/helpers/redis';
import { repoRoot } from '../simulator/repo-root';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import {
  BARE_ROUTE,
  BARE_SAMPLED_ROUTE,
  BenchServer,
  benchServerEnv,
  DECORATOR_ROUTE,
  ECHO_ROUTE,
  ECHO_STORE_ROUTE,
  FLOOR_ROUTE,
  serverScript,
  quiet,
  startBenchServer,
} from './lib/bench-server';
import { BytesSink, startBytesSink } from './lib/child-process';
import { runFixedRate } from './lib/fixed-rate-load';
import { jobPayloadBodies, PIPELINE_SIZES } from './lib/job-payload-body';
import { median, percentile } from './lib/percentiles';

type Route = 'bare' | 'bare-changes' | 'bare-sampled' | 'echo' | 'echo-store' | 'floor' | 'decorator';
type Store = 'memory' | 'redis';
const PATHS: Record<Route, string> = {
  bare: BARE_ROUTE,
  'bare-changes': BARE_ROUTE,
  'bare-sampled': BARE_SAMPLED_ROUTE,
  echo: ECHO_ROUTE,
  'echo-store': ECHO_STORE_ROUTE,
  floor: FLOOR_ROUTE,
  decorator: DECORATOR_ROUTE,
};
const ROUTES: readonly Route[] = ['bare', 'bare-changes', 'bare-sampled', 'echo', 'echo-store', 'floor', 'decorator'];
/** Issue 12's targets: decorator throughput over the bare route's, measured side by side. */
const TARGET_RATIO: Record<Store, number> = { memory: 0.85, redis: 0.75 };
const ROUTE_LABELS: Record<Route, string> = {
  bare: 'bare',
  'bare-changes': 'bare, sent the changes request',
  'bare-sampled': 'bare, successes logged sampled',
  echo: 'echo (extra baseline)',
  'echo-store': 'echo + store write',
  floor: 'floor (bound)',
  decorator: 'decorator',
};

const { values: args } = parseArgs({
  options: {
    stores: { type: 'string', default: 'memory,redis' },
    rounds: { type: 'string', default: '3' },
    'round-seconds': { type: 'string', default: '5' },
    'warmup-seconds': { type: 'string', default: '2' },
    connections: { type: 'string', default: '10' },
    rate: { type: 'string', default: '1000' },
    'latency-seconds': { type: 'string', default: '5' },
    'latency-rounds': { type: 'string', default: '3' },
    'cpu-prof': { type: 'boolean', default: false },
    routes: { type: 'string', default: 'bare,bare-changes,bare-sampled,echo,echo-store,floor,decorator' },
    answer: { type: 'string', default: 'changes' },
    'autocannon-rate': { type: 'boolean', default: false },
    upstream: { type: 'string', default: 'embedded' },
    'node-args': { type: 'string', default: '' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(`npm run bench -- job-payload [options]

  --stores memory,redis      stores to bench, one server each (default memory,redis)
  --routes bare,bare-changes,bare-sampled,echo,echo-store,floor,decorator
                             routes to load (with --cpu-prof, a profile of one route alone)
  --answer changes|payload   how the decorator and the floor are asked (default changes, as the Ruby client asks):
                             runner and job only with Prefer: return=minimal, answered with the changes; or the
                             whole payload sent and answered decorated. bare-changes is the bare route sent the
                             changes request
  --rounds 3                 alternating max-throughput rounds per route (ABBA order)
  --round-seconds 5          length of each round
  --warmup-seconds 2         warm-up per route before the rounds
  --connections 10           keep-alive connections
  --rate 1000                open-loop rate of the latency runs (bare and decorator), req/s
  --latency-seconds 5        length of each latency run (0: none)
  --latency-rounds 3         latency runs per route, alternating bare and decorator (ABBA); their latencies are pooled,
                             so one unlucky window (a collection, a neighbour's burst) does not decide the p99 alone
  --cpu-prof                 keep the server's .cpuprofile and print its busiest functions
  --autocannon-rate          also measure latency with autocannon's overallRate, for comparison
  --node-args="..."          options for the server's node (e.g. --max-semi-space-size=32), space-separated
  --upstream embedded|sink   where the control plane's spans (a queue wait per pickup) go: the embedded collector in
                             the server's process (the default, as the quick start runs), or a separate OTLP sink
                             process, as a deployment with its own Collector does

Job ids are new for every request; pipelines are ${PIPELINE_SIZES.join(', ')} jobs in turn (10 to 40, 25 on average).`);
  process.exit(0);
}
const options = {
  stores: args.stores.split(',').map((store) => store.trim()) as Store[],
  rounds: Number(args.rounds),
  roundSeconds: Number(args['round-seconds']),
  warmupSeconds: Number(args['warmup-seconds']),
  connections: Number(args.connections),
  rate: Number(args.rate),
  latencySeconds: Number(args['latency-seconds']),
  latencyRounds: Math.max(1, Number(args['latency-rounds'])),
  cpuProf: args['cpu-prof'],
  routes: ROUTES.filter((route) => args.routes.split(',').some((name) => name.trim() === route)),
  autocannonRate: args['autocannon-rate'],
  upstream: args.upstream === 'sink' ? ('sink' as const) : ('embedded' as const),
  answer: args.answer === 'payload' ? ('payload' as const) : ('changes' as const),
  nodeArgs: args['node-args'].split(' ').filter((arg) => arg !== ''),
};
if (args.answer !== 'payload' && args.answer !== 'changes') throw new Error(`--answer is changes or payload, not ${args.answer}`);
if (args.upstream !== 'sink' && args.upstream !== 'embedded') throw new Error(`--upstream is embedded or sink, not ${args.upstream}`);

/**
 * Alternating open-loop runs of one route as one: their latencies pooled (p50, p99 of every request), the loop's and
 * the collector's worst of any run, their p99 and total the median and mean of the runs'.
 */
function pooled(runs: readonly RunStats[]): RunStats {
  const all = Float64Array.from(runs.flatMap((run) => [...(run.latenciesMs ?? [])]));
  const sum = (stat: (run: RunStats) => number) => runs.reduce((total, run) => total + stat(run), 0);
  return {
    ok: sum((run) => run.ok),
    non2xx: sum((run) => run.non2xx),
    errors: sum((run) => run.errors),
    reqPerSec: Math.min(...runs.map((run) => run.reqPerSec)),
    serverCpuMicrosPerRequest: median(runs.map((run) => run.serverCpuMicrosPerRequest)),
    generatorCpuShare: median(runs.map((run) => run.generatorCpuShare)),
    p50Ms: percentile(all, 50),
    p99Ms: percentile(all, 99),
    loopP99Ms: median(runs.map((run) => run.loopP99Ms)),
    loopMaxMs: Math.max(...runs.map((run) => run.loopMaxMs)),
    gcMaxMs: Math.max(...runs.map((run) => run.gcMaxMs)),
    gcTotalMs: sum((run) => run.gcTotalMs) / runs.length,
  };
}

/** One load run against one route. */
interface RunStats {
  readonly ok: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly reqPerSec: number;
  readonly serverCpuMicrosPerRequest: number;
  /** Share of one core the load generator (this process) used: near 100 % means it, not the server, was the limit. */
  readonly generatorCpuShare: number;
  readonly p50Ms?: number;
  readonly p99Ms?: number;
  /** Each answered request's latency (open-loop runs only), so alternating runs can be pooled. */
  readonly latenciesMs?: Float64Array;
  /** How late the server's event loop ran during the run: its p99 and worst (ms). */
  readonly loopP99Ms: number;
  readonly loopMaxMs: number;
  /** Garbage collection's longest and total pause during the run (ms). */
  readonly gcMaxMs: number;
  readonly gcTotalMs: number;
}

interface RouteReport {
  readonly rounds: RunStats[];
  latency?: RunStats;
  /** The alternating open-loop runs `latency` pools. */
  latencyRounds: RunStats[];
  autocannonLatency?: RunStats;
}

interface StoreReport {
  readonly store: Store;
  readonly routes: Record<Route, RouteReport>;
  readonly decisions: Record<string, number>;
  readonly decoratorOk: number;
  readonly logBytes: number;
}

const failures: string[] = [];

async function decisionCounts(origin: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const match of text.matchAll(/^ci_job_telemetry_decisions_total\{reason="(\w+)"\} (\d+)$/gm)) counts[match[1]] = Number(match[2]);
  return counts;
}

const diff = (after: Record<string, number>, before: Record<string, number>) =>
  Object.fromEntries(Object.entries(after).map(([reason, count]) => [reason, count - (before[reason] ?? 0)]));

async function main(): Promise<void> {
  const root = repoRoot();
  const work = mkdtempSync(join(tmpdir(), 'cjt-job-payload-bench-'));
  const secrets = makeSecretFiles();
  const bodies = jobPayloadBodies();
  const auth = await rollingAuthHeader(secrets.internalApiSecret);
  let nextJobId = 1_000_000;
  const nextBody = () => bodies.bodyFor(nextJobId++);
  const jsonHeaders = (): Record<string, string> => ({ 'content-type': 'application/json', ...auth.current() });
  // The decorator and the floor asked as --answer says; bare-changes is the bare route sent the changes request.
  const asksChanges = (route: Route) => route === 'bare-changes' || (options.answer === 'changes' && (route === 'decorator' || route === 'floor'));
  const headersFor = (route: Route) => (asksChanges(route) ? { ...jsonHeaders(), prefer: 'return=minimal' } : jsonHeaders());
  const bodyFor = (route: Route) => (asksChanges(route) ? bodies.changesBodyFor(nextJobId++) : nextBody());
  const started = performance.now();

  console.log('job-payload decorator vs bare Fastify route, same server process (ratios are the result; absolute numbers are noise)');
  console.log(
    `load average ${loadavg()
      .map((load) => load.toFixed(1))
      .join(
        ' ',
      )} at start · body ${(bodies.bytes / 1024).toFixed(1)} KiB · ${options.connections} connections · ${options.rounds}×${options.roundSeconds} s alternating rounds · ` +
      `decorator asked for ${options.answer === 'changes' ? `the changes (request ${(bodies.changesBytes / 1024).toFixed(1)} KiB, no payload)` : 'the payload'} · ` +
      `${options.rate} req/s × ${options.latencySeconds} s open-loop, ${options.latencyRounds} alternating runs pooled (latency from when each request was due) · a new job id per request, ` +
      `10 to 40 jobs per pipeline (25 on average) · ${cpus().length} CPUs · logs: pino batched → file · control-plane spans to ${options.upstream === 'sink' ? 'a separate OTLP sink' : 'the embedded collector'}` +
      (options.nodeArgs.length === 0 ? '' : ` · server node ${options.nodeArgs.join(' ')}`),
  );

  const load = async (
    server: BenchServer,
    label: string,
    run: () => Promise<Omit<RunStats, 'serverCpuMicrosPerRequest' | 'generatorCpuShare' | 'loopP99Ms' | 'loopMaxMs' | 'gcMaxMs' | 'gcTotalMs'>>,
  ) => {
    // Each run starts on a quiet server, and the work it leaves behind (its spans' delivery, its garbage) is counted
    // in its own CPU, not in the next run's, which is often another route's.
    if ((await quiet(server)) === undefined) console.log(`  note: the server was still busy 20 s after the run before ${label}`);
    await server.loopDelay();
    const serverCpuBefore = await server.cpuMicros();
    const generatorBefore = process.cpuUsage();
    const wallBefore = performance.now();
    const stats = await run();
    const generator = process.cpuUsage(generatorBefore);
    const wallMicros = (performance.now() - wallBefore) * 1000;
    const loop = await server.loopDelay();
    const after = await quiet(server);
    if (after === undefined) console.log(`  note: the server was still busy 20 s after ${label}`);
    const serverCpu = (await server.cpuMicros()) - serverCpuBefore;
    const answered = stats.ok + stats.non2xx;
    if (stats.non2xx > 0 || stats.errors > 0) failures.push(`${label}: ${stats.non2xx} non-2xx answers, ${stats.errors} errors/timeouts`);
    return {
      ...stats,
      serverCpuMicrosPerRequest: answered === 0 ? Number.NaN : serverCpu / answered,
      generatorCpuShare: (generator.user + generator.system) / wallMicros,
      loopP99Ms: loop.p99Ms,
      loopMaxMs: loop.maxMs,
      gcMaxMs: loop.gcMaxMs,
      gcTotalMs: loop.gcTotalMs,
    };
  };

  const maxThroughput = (server: BenchServer, store: Store, route: Route, seconds: number) =>
    load(server, `${store} ${route} max-throughput`, async () => {
      const result = await autocannon({
        url: server.origin,
        connections: options.connections,
        pipelining: 1,
        duration: seconds,
        timeout: 10,
        requests: [{ method: 'POST', path: PATHS[route], setupRequest: (request) => ({ ...request, headers: headersFor(route), body: bodyFor(route) }) }],
      });
      return {
        ok: result['2xx'],
        non2xx: result.non2xx,
        errors: result.errors + result.mismatches, // autocannon counts timeouts in errors too
        reqPerSec: result['2xx'] / result.duration,
      };
    });

  const fixedRate = (server: BenchServer, store: Store, route: Route) =>
    load(server, `${store} ${route} fixed-rate`, async () => {
      const result = await runFixedRate({
        origin: server.origin,
        path: PATHS[route],
        ratePerSecond: options.rate,
        durationSeconds: options.latencySeconds,
        connections: options.connections,
        headers: () => headersFor(route),
        bodyFor: () => bodyFor(route),
      });
      if (result.maxSendLagMs > 20) console.log(`  note: ${route} fixed-rate sender fell ${result.maxSendLagMs.toFixed(1)} ms behind schedule once`);
      return {
        ok: result.ok,
        non2xx: result.non2xx,
        errors: result.errors,
        reqPerSec: result.achievedRate,
        p50Ms: percentile(result.latenciesMs, 50),
        p99Ms: percentile(result.latenciesMs, 99),
        latenciesMs: result.latenciesMs,
      };
    });

  /** autocannon's own rate limiter, latencies taken unrounded from its 'response' events. */
  const autocannonRate = (server: BenchServer, store: Store, route: Route) =>
    load(server, `${store} ${route} autocannon-rate`, async () => {
      const latencies: number[] = [];
      const result = await new Promise<autocannon.Result>((resolve, reject) => {
        const instance = autocannon(
          {
            url: server.origin,
            connections: options.connections,
            overallRate: options.rate,
            duration: options.latencySeconds,
            timeout: 10,
            requests: [{ method: 'POST', path: PATHS[route], setupRequest: (request) => ({ ...request, headers: headersFor(route), body: bodyFor(route) }) }],
          },
          (error, finished) => (error ? reject(error) : resolve(finished)),
        );
        instance.on('response', (_client, statusCode, _bytes, responseTime) => {
          if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime);
        });
      });
      return {
        ok: result['2xx'],
        non2xx: result.non2xx,
        errors: result.errors,
        reqPerSec: result['2xx'] / result.duration,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
      };
    });

  const benchStore = async (store: Store): Promise<Omit<StoreReport, 'logBytes'>> => {
    let redis: RedisServer | undefined;
    let server: BenchServer | undefined;
    let sink: BytesSink | undefined;
    const logFile = join(work, `service-${store}.log`);
    try {
      if (store === 'redis') redis = await startRedis();
      if (options.upstream === 'sink') sink = await startBytesSink(join(__dirname, 'otlp-gateway.sink.js'));
      server = await startBenchServer({
        script: serverScript(__dirname),
        cwd: root,
        logFile,
        nodeArgs: [
          ...options.nodeArgs,
          ...(options.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${join(work, 'profiles')}`, `--cpu-prof-name=server-${store}.cpuprofile`] : []),
        ],
        env: benchServerEnv(root, secrets, {
          ...(redis === undefined ? {} : { REDIS_URL: redis.url }),
          ...(sink === undefined ? {} : { OTLP_UPSTREAM_URL: sink.origin }),
        }),
      });

      // One request each, answer checked: a decorator (or floor) that answers 200 without decorating would be a cheap lie.
      for (const route of ['decorator', 'floor'] as const) {
        const decorating = PATHS[route];
        const smoke = await fetch(server.origin + decorating, { method: 'POST', headers: headersFor(route), body: bodyFor(route) });
        const answer = (await smoke.json()) as {
          telemetry?: { reason?: string };
          payload?: { variables?: Array<{ key: string }> };
          changes?: { variables?: { append?: Array<{ key: string }> } };
        };
        const variables = asksChanges(route) ? answer.changes?.variables?.append : answer.payload?.variables;
        const traceparents = variables?.filter((variable) => variable.key === 'TRACEPARENT').length;
        if (smoke.status !== 200 || answer.telemetry?.reason !== 'enabled' || traceparents !== 1) {
          throw new Error(`${store}: ${decorating} answered ${smoke.status} ${JSON.stringify(answer.telemetry)} (TRACEPARENT ×${traceparents})`);
        }
      }
      for (const baseline of [BARE_ROUTE, BARE_SAMPLED_ROUTE, ECHO_ROUTE, ECHO_STORE_ROUTE]) {
        const answered = await fetch(server.origin + baseline, { method: 'POST', headers: jsonHeaders(), body: nextBody() });
        if (answered.status !== 200) throw new Error(`${store}: ${baseline} answered ${answered.status}: ${await answered.text()}`);
      }
      const decisionsBefore = await decisionCounts(server.origin);
      let decoratorOk = 0;

      for (const route of options.routes) {
        const warmup = await maxThroughput(server, store, route, options.warmupSeconds);
        if (route === 'decorator') decoratorOk += warmup.ok;
      }
      const routes: Record<Route, RouteReport> = {
        bare: { rounds: [], latencyRounds: [] },
        'bare-changes': { rounds: [], latencyRounds: [] },
        'bare-sampled': { rounds: [], latencyRounds: [] },
        echo: { rounds: [], latencyRounds: [] },
        'echo-store': { rounds: [], latencyRounds: [] },
        floor: { rounds: [], latencyRounds: [] },
        decorator: { rounds: [], latencyRounds: [] },
      };
      for (let round = 0; round < options.rounds; round++) {
        const order: Route[] = round % 2 === 0 ? [...options.routes] : [...options.routes].reverse();
        for (const route of order) routes[route].rounds.push(await maxThroughput(server, store, route, options.roundSeconds));
      }
      // --latency-seconds 0: throughput only, no open-loop run.
      const timed = (['bare', 'decorator'] as const).filter((route) => options.routes.includes(route) && options.latencySeconds > 0);
      for (let round = 0; round < options.latencyRounds; round++) {
        const order = round % 2 === 0 ? timed : [...timed].reverse();
        for (const route of order) routes[route].latencyRounds.push(await fixedRate(server, store, route));
      }
      for (const route of timed) routes[route].latency = pooled(routes[route].latencyRounds);
      if (options.autocannonRate) {
        for (const route of timed) routes[route].autocannonLatency = await autocannonRate(server, store, route);
      }
      const decoratorRuns = [...routes.decorator.rounds, routes.decorator.latency, routes.decorator.autocannonLatency];
      decoratorOk += decoratorRuns.reduce((sum, run) => sum + (run?.ok ?? 0), 0);

      const decisions = diff(await decisionCounts(server.origin), decisionsBefore);
      const notEnabled = Object.entries(decisions).filter(([reason, count]) => reason !== 'enabled' && count > 0);
      // `enabled` may exceed the answers counted: requests in flight when autocannon stops are served but not counted.
      if (notEnabled.length > 0 || (decisions.enabled ?? 0) < decoratorOk) {
        failures.push(`${store}: ${decoratorOk} decorator answers but decisions ${JSON.stringify(decisions)} (all must be enabled)`);
      }
      return { store, routes, decisions, decoratorOk };
    } finally {
      await server?.stop();
      await sink?.stop();
      await redis?.stop();
    }
  };

  const reports: StoreReport[] = [];
  try {
    for (const store of options.stores) {
      const report = await benchStore(store);
      const logFile = join(work, `service-${store}.log`);
      reports.push({ ...report, logBytes: existsSync(logFile) ? statSync(logFile).size : 0 });
    }
  } catch (error) {
    failures.push(String((error as Error).stack ?? error));
  } finally {
    auth.stop();
  }

  printReport(reports);
  console.log(
    `total ${((performance.now() - started) / 1000).toFixed(0)} s · load average at end ${loadavg()
      .map((load) => load.toFixed(1))
      .join(' ')}`,
  );
  if (options.cpuProf) {
    printCpuProfiles(join(work, 'profiles'), root);
    console.log(`server CPU profiles kept in ${join(work, 'profiles')}`);
  } else rmSync(work, { recursive: true, force: true });
  rmSync(secrets.dir, { recursive: true, force: true });

  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

const verdict = (value: number, met: (value: number) => boolean) => (Number.isNaN(value) ? 'not measured' : met(value) ? 'met' : 'MISSED');
const fixed = (value: number | undefined, digits: number) => (value === undefined || Number.isNaN(value) ? '-' : value.toFixed(digits));
const ratio = (a: number, b: number) => (b === 0 ? Number.NaN : a / b);

function printReport(reports: StoreReport[]): void {
  const header = [
    'store',
    'route',
    'req/s by round',
    'median',
    'srv µs/req',
    'gen CPU',
    'p50 ms',
    'p99 ms',
    'at req/s',
    'loop p99/max ms',
    'gc max/total ms a run',
  ];
  const rows: string[][] = [header];
  const verdicts: string[] = [];
  for (const { store, routes, decisions, decoratorOk, logBytes } of reports) {
    for (const route of options.routes) {
      const { rounds, latency, autocannonLatency } = routes[route];
      rows.push([
        store,
        ROUTE_LABELS[route],
        rounds.map((run) => fixed(run.reqPerSec, 0)).join(' '),
        fixed(median(rounds.map((run) => run.reqPerSec)), 0),
        fixed(median(rounds.map((run) => run.serverCpuMicrosPerRequest)), 0),
        `${fixed(median(rounds.map((run) => run.generatorCpuShare * 100)), 0)}%`,
        fixed(latency?.p50Ms, 2),
        fixed(latency?.p99Ms, 2),
        fixed(latency?.reqPerSec, 0),
        latency === undefined ? '-' : `${fixed(latency.loopP99Ms, 1)}/${fixed(latency.loopMaxMs, 1)}`,
        latency === undefined ? '-' : `${fixed(latency.gcMaxMs, 1)}/${fixed(latency.gcTotalMs, 0)}`,
      ]);
      if (autocannonLatency !== undefined) {
        rows.push([
          '',
          `  (autocannon overallRate)`,
          '',
          '',
          '',
          '',
          fixed(autocannonLatency.p50Ms, 2),
          fixed(autocannonLatency.p99Ms, 2),
          fixed(autocannonLatency.reqPerSec, 0),
          `${fixed(autocannonLatency.loopP99Ms, 1)}/${fixed(autocannonLatency.loopMaxMs, 1)}`,
          `${fixed(autocannonLatency.gcMaxMs, 1)}/${fixed(autocannonLatency.gcTotalMs, 0)}`,
        ]);
      }
    }
    const medianOf = (route: Route, stat: (run: RunStats) => number) => median(routes[route].rounds.map(stat));
    const throughput = (run: RunStats) => run.reqPerSec;
    const cpu = (run: RunStats) => run.serverCpuMicrosPerRequest;
    const throughputRatio = ratio(medianOf('decorator', throughput), medianOf('bare', throughput));
    // Per-round ratios (each pair ran back to back) show how much of the median ratio is noise.
    const perRound = routes.decorator.rounds.map((run, i) => fixed(ratio(run.reqPerSec, routes.bare.rounds[i]?.reqPerSec ?? Number.NaN), 2)).join(' ');
    const cpuRatio = ratio(medianOf('decorator', cpu), medianOf('bare', cpu));
    const decoratorP99 = routes.decorator.latency?.p99Ms ?? Number.NaN;
    const p99Ratio = ratio(decoratorP99, routes.bare.latency?.p99Ms ?? Number.NaN);
    const p99PerRound = routes.decorator.latencyRounds
      .map((run, i) => fixed(ratio(run.p99Ms ?? Number.NaN, routes.bare.latencyRounds[i]?.p99Ms ?? Number.NaN), 2))
      .join(' ');
    // Past its capacity an open-loop run measures a growing queue, not the service's latency.
    const overloaded = (['bare', 'decorator'] as const)
      .filter((route) => options.routes.includes(route))
      .filter((route) => (routes[route].latency?.reqPerSec ?? 0) < 0.95 * options.rate || medianOf(route, throughput) < options.rate);
    const target = TARGET_RATIO[store];
    verdicts.push(
      `${store}: throughput decorator/bare ${fixed(throughputRatio, 2)} (per round ${perRound}; target ≥ ${target}: ` +
        `${Number.isNaN(throughputRatio) ? 'not measured' : throughputRatio >= target ? 'met' : 'MISSED'})` +
        ` · server CPU/request ×${fixed(cpuRatio, 2)}` +
        ` · p99 decorator/bare ×${fixed(p99Ratio, 2)} (per round ${p99PerRound}), decorator p99 ${fixed(decoratorP99, 2)} ms` +
        (overloaded.length === 0 || options.latencySeconds === 0
          ? ''
          : ` · OVERLOADED at ${options.rate} req/s: ${overloaded.join(', ')} (max throughput below the rate: latency is queueing)`),
      `${' '.repeat(store.length)}  extra baseline, not the target: echo/bare ${fixed(ratio(medianOf('echo', throughput), medianOf('bare', throughput)), 2)}` +
        ` (CPU ×${fixed(ratio(medianOf('echo', cpu), medianOf('bare', cpu)), 2)}), decorator/echo ${fixed(ratio(medianOf('decorator', throughput), medianOf('echo', throughput)), 2)}` +
        ` (CPU ×${fixed(ratio(medianOf('decorator', cpu), medianOf('echo', cpu)), 2)}): echo answers the payload re-serialized, as the decorator must`,
      `${' '.repeat(store.length)}  echo plus the decorator's store write ${fixed(ratio(medianOf('echo-store', throughput), medianOf('echo', throughput)), 2)}× echo` +
        ` (CPU ×${fixed(ratio(medianOf('echo-store', cpu), medianOf('echo', cpu)), 2)}); bound: the floor (every step SPEC §4 and §10 ask of a pickup)` +
        ` ${fixed(ratio(medianOf('floor', throughput), medianOf('echo', throughput)), 2)}× echo (CPU ×${fixed(ratio(medianOf('floor', cpu), medianOf('echo', cpu)), 2)});` +
        ` the decorator reaches ${fixed(ratio(medianOf('decorator', throughput), medianOf('floor', throughput)), 2)}× the floor` +
        ` (CPU ×${fixed(ratio(medianOf('decorator', cpu), medianOf('floor', cpu)), 2)})`,
      `${' '.repeat(store.length)}  issue 37: server CPU decorator/bare ×${fixed(cpuRatio, 2)} (target ≤ 2: ${verdict(cpuRatio, (r) => r <= 2)})` +
        ` · throughput decorator/echo ${fixed(ratio(medianOf('decorator', throughput), medianOf('echo', throughput)), 2)}` +
        ` (target ≥ 0.6: ${verdict(ratio(medianOf('decorator', throughput), medianOf('echo', throughput)), (r) => r >= 0.6)})` +
        ` · p99 at ${options.rate} req/s decorator/bare ×${fixed(p99Ratio, 2)} (target ≤ 2: ${verdict(p99Ratio, (r) => r <= 2)})` +
        ` · against a bare route logged as the decorator is (sampled): CPU ×${fixed(ratio(medianOf('decorator', cpu), medianOf('bare-sampled', cpu)), 2)}` +
        ` · against the bare route sent the changes request: CPU ×${fixed(ratio(medianOf('decorator', cpu), medianOf('bare-changes', cpu)), 2)}`,
      `${' '.repeat(store.length)}  checked: ${decoratorOk} decorator answers, decisions ${JSON.stringify(decisions)}; ` +
        `log ${(logBytes / 1024 / 1024).toFixed(1)} MiB`,
    );
  }
  console.log('');
  printTable(rows);
  console.log('');
  for (const verdict of verdicts) console.log(verdict);
}

runBench(main);
