/**
 * The decorator of two revisions side by side (issue 37): on a shared machine a change of 10 to 20 % in CPU per
 * pickup disappears between two runs of bench/job-payload.bench.ts taken minutes apart (their bare route alone moves
 * by as much), so this runs both revisions' servers at once, each with its own redis-server, and alternates their
 * rounds (ABBA), as the job-payload bench alternates its routes. Each revision is taken from git (`git archive`),
 * built into a temporary directory with this checkout's node_modules, and served by its own
 * bench/job-payload.server.ts; the load is this checkout's (bodies, pacing), the same for both.
 *
 *   npm run bench -- job-payload-revisions --before main --after HEAD
 *
 * Options: --before <rev> (default main)  --after <rev> (default HEAD; `worktree` for the files as they are)
 *          --rounds 4  --round-seconds 5  --connections 10  --rate 1000 (open-loop latency runs)  --latency-seconds 5
 *
 * Per revision: decorator req/s at full speed and the server's CPU per pickup (from its own process.cpuUsage),
 * then CPU per pickup, p50 and p99 (from when each request was due) at --rate. Ratios after/before per round show
 * how much of the median is noise. Exits 1 when any answer was not 2xx.
 */
import autocannon from 'autocannon';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { RedisServer, startRedis } from '../test/helpers/redis';
import { repoRoot } from '../simulator/repo-root';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import { BenchServer, benchServerEnv, DECORATOR_ROUTE, quiet, startBenchServer } from './lib/bench-server';
import { runFixedRate } from './lib/fixed-rate-load';
import { jobPayloadBodies } from './lib/job-payload-body';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';

const { values: args } = parseArgs({
  options: {
    before: { type: 'string', default: 'main' },
    after: { type: 'string', default: 'HEAD' },
    rounds: { type: 'string', default: '4' },
    'round-seconds': { type: 'string', default: '5' },
    connections: { type: 'string', default: '10' },
    rate: { type: 'string', default: '1000' },
    'latency-seconds': { type: 'string', default: '5' },
  },
});
const rounds = Number(args.rounds);
const roundSeconds = Number(args['round-seconds']);
const connections = Number(args.connections);
const rate = Number(args.rate);
const latencySeconds = Number(args['latency-seconds']);

type Side = 'before' | 'after';
const SIDES: readonly Side[] = ['before', 'after'];

interface SideFigures {
  readonly reqPerSec: number[];
  readonly cpuMicros: number[];
  readonly cpuMicrosAtRate: number[];
  readonly p50Ms: number[];
  readonly p99Ms: number[];
}

/** The revision's files in a temporary directory, its benches built as the bench runner builds them. */
function checkOut(root: string, revision: string, into: string): string {
  if (revision === 'worktree') {
    cpSync(root, into, { recursive: true, filter: (path) => !/\/(node_modules|\.git|\.data)(\/|$)/.test(path.slice(root.length)) });
  } else {
    const archive = execFileSync('git', ['-C', root, 'archive', '--format=tar', revision], { maxBuffer: 512 * 1024 * 1024 });
    execFileSync('tar', ['-x', '-C', into], { input: archive });
  }
  symlinkSync(join(root, 'node_modules'), join(into, 'node_modules'));
  const out = join(into, 'out');
  // A revision from before the one bench tsconfig (issue 57) built its job-payload bench with a tsconfig of its own.
  const tsconfig = ['tsconfig.json', 'job-payload.tsconfig.json'].map((name) => join(into, 'bench', name)).find((path) => existsSync(path));
  if (tsconfig === undefined) throw new Error(`${revision} has no bench tsconfig`);
  execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', tsconfig, '--outDir', out, '--tsBuildInfoFile', join(out, '.tsbuildinfo')], {
    stdio: 'inherit',
  });
  return join(out, 'bench', 'job-payload.server.js');
}

