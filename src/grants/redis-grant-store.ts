import Redis, { RedisOptions } from 'ioredis';
import { Grant, GrantStore, StoreUnavailableError } from './grant';

const GRANT_KEY_PREFIX = 'cjt:grant:';

/**
 * Connection options that make a Redis outage cost milliseconds, not seconds: commands fail at once
 * while disconnected instead of queueing (the decorator must answer fast, SPEC §4 "Grant"), and a
 * hung connection is cut by the command timeout. The connection itself keeps retrying in the background.
 */
export function redisOptions(commandTimeoutMs: number): RedisOptions {
  return {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: commandTimeoutMs,
    connectTimeout: Math.max(1000, commandTimeoutMs),
    retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    lazyConnect: false,
  };
}

export class RedisGrantStore implements GrantStore {
  constructor(private readonly redis: Redis) {}

  /**
   * Connects, waiting at most `startWaitMs` for the first connection so the first pickups after a
   * start find Redis ready. Redis being down is not fatal: the service starts, reports not ready,
   * answers `degraded`, and ioredis keeps reconnecting.
   */
  static async open(url: string, commandTimeoutMs: number, startWaitMs = 2000): Promise<RedisGrantStore> {
    const redis = new Redis(url, redisOptions(commandTimeoutMs));
    // Errors surface through the commands that fail; without a listener ioredis prints every reconnect.
    redis.on('error', () => undefined);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, startWaitMs);
      redis.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    return new RedisGrantStore(redis);
  }

  async saveGrant(grant: Grant): Promise<void> {
    const ttlMs = grant.expiresAt - Date.now();
    try {
      if (ttlMs <= 0) await this.redis.del(GRANT_KEY_PREFIX + grant.jobId);
      else await this.redis.set(GRANT_KEY_PREFIX + grant.jobId, JSON.stringify(grant), 'PX', ttlMs);
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  async findGrant(jobId: number): Promise<Grant | null> {
    let stored: string | null;
    try {
      stored = await this.redis.get(GRANT_KEY_PREFIX + jobId);
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
    return stored === null ? null : (JSON.parse(stored) as Grant);
  }

  async ping(): Promise<void> {
    try {
      await this.redis.ping();
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
