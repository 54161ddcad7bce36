import { luaScript } from '../store/redis-scripts';

/** The limit store's scripts (redis-limit-store.ts); each reads and changes a counter in one step, so callers that cross never pass its bound. */
export const LIMIT_SCRIPTS = {
  /**
   * Gives back up to an amount of a counter (a window's hits, a job's quota), never below zero. DECRBY keeps the key's
   * TTL, and a key that has expired is not brought back (it would live forever without one): an ended window or quota
   * stays ended.
   */
  giveBack: luaScript<[counter: string], [amount: number], number>({
    keys: 1,
    lua: `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(count, tonumber(ARGV[1]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`,
  }),

  /**
   * Takes a block of a fixed window: grants min(wanted, limit - count), charges it, starts the window on its first
   * charge; answers the grant and the window's time left.
   */
  takeWindowBlock: luaScript<[window: string], [wanted: number, limit: number, windowMs: number], [granted: number, ttlMs: number]>({
    keys: 1,
    lua: `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local granted = math.max(0, math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - count))
if granted > 0 then redis.call('INCRBY', KEYS[1], granted) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 and granted > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]); ttl = tonumber(ARGV[3]) end
if ttl < 0 then ttl = tonumber(ARGV[3]) end
return {granted, ttl}
`,
  }),

  /**
   * One replica's lease on a job's spans (leases: a hash of replica -> "unspent:expiresAt"). Leases that ran out (their
   * replica stopped calling: it died) are taken back from the quota first; this replica's own lease is settled (what it
   * spent stays charged) and grows by what it is granted. Answers the quota and rate granted and the rate's time left.
   */
  leaseSpans: luaScript<
    [quota: string, rate: string, leases: string],
    [
      now: number,
      leaseId: string,
      spent: number,
      quotaWanted: number,
      rateWanted: number,
      perJob: number,
      perSecond: number,
      quotaTtlMs: number,
      leaseMs: number,
    ],
    [quotaGranted: number, rateGranted: number, rateTtlMs: number]
  >({
    keys: 3,
    lua: `
local now = tonumber(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local own = 0
local leases = redis.call('HGETALL', KEYS[3])
for i = 1, #leases, 2 do
  local amount, expiresAt = string.match(leases[i + 1], '^(%d+):(%d+)$')
  if tonumber(expiresAt) <= now then
    used = math.max(0, used - tonumber(amount))
    redis.call('HDEL', KEYS[3], leases[i])
  elseif leases[i] == ARGV[2] then
    own = tonumber(amount)
  end
end
own = math.max(0, own - tonumber(ARGV[3]))
local quotaGranted = math.max(0, math.min(tonumber(ARGV[4]), tonumber(ARGV[6]) - used))
used = used + quotaGranted
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[1], used, 'KEEPTTL')
elseif used > 0 then
  redis.call('SET', KEYS[1], used, 'PX', ARGV[8])
end
own = own + quotaGranted
if own > 0 then
  redis.call('HSET', KEYS[3], ARGV[2], own .. ':' .. (now + tonumber(ARGV[9])))
  if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], ARGV[8]) end
else
  redis.call('HDEL', KEYS[3], ARGV[2])
end
local sent = tonumber(redis.call('GET', KEYS[2]) or '0')
local rateGranted = math.max(0, math.min(tonumber(ARGV[5]), tonumber(ARGV[7]) - sent))
if rateGranted > 0 then
  redis.call('INCRBY', KEYS[2], rateGranted)
  if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], 1000) end
end
local rateTtl = redis.call('PTTL', KEYS[2])
if rateTtl < 0 then rateTtl = 1000 end
return {quotaGranted, rateGranted, rateTtl}
`,
  }),

  /** Ends a replica's lease: gives back min(unspent, its lease's unspent) of the quota, never below zero, keeping the TTL. */
  returnSpanLease: luaScript<[quota: string, leases: string], [leaseId: string, unspent: number], number>({
    keys: 2,
    lua: `
local lease = redis.call('HGET', KEYS[2], ARGV[1])
if not lease then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
local amount = tonumber(string.match(lease, '^(%d+):'))
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(used, amount, tonumber(ARGV[2]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`,
  }),
};
