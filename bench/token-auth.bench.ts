/**
 * The auth endpoint (`POST /internal/ci/telemetry/auth`, SPEC §5) against a bare Fastify route
 * served by the same process, with a real redis-server as the store: once with a warm decision
 * (the same token pair again, answered from the endpoint's decision cache) and once with a store
 * lookup on every request (AUTH_DECISION_CACHE_SIZE=0, and 200 jobs with distinct opaque tokens in
 * rotation, so concurrent requests do not share one lookup: the grant read, the runner's rate window
 * from the ledger's blocks, and the token-digest index before them on a token's first lookup in the
 * process). Beside each, the least its work can cost: a bare route making the two digests a reused
 * decision needs, or one making the store round trip a lookup needs (the grant read). The bare route and
 * the bounds log their successes as the auth endpoint does (at most once per interval, issue 21); the bare
 * route logging every request is measured beside them, to show what that sampling is worth.
 *
 * Run (needs redis-server on PATH):
 *
 *   npm run bench -- token-auth            (--smoke: one 1 s round each, to check it still works; no verdict)
 *
 * Options: --rounds 7  --round-seconds 3  --variants warm,lookup  --cpu-prof (profiles the server of each
 *          variant, prints its busiest functions and keeps the .cpuprofile)  --pin (the server alone on
 *          CPU 1; the load generator and redis-server on CPU 0: the server's cost on one core of its own)
 *
 * Only ratios against the baseline measured in the same process and run mean anything on this
 * shared machine: rounds alternate bare/auth and the median of each is compared, with the server's
 * CPU per request. Exits 1 if any request was not answered 2xx.
 */
import autocannon from 'autocannon';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { jobPayloadRequest, RUNNER_TOKEN } from '../test/fixtures/job-payload';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { makeGitLabKeys } from '../test/helpers/job-tokens';
import { startRedis } from '../test/helpers/redis';
import { repoRoot } from '../simulator/repo-root';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import {
  BARE_ROUTE,
  BARE_SAMPLED_ROUTE,
  BenchServer,
  benchServerEnv,
  DECORATOR_ROUTE,
  DIGESTS_ROUTE,
  pinToCpu,
  serverScript,
  startBenchServer,
  STORE_ROUTE,
} from './lib/bench-server';
import { printCpuProfiles } from './lib/cpu-profile-summary';
import { median } from './lib/percentiles';
import { procCpuMicros } from './lib/proc-cpu';

const AUTH_ROUTE = '/internal/ci/telemetry/auth';
const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    'round-seconds': { type: 'string' },
    variants: { type: 'string', default: 'warm,lookup' },
    'cpu-prof': { type: 'boolean', default: false },
    pin: { type: 'boolean', default: false },
  },
});
const SMOKE = args.smoke;
// Seven short rounds rather than three long ones: on this shared machine one round's ratio swings by 0.3,
// and a median of seven settles where one of three does not.
const ROUNDS = Number(args.rounds ?? (SMOKE ? 1 : 7));
const ROUND_SECONDS = Number(args['round-seconds'] ?? (SMOKE ? 1 : 3));
const VARIANTS = { warm: 'warm decision', lookup: 'store lookup' } as const;
const CPU_PROF = args['cpu-prof'];
const PIN = args.pin;
const CONNECTIONS = 10;
const OPAQUE_JOBS = 200;
type Route = 'bare' | 'logged' | 'auth' | 'store' | 'digests';

const failures: string[] = [];

/** One load run: the server's CPU per request, and the store's and the load generator's (the rest of the 2 cores). */
interface RunStats {
  readonly reqPerSec: number;
  readonly cpuMicrosPerRequest: number;
  readonly redisCpuMicrosPerRequest: number;
  readonly loadCpuMicrosPerRequest: number;
}

