/**
 * Node.js runtimes side by side (issue 57: move off Node 20 only to an LTS on which the service costs no more): the
 * same built service run by each of two or more node binaries at once, each measured on
 *   export   a 100-span × 10-attribute protobuf trace export to its gateway, header credentials (a JWT job token and
 *            the runner token of a job granted by a pickup on that service),
 *   nginx    the same export through nginx with deploy/nginx/ci-job-telemetry-auth.conf in front of that service
 *            (auth_request to its auth endpoint with a caller key on every export): the gateway's rival, on each runtime,
 *   pickup   POST /internal/ci/telemetry/job_payload, a new job in every request (the internal-API JWT header),
 *   auth     POST /internal/ci/telemetry/auth with that granted job's tokens and the caller key, as nginx asks it.
 * One redis-server is every service's store and one bytes sink (otlp-gateway.sink.ts) their collector; each runtime
 * has its own service and its own nginx. The world is otlp-gateway.bench.ts's (lib/gateway-world.ts): dist/main.js,
 * ROLE=all, LOG_LEVEL info with stdout to a file, quotas and rate limits raised so one job replays for the whole run.
 *
 * Run (needs redis-server and nginx; the service is the BUILT one, dist/main.js, which the runner builds first):
 *
 *   npm run bench -- runtimes --nodes /usr/bin/node,<lts node>
 *
 * (`npm i node@24` or `node@26` in a scratch directory gives the LTS binary: node_modules/.bin/node.) The first binary
 * is the baseline A; each other one, B, is judged against it.
 *
 * Options: --nodes PATH[,PATH...] (node binaries; this bench's own by default, and the same one twice shows the noise;
 *                   PATH=CHECKOUT runs another checkout's build on it, e.g. the revision before a change, labelled
 *                   `<version>@<folder>`)
 *          --lanes export,nginx,pickup,auth  --rounds 5  --round-seconds 5  --warmup-seconds 2  --connections 16
 *          --cpu-prof (profiles each service, prints its busiest functions and keeps the .cpuprofile files, named after
 *                      the runtime's version)
 *
 * Why ratios only: the machine is shared and has two cores, and absolute figures move by ±15 % between runs minutes
 * apart. So the runtimes are measured in the same run, round by round: in each round each lane runs on every runtime in
 * turn, the runtimes' order rotated each round (so drift hits all alike), each run starting on quiet services, after a
 * warm-up of each lane on each runtime. The least noisy figure is the service's CPU per request, read from
 * /proc/<pid>/stat (10 ms ticks) around each run; B/A is the median of the rounds' ratios, each round's printed beside
 * it to show the spread. The target: B/A ≤ 1.00 for export, pickup and auth. Throughput (answers/s) depends on
 * what else ran on the two cores, so only export/nginx of one runtime, measured in the same rounds, is compared.
 * Exits 1 if any request was not answered 2xx, or the sink received fewer bytes than the exports answered 2xx carried.
 */
import autocannon from 'autocannon';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { CALLER_KEY_HEADER, generateCallerKey } from '../src/internal-api/caller-keys';
import { jobPayloadRequest, RUNNER_TOKEN } from '../test/fixtures/job-payload';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { makeGitLabKeys } from '../test/helpers/job-tokens';
import { startRedis } from '../test/helpers/redis';
import { ServiceProcess, startService } from '../test/helpers/service';
import { repoRoot } from '../simulator/repo-root';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import { quiet, QUIET_CPU_SHARE } from './lib/bench-server';
import { BytesSink, guardedRun, startBytesSink } from './lib/child-process';
import { printCpuProfiles } from './lib/cpu-profile-summary';
import { AuthNginx, gatewayServiceEnv, nginxErrorKinds, pickUpJob, startAuthNginx } from './lib/gateway-world';
import { median } from './lib/percentiles';
import { childPids, procCpuMicros, procCpuTimes } from './lib/proc-cpu';
import { printTable } from './lib/table';
import { otlpTypes, traceExport } from './otlp-gateway.payload';

