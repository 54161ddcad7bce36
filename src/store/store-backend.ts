import { RedisStore } from './redis-store';

/**
 * Where the ports keep their records (SPEC §7): this process's memory when no Redis is configured, or Redis over two
 * connections. Each port (grants, limits, traced work) is a folder with its interface, a memory and a Redis
 * implementation, and a module that picks one by this.
 *
 * `pickups` carries only what a job pickup waits on: the grant's write (with its traced job), its take-back, the
 * gateway's grant lookups, and the head decision pinned at a pipeline's first pickup. `redis` carries the rest: the
 * outbox, parking, leases, the webhooks' records. On one connection a grant's write queued behind the outbox's
 * claims, enqueues and their 100-body answers, which Node reads in order: the pickup's tail was that wait (issue 37).
 * Replies on one connection come back in the order sent, so a grant's take-back, sent on its connection after it, still
 * lands after the write it takes back; `WAIT` counts the writes of the connection it is sent on, each store's own.
 */
export type StoreBackend = { readonly kind: 'memory' } | { readonly kind: 'redis'; readonly redis: RedisStore; readonly pickups: RedisStore };