async function main(): Promise<void> {
  const root = repoRoot();
  const work = mkdtempSync(join(tmpdir(), 'cjt-job-payload-revisions-'));
  const secrets = makeSecretFiles();
  const bodies = jobPayloadBodies();
  const auth = await rollingAuthHeader(secrets.internalApiSecret);
  let nextJobId = 1_000_000;
  const headers = (): Record<string, string> => ({ 'content-type': 'application/json', ...auth.current() });
  const servers = new Map<Side, BenchServer>();
  const redises: RedisServer[] = [];
  const failures: string[] = [];
  const figures: Record<Side, SideFigures> = {
    before: { reqPerSec: [], cpuMicros: [], cpuMicrosAtRate: [], p50Ms: [], p99Ms: [] },
    after: { reqPerSec: [], cpuMicros: [], cpuMicrosAtRate: [], p50Ms: [], p99Ms: [] },
  };
  const revision = { before: args.before, after: args.after };
  try {
    for (const side of SIDES) {
      const dir = join(work, side);
      mkdirSync(dir);
      const script = checkOut(root, revision[side], dir);
      const redis = await startRedis();
      redises.push(redis);
      servers.set(
        side,
        await startBenchServer({
          script,
          cwd: dir,
          logFile: join(work, `service-${side}.log`),
          env: benchServerEnv(dir, secrets, { REDIS_URL: redis.url, DATA_DIR: join(dir, '.data') }),
        }),
      );
    }
    console.log(
      `decorator, ${revision.before} (before) and ${revision.after} (after) side by side, Redis each · load average ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')} at start · ${rounds}×${roundSeconds} s alternating rounds, ${connections} connections · ` +
        `${rate} req/s × ${latencySeconds} s open-loop (latency from when each request was due) · a new job per request, 10 to 40 jobs per pipeline`,
    );

    const cpuPerAnswer = async (side: Side, run: () => Promise<number>) => {
      const server = servers.get(side)!;
      // Both servers quiet first, so neither side's run shares the machine with what the other's left behind; the
      // work this run leaves behind (its spans' delivery) counted in its CPU.
      for (const each of servers.values()) await quiet(each);
      const before = await server.cpuMicros();
      const answered = await run();
      await quiet(server);
      return ((await server.cpuMicros()) - before) / answered;
    };
    const fullSpeed = (side: Side, seconds: number) => {
      let reqPerSec = 0;
      return cpuPerAnswer(side, async () => {
        const result = await autocannon({
          url: servers.get(side)!.origin,
          connections,
          duration: seconds,
          timeout: 10,
          requests: [
            { method: 'POST', path: DECORATOR_ROUTE, setupRequest: (request) => ({ ...request, headers: headers(), body: bodies.bodyFor(nextJobId++) }) },
          ],
        });
        if (result.non2xx + result.errors > 0) failures.push(`${side}: ${result.non2xx} non-2xx, ${result.errors} errors at full speed`);
        reqPerSec = result['2xx'] / result.duration;
        return result['2xx'] + result.non2xx;
      }).then((cpu) => ({ cpu, reqPerSec }));
    };

    for (const side of SIDES) await fullSpeed(side, 2);
    for (let round = 0; round < rounds; round++) {
      for (const side of round % 2 === 0 ? SIDES : [...SIDES].reverse()) {
        const { cpu, reqPerSec } = await fullSpeed(side, roundSeconds);
        figures[side].cpuMicros.push(cpu);
        figures[side].reqPerSec.push(reqPerSec);
      }
    }
    for (let round = 0; round < (latencySeconds > 0 ? rounds : 0); round++) {
      for (const side of round % 2 === 0 ? SIDES : [...SIDES].reverse()) {
        let latencies: Float64Array = new Float64Array();
        const cpu = await cpuPerAnswer(side, async () => {
          const result = await runFixedRate({
            origin: servers.get(side)!.origin,
            path: DECORATOR_ROUTE,
            ratePerSecond: rate,
            durationSeconds: latencySeconds,
            connections,
            headers,
            bodyFor: () => bodies.bodyFor(nextJobId++),
          });
          if (result.non2xx + result.errors > 0) failures.push(`${side}: ${result.non2xx} non-2xx, ${result.errors} errors at ${rate} req/s`);
          latencies = result.latenciesMs;
          return result.ok + result.non2xx;
        });
        figures[side].cpuMicrosAtRate.push(cpu);
        figures[side].p50Ms.push(percentile(latencies, 50));
        figures[side].p99Ms.push(percentile(latencies, 99));
      }
    }
  } finally {
    auth.stop();
    for (const server of servers.values()) await server.stop();
    for (const redis of redises) await redis.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(secrets.dir, { recursive: true, force: true });
  }

  const list = (values: number[], digits: number) => values.map((value) => value.toFixed(digits)).join(' ');
  const rows = [
    ['revision', 'req/s by round', 'median', 'CPU µs/pickup by round', 'median', `at ${rate}/s: CPU µs`, 'p50 ms', 'p99 ms by round', 'median p99'],
  ];
  for (const side of SIDES) {
    const f = figures[side];
    rows.push([
      `${side} (${revision[side]})`,
      list(f.reqPerSec, 0),
      median(f.reqPerSec).toFixed(0),
      list(f.cpuMicros, 0),
      median(f.cpuMicros).toFixed(0),
      f.cpuMicrosAtRate.length === 0 ? '-' : median(f.cpuMicrosAtRate).toFixed(0),
      f.p50Ms.length === 0 ? '-' : median(f.p50Ms).toFixed(2),
      list(f.p99Ms, 1),
      f.p99Ms.length === 0 ? '-' : median(f.p99Ms).toFixed(2),
    ]);
  }
  console.log('');
  printTable(rows);
  const { before, after } = figures;
  const perRound = (of: (f: SideFigures) => number[]) =>
    of(after)
      .map((value, i) => (value / of(before)[i]).toFixed(2))
      .join(' ');
  console.log(
    `\nafter/before: CPU per pickup ×${(median(after.cpuMicros) / median(before.cpuMicros)).toFixed(2)} (per round ${perRound((f) => f.cpuMicros)}), ` +
      `throughput ×${(median(after.reqPerSec) / median(before.reqPerSec)).toFixed(2)} (per round ${perRound((f) => f.reqPerSec)})` +
      (after.p99Ms.length === 0
        ? ''
        : `, CPU at ${rate}/s ×${(median(after.cpuMicrosAtRate) / median(before.cpuMicrosAtRate)).toFixed(2)}, p99 ×${(median(after.p99Ms) / median(before.p99Ms)).toFixed(2)} (per round ${perRound((f) => f.p99Ms)})`) +
      ` · load average at end ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')}`,
  );
  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

runBench(main);
