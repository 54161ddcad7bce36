import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports';
import { findPostgresBinDir, postgresUrl, PostgresServer, startPostgres } from './postgres';

const REPO_ROOT = resolve(__dirname, '..', '..');
const UNLEASH_DIR = join(REPO_ROOT, 'test', 'unleash');
const INSTALL_SCRIPT = join(REPO_ROOT, 'scripts', 'install-unleash-deps.sh');
const PROJECT = 'default';
// Loading unleash-server and migrating an empty database take seconds of CPU on a 2-core machine.
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;

/** A strategy constraint as Unleash's admin API takes it. */
export interface Constraint {
  contextName: string;
  operator: string;
  values?: string[];
  value?: string;
  inverted?: boolean;
  caseInsensitive?: boolean;
}

export interface FlexibleRollout {
  /** 0–100 */
  rollout: number;
  /** a context field name: `default`, `userId`, `sessionId`, `random`, or a custom property like `projectId` */
  stickiness: string;
  constraints?: Constraint[];
}

export interface UnleashServer {
  /** The client API base URL, what unleash-client's `url` option takes: http://127.0.0.1:<port>/api/ */
  readonly url: string;
  /** A backend (client) token for `environment`, to send as the Authorization header. */
  readonly clientToken: string;
  /** An admin token (all projects, all environments). */
  readonly adminToken: string;
  /** The environment the client token sees, where the admin helpers put strategies. */
  readonly environment: string;
  readonly port: number;
  readonly database: PostgresServer;
  /** Stops Unleash, then PostgreSQL. */
  stop(): Promise<void>;
  /** Takes Unleash away (the database stays). */
  stopUnleash(): Promise<void>;
  /** Brings Unleash back on the same port with the same database, resolving once it serves the client API. */
  startUnleash(): Promise<void>;
  /**
   * What an operator does in the UI: creates the flag in project `default` if missing, makes a single
   * flexibleRollout strategy its only strategy in `environment`, and enables it there.
   */
  upsertFlexibleRollout(flagName: string, rollout: FlexibleRollout): Promise<void>;
  /** Turns the flag on or off in `environment`. */
  setEnabled(flagName: string, enabled: boolean): Promise<void>;
}

// Whatever a crashed or interrupted test file leaves running is killed when its process exits.
const running = new Set<ChildProcess>();
process.once('exit', () => running.forEach((child) => child.kill('SIGKILL')));

/** Installs PostgreSQL and test/unleash's node_modules on a machine that has neither yet. */
function ensureInstalled(): void {
  if (existsSync(join(UNLEASH_DIR, 'node_modules', 'unleash-server', 'package.json')) && findPostgresBinDir()) return;
  const result = spawnSync('bash', [INSTALL_SCRIPT], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status !== 0) throw new Error(`${INSTALL_SCRIPT} failed (${result.signal ?? result.status})`);
}

function secret(): string {
  return randomBytes(24).toString('hex');
}

/**
 * A real Unleash (test/unleash, unleash-server 7.5.1) on a real PostgreSQL, each a plain process on a
 * free loopback port, for one test file. API tokens are created at its first start from Unleash's
 * INIT_*_API_TOKENS variables, in Unleash's `<project>:<environment>.<secret>` format.
 */
