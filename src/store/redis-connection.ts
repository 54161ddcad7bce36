import Redis, { Cluster, ClusterOptions, RedisOptions } from 'ioredis';
import type { ConnectionOptions } from 'node:tls';
import { StoreConfig, storeMode } from '../config/sections/store';
import { Secrets } from '../config/secrets';

/** One connection to the store, whatever the deployment: a server (maybe Sentinel-managed) or a cluster. */
export type RedisClient = Redis | Cluster;

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

export type RedisTopology =
  | { readonly mode: 'single'; readonly url: string }
  | { readonly mode: 'sentinel'; readonly sentinels: readonly HostPort[]; readonly masterName: string }
  | { readonly mode: 'cluster'; readonly nodes: readonly HostPort[] };

export interface RedisConnectionSettings {
  readonly topology: RedisTopology;
  /** Most a command may take before it fails (and the store is reported unavailable). */
  readonly commandTimeoutMs: number;
  readonly username?: string;
  readonly password?: string;
  readonly sentinelUsername?: string;
  readonly sentinelPassword?: string;
  /** TLS to every node and sentinel; `rediss://` turns it on for a single server too. */
  readonly tls?: boolean;
  readonly tlsCa?: string;
  /**
   * Grant writes (pickups, revocations) succeed only once this many replicas acknowledge them
   * (Redis WAIT, within the command timeout); 0 answers as soon as the primary has them.
   */
  readonly waitReplicas?: number;
  /** What the connection is called in Redis' `CLIENT LIST` (CLIENT SETNAME), so an operator can tell the service's apart. */
  readonly connectionName?: string;
  /** The commands issued in one turn of the event loop are written together (`RedisStore`'s `gatherTurn`). */
  readonly gathersTurns?: boolean;
}

/**
 * What the connection reports: for metrics, a lost connection and a primary that changed; for the log,
 * when the store stops being reachable (at start included) and when it is back, once each.
 */
export interface RedisConnectionEvents {
  reconnecting(): void;
  failedOver(): void;
  unreachable?(reason: string): void;
  reachableAgain?(): void;
}

export function parseHostPort(text: string): HostPort {
  const colon = text.lastIndexOf(':');
  return { host: text.slice(0, colon).replace(/^\[(.*)\]$/, '$1'), port: Number(text.slice(colon + 1)) };
}

/** The store's Redis settings from the validated configuration, or undefined for the in-memory store. */
export function redisSettingsFrom(config: StoreConfig, secrets: Secrets): RedisConnectionSettings | undefined {
  const common = {
    commandTimeoutMs: config.commandTimeoutMs,
    waitReplicas: config.waitReplicas,
    username: config.username,
    password: secrets.redis.password,
    tls: config.tls,
    tlsCa: secrets.redis.tlsCa,
  };
  switch (storeMode(config)) {
    case 'memory':
      return undefined;
    case 'single':
      return { ...common, topology: { mode: 'single', url: config.url! } };
    case 'sentinel':
      return {
        ...common,
        topology: { mode: 'sentinel', sentinels: config.sentinels!.map(parseHostPort), masterName: config.sentinelMaster! },
        sentinelUsername: config.sentinelUsername,
        sentinelPassword: secrets.redis.sentinelPassword,
      };
    case 'cluster':
      return { ...common, topology: { mode: 'cluster', nodes: config.clusterNodes!.map(parseHostPort) } };
  }
}

/**
 * The store as an operator names it, never with a password: `memory`, the Redis URL, the sentinels with
 * their master name, or the cluster's seed nodes.
 */
export function describeStore(config: StoreConfig): string {
  switch (storeMode(config)) {
    case 'memory':
      return 'memory (this process only)';
    case 'single': {
      const url = new URL(config.url!);
      url.password = '';
      return `Redis ${url.href.replace(/\/$/, '')}`;
    }
    case 'sentinel':
      return `Redis Sentinel master ${config.sentinelMaster!} via ${config.sentinels!.join(',')}`;
    case 'cluster':
      return `Redis Cluster ${config.clusterNodes!.join(',')}`;
  }
}