type Lane = 'export' | 'nginx' | 'pickup' | 'auth';
const LANES: readonly Lane[] = ['export', 'nginx', 'pickup', 'auth'];
/** The lanes whose service CPU per request the issue holds to the baseline's. */
const JUDGED: readonly Lane[] = ['export', 'pickup', 'auth'];
const EXPORT_PATH = '/v1/traces';
const PICKUP_PATH = '/internal/ci/telemetry/job_payload';
const AUTH_PATH = '/internal/ci/telemetry/auth';
const SPANS = 100;
const ATTRIBUTES = 10;
/**
 * The store is shared, so each runtime's jobs are its own: runtime i exports as job FIRST_JOB + i × JOBS_PER_RUNTIME
 * and its pickup lane picks up the jobs after it, a new one per request.
 */
const FIRST_JOB = 7_300_001;
const JOBS_PER_RUNTIME = 10_000_000;
/** The longest wait for quiet services before a run; a run that starts on busy ones is counted and said. */
const QUIET_WAIT_MS = 5000;

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string', default: process.execPath },
    lanes: { type: 'string', default: LANES.join(',') },
    rounds: { type: 'string', default: '5' },
    'round-seconds': { type: 'string', default: '5' },
    'warmup-seconds': { type: 'string', default: '2' },
    connections: { type: 'string', default: '16' },
    'cpu-prof': { type: 'boolean', default: false },
  },
});
const options = {
  nodes: args.nodes.split(',').map((path) => path.trim()),
  lanes: args.lanes.split(',').map((lane) => lane.trim()) as Lane[],
  rounds: Number(args.rounds),
  roundSeconds: Number(args['round-seconds']),
  warmupSeconds: Number(args['warmup-seconds']),
  connections: Number(args.connections),
  cpuProf: args['cpu-prof'],
};
for (const lane of options.lanes) if (!LANES.includes(lane)) throw new Error(`unknown lane ${lane}: --lanes takes ${LANES.join(',')}`);
for (const spec of options.nodes) {
  const [path, root] = spec.split('=');
  if (!existsSync(path)) throw new Error(`--nodes: no node binary at ${path}`);
  if (root !== undefined && !existsSync(join(root, 'dist', 'main.js'))) throw new Error(`--nodes: ${root} has no dist/main.js (build it there first)`);
}
if (!(options.rounds >= 1)) throw new Error('--rounds takes 1 or more');

/** One node binary under test. */
interface Runtime {
  readonly path: string;
  /** The checkout whose dist/main.js it runs (`--nodes PATH=CHECKOUT`: another revision's build); this one by default. */
  readonly root: string | undefined;
  /** Its version, and its place when the same version is given twice: how the table and the profiles name it. */
  readonly label: string;
}

/** A runtime's world: its service, its nginx, its granted job. */
interface Target {
  readonly runtime: Runtime;
  readonly service: ServiceProcess;
  readonly nginx: AuthNginx | undefined;
  readonly jobToken: string;
  readonly exportBody: Buffer;
  /** The next job its pickup lane picks up. */
  nextJob: number;
}

/** What one lane sends to one runtime's service or nginx. */
interface LaneRequest {
  readonly origin: string;
  readonly path: string;
  headers(): Record<string, string>;
  body(): Buffer | string | undefined;
  /** Headers and body made anew for each request (autocannon's setupRequest), not once for the run. */
  readonly perRequest: boolean;
}

/** One run of one lane on one runtime. CPU figures are µs per answered request. */
interface RunStats {
  readonly reqPerSec: number;
  readonly service: number;
  /** The service's kernel share: syscalls, and on loopback the receiving side's TCP work too. */
  readonly serviceSystem: number;
  readonly redis: number;
  /** nginx's master and workers (the nginx lane only; NaN otherwise). */
  readonly nginx: number;
  /** Share of one core the load generator (this process) used: near 100 % means it, not the service, was the limit. */
  readonly generatorShare: number;
  readonly p50: number;
  readonly p99: number;
}

