import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports';

const run = promisify(execFile);

const INSTALL_HINT = "run `bash scripts/install-unleash-deps.sh` (it installs Debian's postgresql)";
const READY_LINE = 'database system is ready to accept connections';
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 10_000;

export interface PostgresServer {
  /** postgres://postgres@127.0.0.1:<port>/<database>, trust auth on loopback: no password. */
  readonly url: string;
  readonly port: number;
  /** Stops the server and removes its temp dir. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * The directory holding usable initdb and postgres binaries. Debian keeps them off PATH under
 * /usr/lib/postgresql/<version>/bin (the newest wins); anything else must be on PATH.
 */
export function findPostgresBinDir(): string | undefined {
  const debian = '/usr/lib/postgresql';
  const candidates = existsSync(debian)
    ? readdirSync(debian)
        .filter((version) => /^\d+(\.\d+)?$/.test(version))
        .sort((a, b) => Number(b) - Number(a))
        .map((version) => join(debian, version, 'bin'))
    : [];
  try {
    const initdb = execFileSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' }).trim();
    if (initdb !== '') candidates.push(join(initdb, '..'));
  } catch {
    // not on PATH
  }
  return candidates.find((dir) => existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres')));
}

/**
 * PostgreSQL refuses to run as root. As root, run it as the `postgres` user Debian's package
 * creates (or `nobody` where there is none); otherwise as ourselves.
 */
function unprivilegedUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  for (const name of ['postgres', 'nobody']) {
    try {
      const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
      return { uid, gid };
    } catch {
      // no such user
    }
  }
  throw new Error('running as root, but neither a `postgres` nor a `nobody` user exists to run PostgreSQL as');
}

// Whatever a crashed or interrupted test file leaves running is killed when its process exits.
const running = new Set<() => void>();
process.once('exit', () => running.forEach((kill) => kill()));

export function postgresUrl(port: number, database: string): string {
  return `postgres://postgres@127.0.0.1:${port}/${database}`;
}

/**
 * A real PostgreSQL for one test file: initdb into a fresh temp dir, postgres on a free loopback port
 * (durability switched off: it is thrown away), one database created. Everything is removed on stop.
 * `port` fixes the port in advance, for a client started side by side that waits for the database.
 */
export async function startPostgres(options: { database?: string; port?: number } = {}): Promise<PostgresServer> {
  const database = options.database ?? 'test';
  const binDir = findPostgresBinDir();
  if (binDir === undefined) throw new Error(`no PostgreSQL server binaries (initdb, postgres) found: ${INSTALL_HINT}`);
  const user = unprivilegedUser();
  const spawnAs = user === undefined ? {} : { uid: user.uid, gid: user.gid };
  // A clean environment: nothing like PGDATA or PGPORT from the caller's shell may leak in.
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', TZ: 'UTC' };

  const dir = await mkdtemp(join(tmpdir(), 'cijt-postgres-'));
  const dataDir = join(dir, 'data');
  let child: ChildProcess | undefined;
  const killNow = () => {
    child?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  running.add(killNow);

  const stop = async () => {
    running.delete(killNow);
    const server = child;
    child = undefined;
    if (server !== undefined && server.exitCode === null && server.signalCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => server.kill('SIGKILL'), STOP_TIMEOUT_MS);
        server.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
        server.kill('SIGINT'); // "fast" shutdown: disconnects clients instead of waiting for them
      });
    }
    await rm(dir, { recursive: true, force: true });
  };

  try {
    if (user !== undefined) await chown(dir, user.uid, user.gid);
    await run(join(binDir, 'initdb'), ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync'], { env, ...spawnAs }).catch(
      (error: Error & { stderr?: string }) => {
        throw new Error(`initdb failed: ${error.stderr ?? error.message}`);
      },
    );

    // Another process may take a free port before postgres binds it: then try another one,
    // unless the caller chose the port.
    for (let attempt = 1; ; attempt++) {
      const port = options.port ?? (await freePort());
      const log: string[] = [];
      const server = spawn(
        join(binDir, 'postgres'),
        [
          '-D',
          dataDir,
          '-p',
          String(port),
          '-k',
          dir, // unix socket in our own dir, not /var/run/postgresql
          '-c',
          'listen_addresses=127.0.0.1',
          '-c',
          'fsync=off',
          '-c',
          'synchronous_commit=off',
          '-c',
          'full_page_writes=off',
        ],
        { env, stdio: ['ignore', 'ignore', 'pipe'], ...spawnAs },
      );
      child = server;
      const started = await new Promise<boolean>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`postgres did not start within ${START_TIMEOUT_MS} ms:\n${log.join('')}`)), START_TIMEOUT_MS);
        server.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
          log.push(chunk);
          if (log.join('').includes(READY_LINE)) {
            clearTimeout(timer);
            resolve(true);
          }
        });
        server.once('exit', (code, signal) => {
          clearTimeout(timer);
          const output = log.join('');
          const retry = options.port === undefined && attempt < 3;
          if (retry && /could not bind|address already in use/i.test(output)) resolve(false);
          else reject(new Error(`postgres exited (${signal ?? code}) before accepting connections:\n${output}`));
        });
      });
      if (!started) continue;
      server.stderr!.removeAllListeners('data').resume(); // keep draining its log, never read again

      await run(join(binDir, 'createdb'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', database], {
        env,
      }).catch((error: Error & { stderr?: string }) => {
        throw new Error(`createdb ${database} failed: ${error.stderr ?? error.message}`);
      });
      return { url: postgresUrl(port, database), port, stop };
    }
  } catch (error) {
    await stop();
    throw error;
  }
}