async function measure(
  server: BenchServer,
  redis: number | undefined,
  path: string,
  headers: () => Record<string, string>,
  body: string | undefined,
  seconds: number,
): Promise<RunStats> {
  const cpuBefore = await server.cpuMicros();
  const redisBefore = redis === undefined ? Number.NaN : procCpuMicros(redis);
  const loadBefore = process.cpuUsage();
  const result = await autocannon({
    url: server.origin,
    connections: CONNECTIONS,
    duration: seconds,
    timeout: 10,
    requests: [{ method: 'POST', path, setupRequest: (request) => ({ ...request, headers: headers(), body }) }],
  });
  const load = process.cpuUsage(loadBefore);
  const cpu = (await server.cpuMicros()) - cpuBefore;
  const redisCpu = redis === undefined ? Number.NaN : procCpuMicros(redis) - redisBefore;
  if (result.non2xx > 0 || result.errors > 0) failures.push(`${path}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  const requests = Math.max(1, result['2xx'] + result.non2xx);
  return {
    reqPerSec: result['2xx'] / result.duration,
    cpuMicrosPerRequest: cpu / requests,
    redisCpuMicrosPerRequest: redisCpu / requests,
    loadCpuMicrosPerRequest: (load.user + load.system) / requests,
  };
}

async function cacheCounts(origin: string): Promise<{ hit: number; miss: number }> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const count = (result: string) => Number(new RegExp(`ci_job_telemetry_auth_decision_cache_total\\{result="${result}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
  return { hit: count('hit'), miss: count('miss') };
}

async function main(): Promise<void> {
  if (PIN) pinToCpu(0);
  const root = repoRoot();
  const work = mkdtempSync(join(tmpdir(), 'cjt-token-auth-bench-'));
  const secrets = makeSecretFiles();
  const keys = await makeGitLabKeys();
  const redis = await startRedis();
  const internalApi = await rollingAuthHeader(secrets.internalApiSecret);
  const jobToken = await keys.sign(1001);

  console.log('auth endpoint vs bare Fastify route, same server process, real Redis (ratios are the result; absolute numbers are noise)');
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} at start · ${CONNECTIONS} connections · ${ROUNDS}×${ROUND_SECONDS} s alternating rounds · ${cpus().length} CPUs` +
      (PIN ? ' · pinned: server on CPU 1, load generator and redis on CPU 0' : ''),
  );
  const rows: string[] = [];
  try {
    for (const variant of args.variants.split(',').map((name) => VARIANTS[name.trim() as keyof typeof VARIANTS])) {
      if (variant === undefined) throw new Error(`--variants takes ${Object.keys(VARIANTS).join(',')}`);
      const server = await startBenchServer({
        script: serverScript(__dirname),
        cwd: root,
        logFile: join(work, `service-${variant.replace(' ', '-')}.log`),
        cpu: PIN ? 1 : undefined,
        nodeArgs: CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${join(work, 'profiles')}`, `--cpu-prof-name=server-${variant.replace(' ', '-')}.cpuprofile`] : [],
        env: benchServerEnv(root, secrets, {
          GATEWAY_PORT: '0',
          // The gateway never listens here, but a process handing out URLs needs one that is not port 0.
          GATEWAY_PUBLIC_URL: 'http://127.0.0.1:4318',
          REDIS_URL: redis.url,
          JOB_TOKEN_JWKS_FILE: keys.jwksFile,
          RUNNER_RATE_LIMIT: '100000000',
          AUTH_DECISION_CACHE_SIZE: variant === 'warm decision' ? '10000' : '0',
        }),
      });
      try {
        const jobs = variant === 'warm decision' ? 1 : OPAQUE_JOBS;
        const tokens: string[] = [];
        for (let job = 0; job < jobs; job++) {
          const token = variant === 'warm decision' ? jobToken : `glcbt-bench-opaque-${job}-${'x'.repeat(20)}`;
          const pickup = await fetch(server.origin + DECORATOR_ROUTE, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...internalApi.current() },
            body: JSON.stringify(jobPayloadRequest({ job: { id: 1001 + job, token } })),
          });
          if (pickup.status !== 200) throw new Error(`pickup answered ${pickup.status}`);
          tokens.push(token);
        }
        let next = 0;
        const authHeaders = () => ({
          ...internalApi.current(),
          authorization: `Bearer ${tokens[next++ % tokens.length]}`,
          'runner-token': RUNNER_TOKEN,
        });
        const check = await fetch(server.origin + AUTH_ROUTE, { method: 'POST', headers: authHeaders() });
        if (check.status !== 200) throw new Error(`auth answered ${check.status}: ${await check.text()}`);
        const lookupsBefore = await cacheCounts(server.origin);

        // The baseline gets a request shaped like the auth request: headers only, no body to parse. Beside it, the
        // least the variant's work costs: the two digests a reused decision needs, or a lookup's grant read.
        // `bare` logs its successes as the auth endpoint does (sampled); `logged` writes a line on every request,
        // as every other route does: what the endpoint's sampled access log is worth.
        const paths: Record<Route, string> = { bare: BARE_SAMPLED_ROUTE, logged: BARE_ROUTE, auth: AUTH_ROUTE, store: STORE_ROUTE, digests: DIGESTS_ROUTE };
        const bound: Route = variant === 'warm decision' ? 'digests' : 'store';
        const routes: Route[] = ['bare', 'auth', bound, 'logged'];
        const run = (route: Route, seconds: number) => measure(server, redis.pid, paths[route], authHeaders, undefined, seconds);
        for (const route of routes) await run(route, 2);
        const results: Record<Route, RunStats[]> = { bare: [], logged: [], auth: [], store: [], digests: [] };
        for (let round = 0; round < ROUNDS; round++) {
          for (const route of routes.map((_, i) => routes[(i + round) % routes.length])) results[route].push(await run(route, ROUND_SECONDS));
        }
        const bare = median(results.bare.map((r) => r.reqPerSec));
        const auth = median(results.auth.map((r) => r.reqPerSec));
        const cpuOf = (route: Route, figure: keyof RunStats) => median(results[route].map((r) => r[figure]));
        const bareCpu = cpuOf('bare', 'cpuMicrosPerRequest');
        const authCpu = cpuOf('auth', 'cpuMicrosPerRequest');
        const machine = (route: Route) =>
          cpuOf(route, 'cpuMicrosPerRequest') + cpuOf(route, 'redisCpuMicrosPerRequest') + cpuOf(route, 'loadCpuMicrosPerRequest');
        const lookups = await cacheCounts(server.origin);
        rows.push(`${variant.padEnd(13)}  decision cache: ${lookups.hit - lookupsBefore.hit} hits, ${lookups.miss - lookupsBefore.miss} store lookups`);
        rows.push(
          `${variant.padEnd(13)}  bare ${bare.toFixed(0).padStart(6)} req/s  auth ${auth.toFixed(0).padStart(6)} req/s  ratio auth/bare ${(auth / bare).toFixed(2)}` +
            `  (per round ${results.auth.map((r, i) => (r.reqPerSec / results.bare[i].reqPerSec).toFixed(2)).join(' ')})` +
            `  server CPU/request ${authCpu.toFixed(0)} vs ${bareCpu.toFixed(0)} µs (×${(authCpu / bareCpu).toFixed(2)})`,
        );
        const least = median(results[bound].map((r) => r.reqPerSec));
        const boundName = bound === 'digests' ? 'a bare route making the two digests' : 'a bare route making the grant read and window hit of a lookup';
        rows.push(
          `${variant.padEnd(13)}  bound: ${boundName} ${least.toFixed(0).padStart(6)} req/s, ${(least / bare).toFixed(2)}× bare` +
            ` (server CPU/request ${cpuOf(bound, 'cpuMicrosPerRequest').toFixed(0)} µs); auth reaches ${(auth / least).toFixed(2)}× that`,
        );
        const logged = median(results.logged.map((r) => r.reqPerSec));
        rows.push(
          `${variant.padEnd(13)}  bare logging every request ${logged.toFixed(0).padStart(6)} req/s, ${(logged / bare).toFixed(2)}× bare` +
            ` (server CPU/request ${cpuOf('logged', 'cpuMicrosPerRequest').toFixed(0)} µs); auth reaches ${(auth / logged).toFixed(2)}× that`,
        );
        rows.push(
          `${variant.padEnd(13)}  CPU/request auth vs bare: redis ${cpuOf('auth', 'redisCpuMicrosPerRequest').toFixed(0)} vs ${cpuOf('bare', 'redisCpuMicrosPerRequest').toFixed(0)} µs,` +
            ` load generator ${cpuOf('auth', 'loadCpuMicrosPerRequest').toFixed(0)} vs ${cpuOf('bare', 'loadCpuMicrosPerRequest').toFixed(0)} µs,` +
            ` all three ${machine('auth').toFixed(0)} vs ${machine('bare').toFixed(0)} µs (×${(machine('auth') / machine('bare')).toFixed(2)})`,
        );
      } finally {
        await server.stop();
      }
    }
  } catch (error) {
    failures.push(String((error as Error).stack ?? error));
  } finally {
    internalApi.stop();
    await redis.stop();
  }
  for (const row of rows) console.log(row);
  console.log(
    `load average at end ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  if (CPU_PROF) printCpuProfiles(join(work, 'profiles'), root);
  else rmSync(work, { recursive: true, force: true });
  rmSync(secrets.dir, { recursive: true, force: true });
  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

runBench(main);
