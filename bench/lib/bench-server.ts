import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import type { SecretFiles } from '../../test/helpers/internal-api';

/** The baseline: a plain Fastify route on the same instance, parsing the same JSON body. */
export const BARE_ROUTE = '/bench/bare';
/**
 * The auth endpoint's baseline: the bare route with its successes logged as the auth endpoint's are (at
 * most once per EXPORT_SUCCESS_LOG_INTERVAL_MS), so the ratio compares the work, not the log line the
 * bare route would write on every request and the auth endpoint does not.
 */
export const BARE_SAMPLED_ROUTE = '/bench/bare-sampled';
/**
 * An extra baseline, not the target's: the bare route that also answers the request's payload re-serialized,
 * as the decorator must. What it costs above the bare route bounds the decorator's ratio from below.
 */
export const ECHO_ROUTE = '/bench/echo';
/**
 * Echo plus the decorator's store write: the same grant write (saveGrant with the traced job, and the token
 * index, in one round trip) for the request's job, with fixed digests. What the decorator with a store is bounded by.
 */
export const ECHO_STORE_ROUTE = '/bench/echo-store';
/**
 * The decorator's floor: what SPEC §4 and §10 ask of an enabled pickup (caller check, body check and validation, flag,
 * trace context, token digests, the grant write with its traced job, the queue-wait record, the capability, the
 * decorated answer written from the request's text), made by the same calls the decorator makes and nothing else.
 * What the decorator is bounded by; echo-store is the store write alone.
 */
export const FLOOR_ROUTE = '/bench/decorator-floor';
/**
 * Like every auth bound below, logged as the auth endpoint is (sampled).
 * A bare route that also makes the store round trip an auth lookup cannot skip: the grant read (the runner's rate
 * window is spent from the lease ledger's blocks, a store call per block, issue 21). What a lookup is bounded by.
 */
export const STORE_ROUTE = '/bench/bare-store';
/**
 * A bare route that also makes the two digests a reused auth decision cannot skip: the caller's JWT (to find
 * it among those already verified) and the runner credential (the decision cache's key; SPEC §4, §6: caches
 * hold digests, never tokens). What the auth endpoint on a reused decision is bounded by.
 */
export const DIGESTS_ROUTE = '/bench/bare-digests';
export const DECORATOR_ROUTE = '/internal/ci/telemetry/job_payload';

/** Messages between the bench and its server process (IPC). */
export type ToServer = { readonly type: 'cpu' } | { readonly type: 'loop' } | { readonly type: 'stop' };
export type FromServer =
  | { readonly type: 'listening'; readonly port: number }
  | { readonly type: 'cpu'; readonly micros: number }
  | { readonly type: 'loop'; readonly p99Ms: number; readonly maxMs: number; readonly gcMaxMs: number; readonly gcTotalMs: number };

export interface LoopDelay {
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly gcMaxMs: number;
  readonly gcTotalMs: number;
}

export interface BenchServer {
  readonly origin: string;
  /** The server's process id, for a bench whose load generator reads its CPU from outside (/proc). */
  readonly pid: number;
  /** CPU time (user + system) the server process has used so far, in µs. */
  cpuMicros(): Promise<number>;
  /**
   * How late the server's event loop ran since the previous call (its p99 and worst, in ms; 1 ms resolution), and
   * garbage collection's longest and total pause in that time: a request that arrives while the loop is busy waits
   * that long, so this says whether a latency tail is the server's, and whether it is the collector's.
   */
  loopDelay(): Promise<LoopDelay>;
  stop(): Promise<void>;
}

export interface BenchServerOptions {
  readonly script: string;
  readonly cwd: string;
  readonly env: Record<string, string>;
  /** The service's stdout (its pino log lines) goes here, as a container runtime would take it. */
  readonly logFile: string;
  readonly nodeArgs?: readonly string[];
  /** The one CPU the server runs on (taskset), apart from the load generator's: see pinToCpu. */
  readonly cpu?: number;
}

/**
 * What a bench server runs the service's code with, as startService gives the built service: loopback, a port it picks
 * and reports, every request logged as in production, these keys, and `root`'s flag file; `env` over it.
 */
