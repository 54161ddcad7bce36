import { RedisStore } from './redis-store';

/**
 * Where the ports keep their records (SPEC §7): this process's memory when no Redis is configured, or the
 * one Redis connection they all share. Each port (grants, limits, traced work) is a folder with its
 * interface, a memory and a Redis implementation, and a module that picks one by this.
 */
export type StoreBackend = { readonly kind: 'memory' } | { readonly kind: 'redis'; readonly redis: RedisStore };
