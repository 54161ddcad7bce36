import { ChildProcess, spawn } from 'node:child_process';
import type { SinkStats } from '../otlp-gateway.sink';

/** Resolves once the child has exited (at once if it has). */
export function exitOf(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Stops a child with `signal` (so its graceful shutdown and any `--cpu-prof` run), then SIGKILL after `graceMs`. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = exitOf(child);
  child.kill(signal);
  const killer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(killer);
}

/** A bench server script as its own process (so its CPU is counted apart), ready once it reports its port. */
export async function startChildServer(
  script: string,
  env: Record<string, string>,
  nodeArgs: readonly string[] = [],
): Promise<{ origin: string; pid: number; stop(): Promise<void> }> {
  let stderr = '';
  const child = spawn(process.execPath, [...nodeArgs, script], { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not start: ${stderr}`)), 10_000);
    child.once('message', (message: { type: string; port: number }) => {
      clearTimeout(timer);
      resolve(message.port);
    });
    child.once('exit', (code) => reject(new Error(`${script} exited (${code}): ${stderr}`)));
  });
  return { origin: `http://127.0.0.1:${port}`, pid: child.pid!, stop: () => stopChild(child, 'SIGTERM', 5000) };
}

/** The bytes-only OTLP sink (bench/otlp-gateway.sink.ts) as its own process. */
export interface BytesSink {
  readonly origin: string;
  readonly pid: number;
  stats(): Promise<SinkStats>;
  /** The last body of that content type the sink received. */
  last(contentType: string): Promise<{ contentType: string; contentEncoding: string; body: Buffer }>;
  stop(): Promise<void>;
}

/** `script`: the compiled otlp-gateway.sink.js beside the bench that starts it. */
export async function startBytesSink(script: string): Promise<BytesSink> {
  const { origin, pid, stop } = await startChildServer(script, {});
  return {
    origin,
    pid,
    stats: async () => (await (await fetch(`${origin}/-/stats`)).json()) as SinkStats,
    last: async (contentType) => {
      const response = await fetch(`${origin}/-/last?type=${encodeURIComponent(contentType)}`);
      return {
        contentType: response.headers.get('x-received-content-type') ?? '',
        contentEncoding: response.headers.get('x-received-content-encoding') ?? '',
        body: Buffer.from(await response.arrayBuffer()),
      };
    },
    stop,
  };
}

/**
 * What a bench started, stopped in reverse order on the way out, on Ctrl-C, or by a watchdog once `boundSeconds`
 * have passed (stopping clears it): a hung target cannot keep the bench (and its child processes) alive.
 */
export function guardedRun(boundSeconds: number): { readonly stops: Array<() => Promise<void>>; stopAll(): Promise<void> } {
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    clearTimeout(watchdog);
    for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
  };
  const watchdog: NodeJS.Timeout = setTimeout(() => {
    console.error(`\nFAILED: still running ${boundSeconds} s after start; stopping`);
    void stopAll().finally(() => process.exit(1));
  }, boundSeconds * 1000);
  watchdog.unref();
  process.once('SIGINT', () => void stopAll().finally(() => process.exit(130)));
  return { stops, stopAll };
}