export async function startUnleashServer(): Promise<UnleashServer> {
  ensureInstalled();
  const environment = 'development';
  const adminToken = `*:*.${secret()}`;
  const clientToken = `*:${environment}.${secret()}`;
  const databasePort = await freePort();
  let port = await freePort();
  while (port === databasePort) port = await freePort();
  const databaseUrl = postgresUrl(databasePort, 'unleash');
  const origin = `http://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;

  const startUnleash = async () => {
    if (child !== undefined) throw new Error('Unleash is already running');
    let output = '';
    const keep = (chunk: string) => (output = (output + chunk).slice(-20_000)); // its last words, for errors
    const server = spawn(process.execPath, [join(UNLEASH_DIR, 'server.js')], {
      cwd: UNLEASH_DIR,
      // A clean environment: Unleash reads many variables (UNLEASH_URL, AUTH_TYPE, …) that mean
      // something else to the service under test.
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        NODE_ENV: 'production',
        DATABASE_URL: databaseUrl,
        HTTP_HOST: '127.0.0.1',
        HTTP_PORT: String(port),
        INIT_ADMIN_API_TOKENS: adminToken,
        INIT_BACKEND_API_TOKENS: clientToken,
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = server;
    running.add(server);
    server.stdout!.setEncoding('utf8').on('data', keep);
    server.stderr!.setEncoding('utf8').on('data', keep);
    let exited: string | undefined;
    server.once('exit', (code, signal) => {
      running.delete(server);
      exited = `exited (${signal ?? code})`;
      if (child === server) child = undefined;
    });
    // Ready means the client API answers our client token, not merely that the port is open.
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (exited !== undefined) throw new Error(`Unleash ${exited} before it was ready:\n${output}`);
      if (Date.now() > deadline) {
        await stopUnleash();
        throw new Error(`Unleash on ${origin} not ready within ${START_TIMEOUT_MS} ms:\n${output}`);
      }
      try {
        const response = await fetch(`${origin}/api/client/features`, { headers: { Authorization: clientToken } });
        await response.arrayBuffer();
        if (response.ok) return;
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
  };

  const stopUnleash = async () => {
    const server = child;
    child = undefined;
    if (server === undefined || server.exitCode !== null || server.signalCode !== null) return;
    await new Promise<void>((resolveStop) => {
      const timer = setTimeout(() => server.kill('SIGKILL'), STOP_TIMEOUT_MS);
      server.once('exit', () => {
        clearTimeout(timer);
        resolveStop();
      });
      server.kill('SIGTERM');
    });
  };

  const admin = async <T>(method: string, path: string, body?: unknown): Promise<T | undefined> => {
    const response = await fetch(`${origin}/api/admin${path}`, {
      method,
      headers: { Authorization: adminToken, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status === 404 && method === 'GET') return undefined;
    if (!response.ok) throw new Error(`Unleash admin API ${method} ${path}: ${response.status} ${text}`);
    return text === '' ? undefined : (JSON.parse(text) as T);
  };
  const featurePath = (flagName: string) => `/projects/${PROJECT}/features/${encodeURIComponent(flagName)}`;
  const environmentPath = (flagName: string) => `${featurePath(flagName)}/environments/${environment}`;

  const setEnabled = async (flagName: string, enabled: boolean) => {
    await admin('POST', `${environmentPath(flagName)}/${enabled ? 'on' : 'off'}`);
  };

  const upsertFlexibleRollout = async (flagName: string, { rollout, stickiness, constraints = [] }: FlexibleRollout) => {
    if (!Number.isFinite(rollout) || rollout < 0 || rollout > 100) throw new Error(`rollout ${rollout} is not 0–100`);
    if ((await admin('GET', featurePath(flagName))) === undefined) {
      await admin('POST', `/projects/${PROJECT}/features`, { name: flagName, type: 'release' });
    }
    const strategy = {
      name: 'flexibleRollout',
      constraints,
      // groupId = the flag's name, as Unleash's UI sets it: keeping it stable is what makes raising the
      // rollout keep everyone who was already in.
      parameters: { rollout: String(rollout), stickiness, groupId: flagName },
    };
    const strategiesPath = `${environmentPath(flagName)}/strategies`;
    const existing = (await admin<Array<{ id: string }>>('GET', strategiesPath)) ?? [];
    if (existing.length === 0) {
      await admin('POST', strategiesPath, strategy);
    } else {
      await admin('PUT', `${strategiesPath}/${existing[0].id}`, strategy);
      for (const extra of existing.slice(1)) await admin('DELETE', `${strategiesPath}/${extra.id}`);
    }
    // Enabled only after the strategy is in place: enabling an environment with no strategy makes
    // Unleash add its default one (100 %).
    await setEnabled(flagName, true);
  };

  // PostgreSQL and Unleash start side by side: Unleash spends the time PostgreSQL needs to come up
  // loading its code, then waits for the database (test/unleash/server.js).
  const postgresStarting = startPostgres({ database: 'unleash', port: databasePort });
  postgresStarting.catch(() => void stopUnleash()); // no point waiting for Unleash without its database
  const [postgres, unleash] = await Promise.allSettled([postgresStarting, startUnleash()]);
  if (postgres.status === 'rejected' || unleash.status === 'rejected') {
    await stopUnleash();
    if (postgres.status === 'fulfilled') await postgres.value.stop();
    throw postgres.status === 'rejected' ? postgres.reason : (unleash as PromiseRejectedResult).reason;
  }
  const database = postgres.value;

  return {
    url: `${origin}/api/`,
    clientToken,
    adminToken,
    environment,
    port,
    database,
    stop: async () => {
      await stopUnleash();
      await database.stop();
    },
    stopUnleash,
    startUnleash,
    upsertFlexibleRollout,
    setEnabled,
  };
}
