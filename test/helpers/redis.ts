import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from './ports';

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** The running redis-server's pid (benches read its CPU from /proc); undefined while stopped. */
  readonly pid: number | undefined;
  stop(): Promise<void>;
  /** Starts it again on the same port (data is kept only when started `persistent`). */
  start(): Promise<void>;
  /** Empties it, so tests sharing one server do not see each other's keys. */
  flush(): Promise<void>;
}

function redisBinary(): string {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('redis-server is not installed: run `npm test` (it installs it) or `apt-get install -y redis-server`');
  }
}

function answersPing(port: number): Promise<boolean | undefined> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG') ? true : undefined);
    });
    socket.once('error', () => resolve(undefined));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(undefined);
    });
  });
}

/**
 * A real redis-server on a free loopback port, for one test file. No persistence, unless `persistent`: then
 * every write is in its append-only file before it is acknowledged, so a stop and start keeps the data, as a
 * failover to a replica or a restart of a persistent primary does.
 */
export async function startRedis(options: { persistent?: boolean } = {}): Promise<RedisServer> {
  const binary = redisBinary();
  const port = await freePort();
  let child: ChildProcess | undefined;
  const persistence = options.persistent
    ? ['--dir', mkdtempSync(join(tmpdir(), 'cjt-redis-')), '--appendonly', 'yes', '--appendfsync', 'always']
    : ['--appendonly', 'no'];

  const start = async () => {
    child = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...persistence], {
      stdio: 'ignore',
    });
    await waitFor(`redis-server on ${port}`, () => answersPing(port));
  };
  const stop = async () => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once('exit', () => resolve());
      running.kill('SIGKILL');
    });
  };

  const flush = () =>
    new Promise<void>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.write('FLUSHALL\r\n'));
      socket.once('data', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', reject);
    });

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get pid() {
      return child?.pid;
    },
    start,
    stop,
    flush,
  };
}