/** Only what is set: an explicit `undefined` would override what a `redis://user:pass@` URL says. */
function defined<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) as Partial<T>;
}

/**
 * Options that make a Redis outage cost milliseconds, not seconds: commands fail at once while
 * disconnected instead of queueing (the decorator must answer fast, SPEC §4 "Grant"), and a hung
 * connection is cut by the command timeout. The connection itself keeps retrying in the background.
 *
 * Each command is written as it is issued. Auto-pipelining would gather a turn's commands into one write, but
 * ioredis builds a `Pipeline` for each such turn with a copy of every script command defined on the connection
 * (about thirty here): an object V8 keeps as a dictionary and promotes, so each turn left old-generation garbage
 * behind. At 1,000 pickups/s that was most of what the decorator promoted (1.8 of 2.3 MB/s with the queue-wait
 * spans' objects), a mark-compact every second or two, and a p99 at ×3 to ×10 the bare route's in the rounds where
 * one came (issue 37). With the store's calls leased in blocks, the gateway makes 0.05 store calls per export, so
 * the writes pipelining saved are few: measured side by side, the gateway forwards as fast or faster without it.
 * The pickups' connection gathers a turn's writes another way, corking its socket (`RedisStore`), which builds nothing.
 */
function nodeOptions(settings: RedisConnectionSettings): RedisOptions {
  const tls: ConnectionOptions | undefined = settings.tls === true || settings.tlsCa !== undefined ? defined({ ca: settings.tlsCa }) : undefined;
  return {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: settings.commandTimeoutMs,
    connectTimeout: Math.max(1000, settings.commandTimeoutMs),
    retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    lazyConnect: false,
    enableAutoPipelining: false,
    ...defined({ username: settings.username, password: settings.password, tls, connectionName: settings.connectionName }),
  };
}

/**
 * Opens the store's connection for its topology (SPEC §7). Sentinel: ioredis asks the sentinels for
 * the primary on every (re)connect and also drops the connection as soon as they announce
 * `+switch-master`, so a failover costs the election, not a reconnect backoff. Cluster: the slot map
 * is refreshed when a node is lost or answers MOVED; a lost node is not reconnected, its slots move.
 */
export function connectRedis(settings: RedisConnectionSettings, events?: RedisConnectionEvents): RedisClient {
  const options = nodeOptions(settings);
  const topology = settings.topology;
  let client: RedisClient;
  switch (topology.mode) {
    case 'single':
      client = new Redis(topology.url, options);
      break;
    case 'sentinel':
      client = new Redis({
        ...options,
        sentinels: topology.sentinels.map((sentinel) => ({ ...sentinel })),
        name: topology.masterName,
        role: 'master',
        failoverDetector: true,
        sentinelCommandTimeout: Math.max(500, settings.commandTimeoutMs),
        ...defined({
          sentinelUsername: settings.sentinelUsername,
          sentinelPassword: settings.sentinelPassword,
          enableTLSForSentinelMode: options.tls === undefined ? undefined : true,
          sentinelTLS: options.tls,
        }),
      });
      break;
    case 'cluster': {
      const { enableOfflineQueue: _queue, retryStrategy: _retry, ...perNode } = options;
      const clusterOptions: ClusterOptions = {
        enableOfflineQueue: false,
        enableAutoPipelining: false,
        redisOptions: perNode,
        clusterRetryStrategy: (attempt) => Math.min(100 + attempt * 100, 2000),
        retryDelayOnFailover: 100,
        retryDelayOnClusterDown: 100,
        slotsRefreshTimeout: Math.max(1000, settings.commandTimeoutMs),
      };
      client = new Cluster(
        topology.nodes.map((node) => ({ ...node })),
        clusterOptions,
      );
      break;
    }
  }
  // Errors surface through the commands that fail; without a listener ioredis prints every reconnect.
  client.on('error', () => undefined);
  if (events !== undefined) watchConnection(client, events);
  if (events?.unreachable !== undefined || events?.reachableAgain !== undefined) watchReachability(client, events);
  return client;
}

