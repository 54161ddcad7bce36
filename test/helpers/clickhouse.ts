import { ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { repoRoot } from '../../simulator/repo-root';

// The checkout's, found from the root: a bench runs this file compiled into build/bench, where no test/chdb is beside it.
const CHDB = join(repoRoot(), 'test', 'chdb');
const ENGINE = join(CHDB, 'engine.js');

export type ClickHouseRow = Record<string, unknown>;

export interface ClickHouse {
  /** Runs one statement or several separated by `;`, and answers the last one's rows (JSONEachRow). */
  query(sql: string): Promise<ClickHouseRow[]>;
  stop(): Promise<void>;
}

/** The same engine behind ClickHouse's HTTP interface (test/chdb/http-interface.js), for a real client. */
export interface ClickHouseOverHttp extends ClickHouse {
  /** `http://127.0.0.1:<port>`, as a ClickHouse server's port 8123. */
  readonly url: string;
  readonly password: string;
}

/**
 * A real ClickHouse engine (chdb: ClickHouse embedded as a library) in a child process with its own
 * temporary data directory, for one test file. `npm test` installs it into test/chdb.
 */
export async function startClickHouse(): Promise<ClickHouse>;
/**
 * With `http`, the engine also serves ClickHouse's HTTP interface, for one user with that password. With `niceness`,
 * the engine and every thread it starts run at that nice value (a bench that stands it in for a server on its own host).
 */
export async function startClickHouse(options: { http: { password: string }; niceness?: number }): Promise<ClickHouseOverHttp>;
export async function startClickHouse(options?: { http?: { password: string }; niceness?: number }): Promise<ClickHouse | ClickHouseOverHttp> {
  if (!existsSync(join(CHDB, 'node_modules', 'chdb', 'package.json'))) {
    throw new Error('chdb is not installed in test/chdb: run `npm test` (it installs it) or `bash scripts/install-stack-test-deps.sh`');
  }
  const command = options?.niceness === undefined ? [process.execPath, ENGINE] : ['nice', '-n', String(options.niceness), process.execPath, ENGINE];
  const child: ChildProcess = spawn(command[0], command.slice(1), {
    // DateTime64 text is read and written in UTC, as the stack's ClickHouse server runs.
    env: { PATH: process.env.PATH, TZ: 'UTC', ...(options?.http ? { CHDB_HTTP_PASSWORD: options.http.password } : {}) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const pending = new Map<number, { resolve: (rows: ClickHouseRow[]) => void; reject: (error: Error) => void }>();
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code) => {
      for (const { reject } of pending.values()) reject(new Error(`chdb engine exited with ${code}: ${stderr}`));
      pending.clear();
      resolve();
    }),
  );
  let announceHttpPort: (port: number) => void = () => undefined;
  const httpPort = new Promise<number>((resolve) => (announceHttpPort = resolve));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const answer = JSON.parse(line) as { id: number; rows?: ClickHouseRow[]; error?: string; http?: number };
    if (answer.http !== undefined) return announceHttpPort(answer.http);
    const waiter = pending.get(answer.id);
    pending.delete(answer.id);
    if (answer.error !== undefined) waiter?.reject(new Error(answer.error));
    else waiter?.resolve(answer.rows ?? []);
  });

  let nextId = 0;
  const query = (sql: string) =>
    new Promise<ClickHouseRow[]>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      child.stdin!.write(`${JSON.stringify({ id, sql })}\n`);
    });
  await query('SELECT 1');
  const engine = {
    query,
    stop: async () => {
      child.stdin?.end();
      await exited;
    },
  };
  if (options?.http === undefined) return engine;
  const port = await Promise.race([httpPort, exited.then(() => Promise.reject(new Error(`chdb engine exited: ${stderr}`)))]);
  return { ...engine, url: `http://127.0.0.1:${port}`, password: options.http.password };
}
