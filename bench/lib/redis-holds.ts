import Redis from 'ioredis';
import { RedisGrantStore } from '../../src/grants/redis-grant-store';
import { RedisLimitStore } from '../../src/limits/redis-limit-store';
import { RedisOutboxStore } from '../../src/outbox/redis-outbox-store';
import { RedisParkingStore } from '../../src/outcome-sampling/parking/redis-parking-store';
import { RedisStore } from '../../src/store/redis-store';
import { RedisTracedWorkStore } from '../../src/traced-work/redis-traced-work-store';

/** The service's scripts by their digest (EVALSHA's first argument) and the name each store gives its own. */
export function scriptNames(): Map<string, string> {
  const client = new Redis({ lazyConnect: true });
  const store = new RedisStore(client);
  for (const Port of [RedisGrantStore, RedisLimitStore, RedisOutboxStore, RedisParkingStore, RedisTracedWorkStore]) new Port(store);
  const scripts = (client as unknown as { scriptsSet: Record<string, { sha: string }> }).scriptsSet;
  client.disconnect(); // never connected: it only held the definitions
  return new Map(Object.entries(scripts).map(([name, { sha }]) => [sha, name]));
}

/**
 * What held Redis up during a run: Redis runs one command at a time, so a pickup whose write arrives while a script
 * runs waits for it. Turns on Redis' slow log for every command of `thresholdUs` or more (emptied first); `summary`
 * reads it back, grouped by command (a script by its name) and first key (numbers in keys as N), most time first.
 */
export async function watchRedisHolds(url: string, thresholdUs: number): Promise<{ summary(): Promise<string[]> }> {
  const client = new Redis(url, { lazyConnect: true, enableAutoPipelining: false });
  await client.connect();
  await client.config('SET', 'slowlog-log-slower-than', String(thresholdUs));
  await client.config('SET', 'slowlog-max-len', '100000');
  await client.slowlog('RESET');
  return {
    async summary() {
      const names = scriptNames();
      try {
        const entries = (await client.slowlog('GET', 100_000)) as [number, number, number, string[]][];
        const groups = new Map<string, { count: number; totalUs: number; maxUs: number }>();
        for (const [, , durationUs, args] of entries) {
          const [command, ...rest] = args;
          const name = command.toLowerCase();
          // EVALSHA sha numkeys key…: the first key names the script's data; other commands' first argument is theirs.
          const firstKey = name === 'evalsha' || name === 'eval' ? rest[2] : rest[0];
          const script = name === 'evalsha' ? ` ${names.get(rest[0]) ?? rest[0].slice(0, 8)}` : '';
          const group = `${name}${script} ${(firstKey ?? '').replace(/\d+/g, 'N')}`.trim();
          const figures = groups.get(group) ?? { count: 0, totalUs: 0, maxUs: 0 };
          figures.count += 1;
          figures.totalUs += durationUs;
          figures.maxUs = Math.max(figures.maxUs, durationUs);
          groups.set(group, figures);
        }
        return [...groups]
          .sort(([, a], [, b]) => b.totalUs - a.totalUs)
          .map(([group, { count, totalUs, maxUs }]) => `${group}: ${count}× (mean ${Math.round(totalUs / count)} µs, max ${maxUs} µs)`);
      } finally {
        client.disconnect();
      }
    },
  };
}
