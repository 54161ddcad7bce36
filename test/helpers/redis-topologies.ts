import Redis from 'ioredis';
import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { RedisConnectionSettings } from '../../src/store/redis-connection';
import { freePort, waitFor } from './ports';

/*
 * Real Redis deployments for the store tests (SPEC §7): one server, a Sentinel-managed primary with a
 * replica, a 3-primary/3-replica cluster. Each one runs the way operators secure them: an admin
 * password on the `default` user (replication, sentinels, redis-cli use it) and an ACL user of its own
 * for the service, limited to the `cjt:` keys, so a service that forgot its credentials, or wrote
 * outside its prefix, fails here. Optionally everything speaks TLS only, with a CA the tests make.
 */

const ADMIN_PASSWORD = 'admin-password-for-tests';
const SERVICE_USER = 'cjt';
const SERVICE_PASSWORD = 'service-password-for-tests';
const SENTINEL_PASSWORD = 'sentinel-password-for-tests';
const MASTER_NAME = 'cjt-store';
const run = promisify(execFile);

export interface RedisTls {
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
  readonly ca: string;
}

/** A throwaway CA and a server certificate for 127.0.0.1 and localhost (openssl, from Debian). */
export function makeRedisTls(dir: string): RedisTls {
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=cjt test CA', '-keyout', file('ca.key'), '-out', file('ca.crt'));
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', file('redis.key'), '-out', file('redis.csr'));
  writeFileSync(file('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  openssl(
    'x509',
    '-req',
    '-in',
    file('redis.csr'),
    '-CA',
    file('ca.crt'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    file('san.ext'),
    '-out',
    file('redis.crt'),
  );
  return { caFile: file('ca.crt'), certFile: file('redis.crt'), keyFile: file('redis.key'), ca: readFileSync(file('ca.crt'), 'utf8') };
}

export interface RedisNode {
  readonly port: number;
  /** SIGKILL: a crash, no goodbye to replicas, clients or sentinels. */
  kill(): Promise<void>;
  /** SIGSTOP / SIGCONT: a server that hangs (and its replication with it) without closing anything. */
  pause(): void;
  resume(): void;
  readonly alive: boolean;
}

export interface RedisDeployment {
  readonly mode: 'single' | 'sentinel' | 'cluster';
  /** What the service is configured with: the variables and the files they name. */
  readonly env: Record<string, string>;
  /** The same as connection settings, for tests that open the store themselves. */
  settings(commandTimeoutMs: number): RedisConnectionSettings;
  /** Runs one command as admin on a node. */
  admin(port: number, ...command: string[]): Promise<unknown>;
  /** Empties every primary. */
  flush(): Promise<void>;
  /** Resolves once every replica has received everything its primary has (asynchronous replication). */
  replicated(): Promise<void>;
  stop(): Promise<void>;
}

export interface SentinelDeployment extends RedisDeployment {
  readonly nodes: RedisNode[];
  readonly sentinelPorts: number[];
  /** Port of the server the sentinels currently call the primary. */
  primaryPort(): Promise<number>;
}

export interface ClusterDeployment extends RedisDeployment {
  readonly nodes: RedisNode[];
  /** Ports of the current primaries, by the cluster's own view. */
  primaryPorts(): Promise<number[]>;
}

function redisServerBinary(): string {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('redis-server is not installed: run `npm test` (it installs it) or `apt-get install -y redis-server`');
  }
}

class Setup {
  readonly dir = mkdtempSync(join(tmpdir(), 'cjt-redis-'));
  readonly tls?: RedisTls;
  private readonly children: ChildProcess[] = [];
  private readonly files: Record<string, string> = {};

  constructor(withTls: boolean) {
    if (withTls) this.tls = makeRedisTls(this.dir);
    this.files.password = this.write('redis-password', `${SERVICE_PASSWORD}\n`);
    this.files.sentinelPassword = this.write('sentinel-password', `${SENTINEL_PASSWORD}\n`);
  }

  write(name: string, text: string): string {
    const path = join(this.dir, name);
    writeFileSync(path, text, { mode: 0o600 });
    return path;
  }

  /** Arguments every server gets: loopback, no persistence, the admin password, the service's ACL user, TLS. */
  serverArgs(port: number): string[] {
    const listen = this.tls === undefined ? ['--port', String(port)] : ['--port', '0', '--tls-port', String(port), ...this.tlsArgs()];
    return [
      ...listen,
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--requirepass',
      ADMIN_PASSWORD,
      '--masterauth',
      ADMIN_PASSWORD,
      '--user',
      SERVICE_USER,
      'on',
      `>${SERVICE_PASSWORD}`,
      '~cjt:*',
      '+@all',
    ];
  }

  tlsArgs(): string[] {
    const tls = this.tls!;
    return [
      '--tls-cert-file',
      tls.certFile,
      '--tls-key-file',
      tls.keyFile,
      '--tls-ca-cert-file',
      tls.caFile,
      '--tls-auth-clients',
      'no',
      '--tls-replication',
      'yes',
    ];
  }

  spawn(args: string[]): ChildProcess {
    const child = spawn(redisServerBinary(), args, { stdio: 'ignore', cwd: this.dir });
    this.children.push(child);
    return child;
  }

  async startServer(port: number, extra: string[] = []): Promise<RedisNode> {
    const child = this.spawn([...this.serverArgs(port), ...extra]);
    await waitFor(`redis-server on ${port}`, async () => ((await this.admin(port, 'PING')) === 'PONG' ? true : undefined));
    return {
      port,
      get alive() {
        return child.exitCode === null && child.signalCode === null;
      },
      kill: () => kill(child),
      pause: () => void child.kill('SIGSTOP'),
      resume: () => void child.kill('SIGCONT'),
    };
  }

  connect(port: number, password = ADMIN_PASSWORD): Redis {
    return new Redis({
      host: '127.0.0.1',
      port,
      password,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 1000,
      commandTimeout: 2000,
      ...(this.tls === undefined ? {} : { tls: { ca: this.tls.ca } }),
    });
  }

  async admin(port: number, ...command: string[]): Promise<unknown> {
    return this.commandAs(ADMIN_PASSWORD, port, command);
  }

  async sentinel(port: number, ...command: string[]): Promise<unknown> {
    return this.commandAs(SENTINEL_PASSWORD, port, command);
  }

  private async commandAs(password: string, port: number, [name, ...args]: string[]): Promise<unknown> {
    const client = this.connect(port, password);
    client.on('error', () => undefined);
    try {
      await client.connect();
      return await client.call(name, ...args);
    } finally {
      client.disconnect();
    }
  }

  redisCli(...args: string[]): Promise<unknown> {
    const tls = this.tls === undefined ? [] : ['--tls', '--cacert', this.tls.caFile];
    return run('redis-cli', [...tls, '-a', ADMIN_PASSWORD, '--no-auth-warning', ...args], { timeout: 30_000 });
  }

  credentials(): { env: Record<string, string>; settings: Pick<RedisConnectionSettings, 'username' | 'password' | 'tls' | 'tlsCa'> } {
    const tls: Record<string, string> = this.tls === undefined ? {} : { REDIS_TLS: 'true', REDIS_TLS_CA_FILE: this.tls.caFile };
    return {
      env: { REDIS_USERNAME: SERVICE_USER, REDIS_PASSWORD_FILE: this.files.password, ...tls },
      settings: { username: SERVICE_USER, password: SERVICE_PASSWORD, ...(this.tls === undefined ? {} : { tls: true, tlsCa: this.tls.ca }) },
    };
  }

  get sentinelPasswordFile(): string {
    return this.files.sentinelPassword;
  }

  async stop(): Promise<void> {
    await Promise.all(this.children.map(kill));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/** One server with the service's ACL user, optionally TLS only. */
export async function startSingleRedis(options: { tls?: boolean } = {}): Promise<RedisDeployment & { readonly node: RedisNode }> {
  const setup = new Setup(options.tls === true);
  const port = await freePort();
  const node = await setup.startServer(port);
  const { env, settings } = setup.credentials();
  const url = `${setup.tls === undefined ? 'redis' : 'rediss'}://127.0.0.1:${port}`;
  return {
    mode: 'single',
    node,
    env: { REDIS_URL: url, ...env },
    settings: (commandTimeoutMs) => ({ topology: { mode: 'single', url }, commandTimeoutMs, ...settings }),
    admin: (nodePort, ...command) => setup.admin(nodePort, ...command),
    flush: async () => void (await setup.admin(port, 'FLUSHALL')),
    replicated: async () => undefined,
    stop: () => setup.stop(),
  };
}

/**
 * A primary with one replica, watched by three sentinels (quorum 2) that need a password of their
 * own. Failure detection is set to one second so a failover test takes seconds, not the default 30.
 */
export async function startSentinelRedis(options: { tls?: boolean } = {}): Promise<SentinelDeployment> {
  const setup = new Setup(options.tls === true);
  const [primaryPort, replicaPort, ...sentinelPorts] = await Promise.all(Array.from({ length: 5 }, () => freePort()));
  const nodes = [await setup.startServer(primaryPort), await setup.startServer(replicaPort, ['--replicaof', '127.0.0.1', String(primaryPort)])];
  await waitFor('replica in sync', async () =>
    /master_link_status:up/.test(String(await setup.admin(replicaPort, 'INFO', 'replication'))) ? true : undefined,
  );

  for (const port of sentinelPorts) {
    const listen = setup.tls === undefined ? [`port ${port}`] : ['port 0', `tls-port ${port}`, ...tlsConfigLines(setup.tls)];
    const config = setup.write(
      `sentinel-${port}.conf`,
      [
        ...listen,
        'bind 127.0.0.1',
        `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${MASTER_NAME} 1000`,
        `sentinel failover-timeout ${MASTER_NAME} 10000`,
        `sentinel auth-pass ${MASTER_NAME} ${ADMIN_PASSWORD}`,
        `requirepass ${SENTINEL_PASSWORD}`,
        `sentinel sentinel-pass ${SENTINEL_PASSWORD}`,
        '',
      ].join('\n'),
    );
    setup.spawn([config, '--sentinel']);
  }
  // A failover needs the sentinels to know each other and the replica first.
  await waitFor(
    'sentinels that know each other and the replica',
    async () => {
      for (const port of sentinelPorts) {
        const peers = (await setup.sentinel(port, 'SENTINEL', 'SENTINELS', MASTER_NAME)) as unknown[];
        const replicas = (await setup.sentinel(port, 'SENTINEL', 'REPLICAS', MASTER_NAME)) as unknown[];
        if (peers.length < 2 || replicas.length < 1) return undefined;
      }
      return true;
    },
    30_000,
    200,
  );

  const { env, settings } = setup.credentials();
  const sentinels = sentinelPorts.map((port) => ({ host: '127.0.0.1', port }));
  const primaryPortNow = async () => {
    const [, port] = (await setup.sentinel(sentinelPorts[0], 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', MASTER_NAME)) as [string, string];
    return Number(port);
  };
  return {
    mode: 'sentinel',
    nodes,
    sentinelPorts,
    env: {
      REDIS_SENTINELS: sentinelPorts.map((port) => `127.0.0.1:${port}`).join(','),
      REDIS_SENTINEL_MASTER: MASTER_NAME,
      REDIS_SENTINEL_PASSWORD_FILE: setup.sentinelPasswordFile,
      ...env,
    },
    settings: (commandTimeoutMs) => ({
      topology: { mode: 'sentinel', sentinels, masterName: MASTER_NAME },
      commandTimeoutMs,
      sentinelPassword: SENTINEL_PASSWORD,
      ...settings,
    }),
    primaryPort: primaryPortNow,
    admin: (port, ...command) => setup.admin(port, ...command),
    flush: async () => void (await setup.admin(await primaryPortNow(), 'FLUSHALL')),
    replicated: async () => replicasCaughtUp(setup, [await primaryPortNow()]),
    stop: () => setup.stop(),
  };
}

/** Replicas of these primaries at their primary's replication offset. */
async function replicasCaughtUp(setup: Setup, primaryPorts: number[]): Promise<void> {
  await waitFor('replicas caught up with their primaries', async () => {
    for (const port of primaryPorts) {
      const info = String(await setup.admin(port, 'INFO', 'replication'));
      const offset = /master_repl_offset:(\d+)/.exec(info)?.[1];
      const replicaOffsets = [...info.matchAll(/^slave\d+:.*offset=(\d+)/gm)].map((match) => match[1]);
      if (replicaOffsets.length === 0 || replicaOffsets.some((replicaOffset) => replicaOffset !== offset)) return undefined;
    }
    return true;
  });
}

function tlsConfigLines(tls: RedisTls): string[] {
  return [`tls-cert-file ${tls.certFile}`, `tls-key-file ${tls.keyFile}`, `tls-ca-cert-file ${tls.caFile}`, 'tls-auth-clients no', 'tls-replication yes'];
}

/**
 * Three primaries with a replica each, made by `redis-cli --cluster create`. A node that stops
 * answering for a second is failed over (`cluster-node-timeout 1000`, default 15 s).
 */
export async function startRedisCluster(options: { tls?: boolean } = {}): Promise<ClusterDeployment> {
  const setup = new Setup(options.tls === true);
  const ports = await Promise.all(Array.from({ length: 6 }, () => freePort()));
  const busPorts = await Promise.all(Array.from({ length: 6 }, () => freePort()));
  const clusterArgs = (i: number) => [
    '--cluster-enabled',
    'yes',
    '--cluster-config-file',
    join(setup.dir, `nodes-${ports[i]}.conf`),
    '--cluster-node-timeout',
    '1000',
    // Bus ports of their own: the default (port + 10000) can fall outside the port range or on a taken port.
    '--cluster-port',
    String(busPorts[i]),
    ...(setup.tls === undefined ? [] : ['--tls-cluster', 'yes']),
  ];
  const nodes = await Promise.all(ports.map((port, i) => setup.startServer(port, clusterArgs(i))));
  await setup.redisCli('--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', '1', '--cluster-yes');
  await waitFor(
    'a cluster with every slot served and every replica attached',
    async () => {
      for (const port of ports) {
        const info = String(await setup.admin(port, 'CLUSTER', 'INFO'));
        if (!/cluster_state:ok/.test(info) || !/cluster_known_nodes:6/.test(info)) return undefined;
      }
      const primaries = await clusterPrimaries(setup, ports[0]);
      for (const port of ports.filter((node) => !primaries.includes(node))) {
        if (!/master_link_status:up/.test(String(await setup.admin(port, 'INFO', 'replication')))) return undefined;
      }
      return true;
    },
    30_000,
    200,
  );

  const { env, settings } = setup.credentials();
  const alivePort = () => nodes.find((node) => node.alive)!.port;
  return {
    mode: 'cluster',
    nodes,
    env: {
      REDIS_CLUSTER_NODES: ports
        .slice(0, 3)
        .map((port) => `127.0.0.1:${port}`)
        .join(','),
      ...env,
    },
    settings: (commandTimeoutMs) => ({
      topology: { mode: 'cluster', nodes: ports.slice(0, 3).map((port) => ({ host: '127.0.0.1', port })) },
      commandTimeoutMs,
      ...settings,
    }),
    primaryPorts: () => clusterPrimaries(setup, alivePort()),
    admin: (port, ...command) => setup.admin(port, ...command),
    flush: async () => {
      for (const port of await clusterPrimaries(setup, alivePort())) await setup.admin(port, 'FLUSHALL');
    },
    replicated: async () => replicasCaughtUp(setup, await clusterPrimaries(setup, alivePort())),
    stop: () => setup.stop(),
  };
}

/** Primaries that serve slots and are not marked failed, from CLUSTER NODES. */
async function clusterPrimaries(setup: Setup, port: number): Promise<number[]> {
  const lines = String(await setup.admin(port, 'CLUSTER', 'NODES'))
    .trim()
    .split('\n');
  return lines
    .map((line) => line.split(' '))
    .filter((fields) => fields[2].includes('master') && !fields[2].includes('fail') && fields.length > 8)
    .map((fields) => Number(/:(\d+)@/.exec(fields[1])![1]));
}