/** Node's codes for why a connection failed, in words; anything else (WRONGPASS, NOAUTH, sentinels unreachable) as Redis or ioredis said it. */
const CONNECT_FAILURES: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found',
  ETIMEDOUT: 'connect timed out',
  EHOSTUNREACH: 'host unreachable',
  ECONNRESET: 'connection reset',
};

function watchReachability(client: RedisClient, events: RedisConnectionEvents): void {
  let reachable: boolean | undefined;
  let lastFailure: string | undefined;
  const lost = (reason: string) => {
    if (reachable === false) return;
    reachable = false;
    events.unreachable?.(reason);
  };
  // A cluster also reports errors of single nodes while it still serves every slot: only a client that is
  // not ready counts.
  client.on('error', (error: NodeJS.ErrnoException) => {
    lastFailure = CONNECT_FAILURES[error.code ?? ''] ?? error.message;
    if (client.status !== 'ready') lost(lastFailure);
  });
  client.on('close', () => {
    if (reachable === true) lost(lastFailure ?? 'connection closed');
  });
  client.on('ready', () => {
    if (reachable === false) events.reachableAgain?.();
    reachable = true;
    lastFailure = undefined;
  });
}

function watchConnection(client: RedisClient, events: RedisConnectionEvents): void {
  if (client instanceof Cluster) {
    // A failover shows as a node serving slots that never did before: a promoted replica. Slot maps
    // fetched mid-failover can disagree with each other, so a changed set alone would overcount.
    let primariesSeen: Set<string> | undefined;
    client.on('refresh', () => {
      const owners = new Set(client.slots.map((slotOwners) => slotOwners?.[0]).filter((owner) => owner !== undefined));
      if (primariesSeen === undefined) primariesSeen = owners;
      for (const owner of owners) {
        if (primariesSeen.has(owner)) continue;
        primariesSeen.add(owner);
        events.failedOver();
      }
    });
    // Only connections that had worked count as lost: while a dead primary is still in the slot map
    // ioredis tries a fresh connection to it on every refresh, and each of those ends too.
    const connected = new WeakSet<Redis>();
    client.on('+node', (node: Redis) => node.once('ready', () => connected.add(node)));
    client.on('-node', (node: Redis) => {
      if (connected.has(node)) events.reconnecting();
    });
    return;
  }
  // Behind Sentinel the address of the server the connection ends up on is the primary's.
  let primary: string | undefined;
  // One lost connection, however many attempts it takes to get one back.
  let connected = false;
  client.on('reconnecting', () => {
    if (connected) events.reconnecting();
    connected = false;
  });
  client.on('ready', () => {
    connected = true;
    const now = `${client.stream.remoteAddress}:${client.stream.remotePort}`;
    if (primary !== undefined && now !== primary) events.failedOver();
    primary = now;
  });
}

/**
 * Whether the store can take writes now. A cluster is ready only when every slot has a primary
 * that answers: one lost primary makes a slice of the jobs unservable until its replica takes over.
 */
export async function pingRedis(client: RedisClient): Promise<void> {
  if (!(client instanceof Cluster)) {
    await client.ping();
    return;
  }
  if (client.status !== 'ready') throw new Error(`cluster ${client.status}`);
  const slotPrimaries = Array.from({ length: 16384 }, (_, slot): string | undefined => client.slots[slot]?.[0]);
  if (slotPrimaries.some((owner) => owner === undefined)) throw new Error('not every slot has a primary');
  const owners = new Set(slotPrimaries as string[]);
  const primaries = new Map(client.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
  await Promise.all(
    [...owners].map(async (owner) => {
      const node = primaries.get(owner);
      if (node === undefined) throw new Error(`primary ${owner} unreachable`);
      await node.ping();
    }),
  );
}