const failures: string[] = [];
let unquietRuns = 0;

function runtimesOf(specs: readonly string[]): Runtime[] {
  const given = specs.map((spec) => {
    const [path, root] = spec.split('=');
    return { path, root, version: execFileSync(path, ['--version'], { encoding: 'utf8' }).trim() + (root === undefined ? '' : `@${basename(root)}`) };
  });
  const versions = given.map(({ version }) => version);
  return given.map(({ path, root }, i) => {
    const same = versions.filter((version) => version === versions[i]).length;
    const place = versions.slice(0, i).filter((version) => version === versions[i]).length + 1;
    return { path, root, label: same > 1 ? `${versions[i]}#${place}` : versions[i] };
  });
}

async function main(): Promise<void> {
  const root = repoRoot();
  const runtimes = runtimesOf(options.nodes);
  const work = mkdtempSync(join(tmpdir(), 'cjt-runtimes-bench-'));
  const profiled = (name: string): string[] =>
    options.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${join(work, 'profiles')}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
  const runs = options.lanes.length * runtimes.length * (options.rounds + (options.warmupSeconds > 0 ? 1 : 0));
  const planned = options.lanes.length * runtimes.length * (options.warmupSeconds + options.rounds * options.roundSeconds);
  const started = performance.now();
  const { stops, stopAll } = guardedRun(planned + (runs * QUIET_WAIT_MS) / 1000 + 60 * runtimes.length + 90);

  const secrets = makeSecretFiles();
  // GitLab's public keys, in the run's own directory: removed with it.
  const keys = await makeGitLabKeys(join(work, 'jwks.json'));
  const callerKey = generateCallerKey();
  const types = otlpTypes();
  const results: Partial<Record<Lane, RunStats[][]>> = {};
  const nginxErrors: string[] = [];

  try {
    const redis = await startRedis();
    stops.push(() => redis.stop());
    const sink: BytesSink = await startBytesSink(join(__dirname, 'otlp-gateway.sink.js'));
    stops.push(() => sink.stop());
    const internalApi = await rollingAuthHeader(secrets.internalApiSecret);
    stops.push(async () => internalApi.stop());
    const wiring = { redisUrl: redis.url, upstream: sink.origin, jwksFile: keys.jwksFile, callerKey };

    const targets: Target[] = [];
    for (const [i, runtime] of runtimes.entries()) {
      const name = `service-node-${runtime.label.replace('#', '-')}`;
      const service = await startService(gatewayServiceEnv(wiring), {
        node: runtime.path,
        root: runtime.root,
        logFile: join(work, `${name}.log`),
        nodeArgs: profiled(name),
        secrets,
      });
      stops.push(async () => void (await service.stop()));
      let nginx: AuthNginx | undefined;
      if (options.lanes.includes('nginx')) {
        const authNginx = await startAuthNginx(service, wiring);
        nginx = authNginx;
        stops.push(async () => void nginxErrors.push(await authNginx.stop()));
      }
      const jobId = FIRST_JOB + i * JOBS_PER_RUNTIME;
      const job = await pickUpJob(service, jobId);
      const exportBody = traceExport(types, { traceId: job.traceId, spans: SPANS, attributesPerSpan: ATTRIBUTES });
      targets.push({ runtime, service, nginx, jobToken: await keys.sign(jobId, { expiresIn: 3600 }), exportBody, nextJob: jobId + 1 });
    }

    console.log('Node.js runtimes: the same service on each, side by side (ratios to the first runtime are the result; absolute numbers are noise)');
    for (const [i, runtime] of runtimes.entries()) console.log(`${i === 0 ? 'A' : 'B'} ${runtime.label.padEnd(10)} ${runtime.path}`);
    console.log(
      `load average ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')} at start · export ${SPANS} spans × ${ATTRIBUTES} attributes = ${(targets[0].exportBody.length / 1024).toFixed(1)} KiB · ` +
        `${options.connections} connections · ${options.rounds}×${options.roundSeconds} s alternating rounds · ~${planned} s of load · ${cpus().length} CPUs`,
    );

    const exportHeaders = (target: Target) => ({
      'content-type': 'application/x-protobuf',
      authorization: `Bearer ${target.jobToken}`,
      'runner-token': RUNNER_TOKEN,
    });
    // What nginx's auth_request sends on /v1/ (deploy/nginx): the export's credentials, its caller key, the path.
    const authHeaders = (target: Target) => ({
      [CALLER_KEY_HEADER]: callerKey,
      authorization: `Bearer ${target.jobToken}`,
      'runner-token': RUNNER_TOKEN,
      'x-original-uri': EXPORT_PATH,
    });
    /** What `lane` sends to `target`'s processes: the same every time, or made anew for each request. */
    const laneRequest = (target: Target, lane: Lane): LaneRequest => {
      switch (lane) {
        case 'export':
          return {
            origin: target.service.gatewayUrl,
            path: EXPORT_PATH,
            headers: () => exportHeaders(target),
            body: () => target.exportBody,
            perRequest: false,
          };
        case 'nginx':
          return { origin: target.nginx!.url, path: EXPORT_PATH, headers: () => exportHeaders(target), body: () => target.exportBody, perRequest: false };
        case 'pickup':
          return {
            origin: target.service.url,
            path: PICKUP_PATH,
            // The internal-API header is re-signed every 30 s; each request picks up a job of its own.
            headers: () => ({ 'content-type': 'application/json', ...internalApi.current() }),
            body: () => JSON.stringify(jobPayloadRequest({ job: { id: target.nextJob++ } })),
            perRequest: true,
          };
        case 'auth':
          return { origin: target.service.url, path: AUTH_PATH, headers: () => authHeaders(target), body: () => undefined, perRequest: false };
        default: {
          const unknown: never = lane;
          throw new Error(`unknown lane ${String(unknown)}`);
        }
      }
    };
    const loadOf = (request: LaneRequest): autocannon.Options =>
      request.perRequest
        ? {
            url: request.origin,
            requests: [{ method: 'POST', path: request.path, setupRequest: (sent) => ({ ...sent, headers: request.headers(), body: request.body() }) }],
          }
        : { url: request.origin + request.path, method: 'POST', headers: request.headers(), body: request.body() };

    // One request of each lane on each runtime first, so a wrong wiring fails here with its answer, not as counts.
    for (const target of targets) {
      for (const lane of options.lanes) {
        const request = laneRequest(target, lane);
        const response = await fetch(request.origin + request.path, { method: 'POST', headers: request.headers(), body: request.body() });
        const answer = await response.text();
        if (response.status < 200 || response.status > 299)
          throw new Error(`${lane} on ${target.runtime.label} answered ${response.status}: ${answer.slice(0, 300)}`);
      }
    }

    const allServices = { cpuMicros: async () => targets.reduce((sum, target) => sum + procCpuMicros(target.service.pid), 0) };
    // Quiet is each service as idle as quiet() means one to be; a profiled one idles at about 6 % of a core.
    const quietShare = QUIET_CPU_SHARE * targets.length * (options.cpuProf ? 2 : 1);
    const nginxCpu = (nginx: AuthNginx | undefined) =>
      nginx?.masterPid === undefined ? Number.NaN : [nginx.masterPid, ...childPids(nginx.masterPid)].reduce((sum, pid) => sum + procCpuMicros(pid), 0);
    const cpuNow = (target: Target, lane: Lane) => {
      const service = procCpuTimes(target.service.pid);
      const generator = process.cpuUsage();
      return {
        service: service.user + service.system,
        serviceSystem: service.system,
        redis: redis.pid === undefined ? Number.NaN : procCpuMicros(redis.pid),
        nginx: lane === 'nginx' ? nginxCpu(target.nginx) : Number.NaN,
        generator: generator.user + generator.system,
      };
    };

    const run = async (target: Target, lane: Lane, seconds: number, label: string): Promise<RunStats> => {
      // The tail of the previous run (a pickup's spans delivered from the outbox, garbage) is not this run's.
      if ((await quiet(allServices, QUIET_WAIT_MS, quietShare)) === undefined) unquietRuns++;
      const exporting = lane === 'export' || lane === 'nginx';
      const sinkBefore = exporting ? await sink.stats() : undefined;
      const before = cpuNow(target, lane);
      const wallBefore = performance.now();
      const result = await autocannon({
        ...loadOf(laneRequest(target, lane)),
        connections: options.connections,
        pipelining: 1,
        duration: seconds,
        timeout: 10,
      });
      const wallMicros = (performance.now() - wallBefore) * 1000;
      const after = cpuNow(target, lane);
      const errors = result.errors + result.mismatches; // autocannon counts timeouts in errors too
      if (result.non2xx > 0 || errors > 0) failures.push(`${label}: ${result.non2xx} non-2xx answers, ${errors} errors/timeouts`);
      if (sinkBefore !== undefined) {
        // Requests in flight when autocannon stops are forwarded but not counted, and exports may be joined upstream, so
        // what is checked is bytes: each export answered 2xx reached the sink with at least the bytes it was sent with.
        const bytes = (await sink.stats()).bytes - sinkBefore.bytes;
        if (bytes < result['2xx'] * target.exportBody.length) failures.push(`${label}: ${result['2xx']} exports answered 2xx but the sink got ${bytes} bytes`);
      }
      const answered = result['2xx'] + result.non2xx;
      const perRequest = (figure: keyof typeof before) => (answered === 0 ? Number.NaN : (after[figure] - before[figure]) / answered);
      return {
        reqPerSec: result['2xx'] / result.duration,
        service: perRequest('service'),
        serviceSystem: perRequest('serviceSystem'),
        redis: perRequest('redis'),
        nginx: perRequest('nginx'),
        generatorShare: (after.generator - before.generator) / wallMicros,
        p50: result.latency.p50,
        p99: result.latency.p99,
      };
    };

    if (options.warmupSeconds > 0) {
      for (const lane of options.lanes) {
        for (const target of targets) await run(target, lane, options.warmupSeconds, `${lane} on ${target.runtime.label} warm-up`);
      }
    }
    for (let round = 0; round < options.rounds; round++) {
      for (const lane of options.lanes) {
        const order = targets.map((_, i) => (i + round) % targets.length);
        for (const i of order) {
          const stats = await run(targets[i], lane, options.roundSeconds, `${lane} on ${runtimes[i].label} round ${round + 1}`);
          ((results[lane] ??= runtimes.map(() => []))[i] ??= []).push(stats);
        }
      }
    }
  } catch (error) {
    failures.push(String((error as Error).stack ?? error));
  } finally {
    await stopAll();
  }

  printReport(runtimes, results);
  if (unquietRuns > 0) console.log(`${unquietRuns} runs started on services still busy after ${QUIET_WAIT_MS / 1000} s`);
  const errorKinds = nginxErrorKinds(nginxErrors.join('\n'));
  if (errorKinds !== undefined) console.log(`nginx error log: ${errorKinds}`);
  console.log(
    `total ${((performance.now() - started) / 1000).toFixed(0)} s · load average at end ${loadavg()
      .map((load) => load.toFixed(1))
      .join(' ')}`,
  );
  if (options.cpuProf) printCpuProfiles(join(work, 'profiles'), root);
  else rmSync(work, { recursive: true, force: true });
  rmSync(secrets.dir, { recursive: true, force: true });

  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

const fixed = (value: number, digits: number) => (Number.isNaN(value) ? '-' : value.toFixed(digits));
const ratio = (a: number, b: number) => (b === 0 ? Number.NaN : a / b);

function printReport(runtimes: readonly Runtime[], results: Partial<Record<Lane, RunStats[][]>>): void {
  const rows: string[][] = [['lane', 'node', 'req/s by round', 'median', 'µs CPU/req: svc', '(sys)', 'redis', 'nginx', 'gen CPU', 'p50 ms', 'p99 ms']];
  const verdicts: string[] = [];
  for (const lane of options.lanes) {
    const byRuntime = results[lane];
    if (byRuntime === undefined) continue;
    const medianOf = (runs: RunStats[] | undefined, pick: (run: RunStats) => number) =>
      runs === undefined || runs.length === 0 ? Number.NaN : median(runs.map(pick));
    for (const [i, runtime] of runtimes.entries()) {
      const runs = byRuntime[i];
      if (runs === undefined) continue;
      rows.push([
        lane,
        runtime.label,
        runs.map((run) => fixed(run.reqPerSec, 0)).join(' '),
        fixed(
          medianOf(runs, (run) => run.reqPerSec),
          0,
        ),
        fixed(
          medianOf(runs, (run) => run.service),
          0,
        ),
        fixed(
          medianOf(runs, (run) => run.serviceSystem),
          0,
        ),
        fixed(
          medianOf(runs, (run) => run.redis),
          0,
        ),
        fixed(
          medianOf(runs, (run) => run.nginx),
          0,
        ),
        `${fixed(
          medianOf(runs, (run) => run.generatorShare * 100),
          0,
        )}%`,
        fixed(
          medianOf(runs, (run) => run.p50),
          2,
        ),
        fixed(
          medianOf(runs, (run) => run.p99),
          2,
        ),
      ]);
    }
    // Each other runtime against the first: the rounds' ratios, each of two runs made back to back.
    const baseline = byRuntime[0] ?? [];
    for (const [i, runtime] of runtimes.entries()) {
      const runs = byRuntime[i];
      if (i === 0 || runs === undefined) continue;
      const perRound = runs.map((run, round) => ratio(run.service, baseline[round]?.service ?? Number.NaN));
      const value = median(perRound);
      const what = lane === 'nginx' ? 'service CPU/request (its auth endpoint behind nginx)' : 'service CPU/request';
      const judged = JUDGED.includes(lane) && !Number.isNaN(value) ? ` (target ≤ 1.00: ${value <= 1 ? 'met' : 'MISSED'})` : '';
      verdicts.push(
        `${lane}: ${what} ${runtime.label}/${runtimes[0].label} ${fixed(value, 2)}${judged}; per round ${perRound.map((r) => fixed(r, 2)).join(' ')}; ` +
          `medians ${fixed(
            medianOf(baseline, (run) => run.service),
            0,
          )} → ${fixed(
            medianOf(runs, (run) => run.service),
            0,
          )} µs`,
      );
    }
  }
  // The gateway against nginx on each runtime, in the same rounds: what the "exports/s against nginx" says.
  const exports = results.export;
  const nginx = results.nginx;
  if (exports !== undefined && nginx !== undefined) {
    const perRuntime = runtimes.map((runtime, i) => {
      const perRound = (exports[i] ?? []).map((run, round) => ratio(run.reqPerSec, nginx[i]?.[round]?.reqPerSec ?? Number.NaN));
      return `${runtime.label} ${fixed(perRound.length === 0 ? Number.NaN : median(perRound), 2)} (per round ${perRound.map((r) => fixed(r, 2)).join(' ')})`;
    });
    verdicts.push(`export/nginx throughput: ${perRuntime.join(' · ')}`);
  }
  console.log('');
  printTable(rows);
  console.log('');
  for (const verdict of verdicts) console.log(verdict);
}

runBench(main);
