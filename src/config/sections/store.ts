import { Transform } from 'class-transformer';
import { ArrayNotEmpty, IsBoolean, IsOptional, IsUrl, Matches } from 'class-validator';
import { Integer, OptionalText, stacked, toBoolean, toList, Variable } from '../variable';

/** `host:port`, the host a name, IPv4 or bracketed IPv6 address. */
const HOST_PORT = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/;

/** Redis nodes or sentinels, comma separated, each `host:port`; unset when that topology is not used. */
const HostPorts = () => stacked(Transform(toList), IsOptional(), ArrayNotEmpty(), Matches(HOST_PORT, { each: true, message: 'each entry must be host:port' }));

/** The store (SPEC §7): in this process, or Redis as one server, Sentinel-managed or a cluster. */
export class StoreConfig {
  /** One Redis server (SPEC §7); `rediss://` for TLS. Exclusive with REDIS_SENTINELS and REDIS_CLUSTER_NODES. */
  @Variable('REDIS_URL')
  @IsOptional()
  @IsUrl(
    { require_tld: false, require_protocol: true, protocols: ['redis', 'rediss'] },
    { message: 'must be a redis:// or rediss:// (TLS) URL, e.g. redis://localhost:6379' },
  )
  readonly url?: string;

  /** Sentinel addresses (`host:port`, comma separated): the store follows the primary they elect. */
  @Variable('REDIS_SENTINELS') @HostPorts() readonly sentinels?: string[];

  /** The master name the sentinels monitor (`sentinel monitor <name> …`). */
  @Variable('REDIS_SENTINEL_MASTER') @OptionalText() readonly sentinelMaster?: string;

  /** Seed nodes of a Redis Cluster (`host:port`, comma separated); the rest is discovered. */
  @Variable('REDIS_CLUSTER_NODES') @HostPorts() readonly clusterNodes?: string[];

  /** ACL user of the store's connections (Redis 6+); unset: the `default` user. */
  @Variable('REDIS_USERNAME') @OptionalText() readonly username?: string;

  /** File holding the password of REDIS_USERNAME (or of `requirepass`), like the other secrets. */
  @Variable('REDIS_PASSWORD_FILE') @OptionalText() readonly passwordFile?: string;

  /** ACL user and password file for the sentinels themselves, when they require one. */
  @Variable('REDIS_SENTINEL_USERNAME') @OptionalText() readonly sentinelUsername?: string;

  @Variable('REDIS_SENTINEL_PASSWORD_FILE') @OptionalText() readonly sentinelPasswordFile?: string;

  /** TLS to every Redis node and sentinel; with REDIS_URL the `rediss://` scheme says the same. */
  @Variable('REDIS_TLS') @Transform(toBoolean) @IsBoolean() readonly tls: boolean = false;

  /**
   * Replicas that must have a grant write before it counts (Redis WAIT). 0: asynchronous replication,
   * where a failover can lose grants written in the last moments before the primary died.
   */
  @Variable('REDIS_WAIT_REPLICAS') @Integer({ min: 0, max: 16 }) readonly waitReplicas: number = 0;

  /**
   * How long one Redis command may take before it fails as a store outage, for every caller (decorator,
   * auth decision, gateway quotas). The decorator's own bound on a pickup is STORE_TIMEOUT_MS.
   */
  @Variable('REDIS_COMMAND_TIMEOUT_MS') @Integer({ min: 1, max: 10000 }) readonly commandTimeoutMs: number = 150;

  /** PEM file of the CA that signed the Redis servers' certificates, when it is not a public one. */
  @Variable('REDIS_TLS_CA_FILE') @OptionalText() readonly tlsCaFile?: string;
}

export type StoreMode = 'memory' | 'single' | 'sentinel' | 'cluster';

/** Where shared state lives (SPEC §7): in this process, or Redis as one server, Sentinel-managed or a cluster. */
export function storeMode(store: StoreConfig): StoreMode {
  if (store.sentinels !== undefined) return 'sentinel';
  if (store.clusterNodes !== undefined) return 'cluster';
  return store.url === undefined ? 'memory' : 'single';
}

/** The Redis variables that only make sense together: one topology, and the sentinels' settings only with sentinels. */
export function storeProblems(store: StoreConfig): string[] {
  const problems: string[] = [];
  const topologies = (
    [
      ['REDIS_URL', store.url],
      ['REDIS_SENTINELS', store.sentinels],
      ['REDIS_CLUSTER_NODES', store.clusterNodes],
    ] as const
  ).filter(([, value]) => value !== undefined);
  if (topologies.length > 1) problems.push(`${topologies[1][0]}: cannot be combined with ${topologies[0][0]} (set exactly one of them)`);
  if (store.sentinels !== undefined && store.sentinelMaster === undefined) {
    problems.push('REDIS_SENTINEL_MASTER: required with REDIS_SENTINELS (the master name the sentinels monitor)');
  }
  if (store.sentinels === undefined) {
    const sentinelOnly = [
      ['REDIS_SENTINEL_MASTER', store.sentinelMaster],
      ['REDIS_SENTINEL_USERNAME', store.sentinelUsername],
      ['REDIS_SENTINEL_PASSWORD_FILE', store.sentinelPasswordFile],
    ] as const;
    for (const [name, value] of sentinelOnly) if (value !== undefined) problems.push(`${name}: only meaningful with REDIS_SENTINELS`);
  }
  return problems;
}