export function benchServerEnv(root: string, secrets: SecretFiles, env: Readonly<Record<string, string>> = {}): Record<string, string> {
  return {
    HOST: '127.0.0.1',
    INTERNAL_PORT: '0',
    LOG_LEVEL: 'info',
    INTERNAL_API_SECRET_FILE: secrets.internalApiSecretFile,
    TRACE_KEY_FILE: secrets.traceKeyFile,
    FLAGS_FILE: join(root, 'config', 'flags.json'),
    ...env,
  };
}

/** The internal API plus the bare route, in its own process so it does not share the load generator's event loop. */
export async function startBenchServer(options: BenchServerOptions): Promise<BenchServer> {
  const log = openSync(options.logFile, 'a');
  let stderr = '';
  const command = [process.execPath, ...(options.nodeArgs ?? []), options.script];
  const pinned = options.cpu === undefined ? command : ['taskset', '--cpu-list', String(options.cpu), ...command];
  const child: ChildProcess = spawn(pinned[0], pinned.slice(1), {
    cwd: options.cwd,
    env: { PATH: process.env.PATH, ...options.env },
    stdio: ['ignore', log, 'pipe', 'ipc'],
  });
  closeSync(log);
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const next = <T extends FromServer['type']>(type: T, timeoutMs: number) =>
    new Promise<Extract<FromServer, { type: T }>>((resolve, reject) => {
      const onMessage = (message: FromServer) => {
        if (message.type !== type) return;
        cleanup();
        resolve(message as Extract<FromServer, { type: T }>);
      };
      const onExit = (code: number | null) => {
        cleanup();
        reject(new Error(`bench server exited (${code}) before '${type}'; stderr: ${stderr} (log: ${options.logFile})`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`bench server sent no '${type}' within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('exit', onExit);
      };
      child.on('message', onMessage);
      child.once('exit', onExit);
    });

  const send = (message: ToServer) => child.send(message);
  let listening: Extract<FromServer, { type: 'listening' }>;
  try {
    listening = await next('listening', 20_000);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return {
    origin: `http://127.0.0.1:${listening.port}`,
    pid: child.pid!,
    cpuMicros: async () => {
      const answer = next('cpu', 5000);
      send({ type: 'cpu' });
      return (await answer).micros;
    },
    loopDelay: async () => {
      const answer = next('loop', 5000);
      send({ type: 'loop' });
      const { p99Ms, maxMs, gcMaxMs, gcTotalMs } = await answer;
      return { p99Ms, maxMs, gcMaxMs, gcTotalMs };
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // A clean exit, so `--cpu-prof` gets written; killed if it hangs.
      const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      send({ type: 'stop' });
      await exited;
      clearTimeout(killer);
    },
  };
}

/** A server is quiet when it used less than this share of a core over one window; the wait ends after the most. */
export const QUIET_CPU_SHARE = 0.05;
export const QUIET_MAX_MS = 20_000;
const QUIET_WINDOW_MS = 250;

/**
 * Waits until the server has finished what earlier requests left it to do: the outbox delivering their spans, their
 * garbage collected. Routes share one process, so without it a run's tail of work lands in the run after it, which is
 * often another route's: measured that way, the bare route's p99 and CPU took the decorator's. Answers the wait in ms,
 * or undefined when the server was still busy after `maxMs`. `server` may be several processes' CPU summed, `share`
 * then theirs together.
 */
export async function quiet(server: Pick<BenchServer, 'cpuMicros'>, maxMs = QUIET_MAX_MS, share = QUIET_CPU_SHARE): Promise<number | undefined> {
  const started = performance.now();
  let before = await server.cpuMicros();
  while (performance.now() - started < maxMs) {
    await new Promise((resolve) => setTimeout(resolve, QUIET_WINDOW_MS));
    const now = await server.cpuMicros();
    if (now - before < share * QUIET_WINDOW_MS * 1000) return performance.now() - started;
    before = now;
  }
  return undefined;
}

/**
 * Pins this process (all its threads) to one CPU. On this 2-core machine the load generator and the server
 * otherwise take turns on both cores, and which of them is short of CPU changes from second to second.
 */
export function pinToCpu(cpu: number): void {
  execFileSync('taskset', ['--all-tasks', '--cpu-list', '--pid', String(cpu), String(process.pid)], { stdio: 'ignore' });
}

export function serverScript(benchDir: string): string {
  return join(benchDir, 'job-payload.server.js');
}
