/**
 * The Ruby client's `decorate` (clients/ruby, issue 30) against a bare Ruby call to the service's bare route, both
 * from one Ruby thread, one call after another, in the same run: p50 and p99 of each and their ratios. An extra
 * baseline, labelled as such, is the same bare Ruby call to the decorator route (the service's whole work, none
 * of the client's): client / bare-decorator is what the client itself adds (its deadline, pool, breaker and
 * answer checks). Last, the time a call takes while the breaker is open (no call is made).
 *
 * Run (builds itself, incrementally, into node_modules/.cache; needs ruby on PATH, which `npm test` installs):
 *
 *   npm run -s bench:ruby-client
 *   npm run -s bench:ruby-client -- --rounds 1 --calls 50 --warmup 10   (a quick check that it still runs)
 *
 * Options: --rounds 3  --calls 2000 (per way and round)  --warmup 300  --deadline 0.05 (the client's, seconds)
 *
 * The server is bench/job-payload.server.ts (the internal API built as src/main.ts builds it, with the bare
 * route beside it), in-memory store, LOG_LEVEL info with stdout to a file, flags from config/flags.json (every
 * job enabled). The machine is shared and noisy: only the ratios, measured side by side, mean anything; rounds
 * alternate the order of the ways. Exits 1 when a call was not answered 200 or a decorate call was not decorated
 * for any reason but its deadline (calls past the deadline are counted and shown: on a loaded machine they are
 * the client doing its job).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { makeSecretFiles } from '../test/helpers/internal-api';
import { freePort } from '../test/helpers/ports';
import { repositoryRoot, runBench } from './lib/bench-env';
import { BenchServer, serverScript, startBenchServer } from './lib/bench-server';
import { jobPayloadBodies } from './lib/job-payload-body';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';

type Way = 'bare' | 'bare-decorator' | 'client' | 'breaker-open';
const WAYS: readonly Way[] = ['bare', 'bare-decorator', 'client'];
const LABELS: Record<Way, string> = {
  bare: 'bare Ruby call, bare route (baseline)',
  'bare-decorator': 'bare Ruby call, decorator (extra baseline)',
  client: 'client.decorate',
  'breaker-open': 'client.decorate, breaker open',
};
/** Distinct jobs the calls cycle through; decorating a job again is the same work (SPEC §4 keeps its grant). */
const JOBS = 500;

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    calls: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '300' },
    deadline: { type: 'string', default: '0.05' },
  },
});

type RubyLine = { way: Way; round: number; samples_ms: number[] } | { outcomes: Record<string, number> };

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
  const root = repositoryRoot(__dirname);
  const work = mkdtempSync(join(tmpdir(), 'cjt-ruby-client-bench-'));
  const secrets = makeSecretFiles();
  const bodies = jobPayloadBodies();
  const bodiesFile = join(work, 'requests.json');
  writeFileSync(bodiesFile, `[${Array.from({ length: JOBS }, (_, i) => bodies.bodyFor(2_000_000 + i)).join(',')}]`);
  let server: BenchServer | undefined;
  try {
    server = await startBenchServer({
      script: serverScript(__dirname),
      cwd: root,
      logFile: join(work, 'service.log'),
      env: {
        HOST: '127.0.0.1',
        INTERNAL_PORT: '0',
        LOG_LEVEL: 'info',
        INTERNAL_API_SECRET_FILE: secrets.internalApiSecretFile,
        TRACE_KEY_FILE: secrets.traceKeyFile,
        FLAGS_FILE: join(root, 'config', 'flags.json'),
      },
    });
    console.log('Ruby client decorate vs a bare Ruby call, same Ruby process, same server (ratios are the result; absolute numbers are noise)');
    console.log(
      `${cpus().length} CPUs, load ${loadavg()
        .map((load) => load.toFixed(2))
        .join(' ')}; ${args.rounds} rounds × ${args.calls} calls per way, one thread; request ${bodies.bytes} bytes; client deadline ${args.deadline} s`,
    );
    const lines = await runRuby(root, {
      BENCH_ORIGIN: server.origin,
      BENCH_DOWN_URL: `http://127.0.0.1:${await freePort()}`,
      BENCH_SECRET_FILE: secrets.internalApiSecretFile,
      BENCH_BODIES_FILE: bodiesFile,
      BENCH_CALLS: args.calls,
      BENCH_ROUNDS: args.rounds,
      BENCH_WARMUP: args.warmup,
      BENCH_DEADLINE: args.deadline,
    });

    // Per way: the median over rounds of each round's p50 and p99.
    const rounds = new Map<Way, { p50: number[]; p99: number[] }>();
    let outcomes: Record<string, number> = {};
    for (const line of lines) {
      if ('outcomes' in line) {
        outcomes = line.outcomes;
        continue;
      }
      const figures = rounds.get(line.way) ?? { p50: [], p99: [] };
      figures.p50.push(percentile(line.samples_ms, 50));
      figures.p99.push(percentile(line.samples_ms, 99));
      rounds.set(line.way, figures);
    }
    const p = (way: Way, which: 'p50' | 'p99') => median(rounds.get(way)![which]);
    const rows = [['way', 'p50', 'p99', 'p50 / bare', 'p99 / bare', 'p50 / bare-decorator', 'p99 / bare-decorator']];
    for (const way of [...WAYS, 'breaker-open' as const]) {
      rows.push([
        LABELS[way],
        ms(p(way, 'p50')),
        ms(p(way, 'p99')),
        (p(way, 'p50') / p('bare', 'p50')).toFixed(2),
        (p(way, 'p99') / p('bare', 'p99')).toFixed(2),
        (p(way, 'p50') / p('bare-decorator', 'p50')).toFixed(3),
        (p(way, 'p99') / p('bare-decorator', 'p99')).toFixed(3),
      ]);
    }
    printTable(rows);
    console.log(`client outcomes: ${JSON.stringify(outcomes)}`);
    const notDecorated = Object.entries(outcomes).filter(([outcome]) => outcome !== 'decorated' && outcome !== 'timeout');
    if (notDecorated.length > 0) {
      console.error(`client calls not decorated: ${JSON.stringify(Object.fromEntries(notDecorated))}`);
      process.exitCode = 1;
    }
  } finally {
    await server?.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

runBench(main);
