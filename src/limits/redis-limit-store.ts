import { JOB_SPAN_LEASES_KEY, JOB_SPAN_RATE_KEY, JOB_SPANS_KEY, RATE_KEY } from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { LimitStore, SpanLease, SpanLeaseRequest, WindowBlock } from './limit-store';

/**
 * Gives back up to ARGV[1] of a counter (a window's hits, a job's quota), never below zero. DECRBY keeps
 * the key's TTL, and a key that has expired is not brought back (it would live forever without one): an
 * ended window or quota stays ended.
 */
const GIVE_BACK = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(count, tonumber(ARGV[1]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`;

/**
 * A block of a fixed window: grants min(ARGV[1], limit - count), charges it, starts the window on its first
 * charge; answers the grant and the window's time left.
 */
const TAKE_WINDOW_BLOCK = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local granted = math.max(0, math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - count))
if granted > 0 then redis.call('INCRBY', KEYS[1], granted) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 and granted > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]); ttl = tonumber(ARGV[3]) end
if ttl < 0 then ttl = tonumber(ARGV[3]) end
return {granted, ttl}
`;

/**
 * One replica's lease on a job's spans. KEYS: quota, rate, leases (hash: replica -> "unspent:expiresAt").
 * ARGV: now, leaseId, spent, quotaWanted, rateWanted, perJob, perSecond, quotaTtlMs, leaseMs.
 * Leases that ran out (their replica stopped calling: it died) are taken back from the quota first; this
 * replica's own lease is settled (what it spent stays charged) and grows by what it is granted.
 */
const LEASE_SPANS = `
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
`;

/** Ends a replica's lease: gives back min(ARGV[2], its unspent) of the quota, never below zero, keeping the TTL. */
const RETURN_SPAN_LEASE = `
local lease = redis.call('HGET', KEYS[2], ARGV[1])
if not lease then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
local amount = tonumber(string.match(lease, '^(%d+):'))
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(used, amount, tonumber(ARGV[2]))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back
`;

/** The limit scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text. */
interface LimitScripts {
  cjtGiveBack(key: string, count: string): Promise<number>;
  cjtTakeWindowBlock(key: string, wanted: string, limit: string, windowMs: string): Promise<[number, number]>;
  cjtLeaseSpans(quotaKey: string, rateKey: string, leasesKey: string, ...args: string[]): Promise<[number, number, number]>;
  cjtReturnSpanLease(quotaKey: string, leasesKey: string, leaseId: string, unspent: string): Promise<number>;
}

export class RedisLimitStore implements LimitStore {
  private readonly scripts: LimitScripts;

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtGiveBack', { numberOfKeys: 1, lua: GIVE_BACK });
    redis.defineCommand('cjtTakeWindowBlock', { numberOfKeys: 1, lua: TAKE_WINDOW_BLOCK });
    redis.defineCommand('cjtLeaseSpans', { numberOfKeys: 3, lua: LEASE_SPANS });
    redis.defineCommand('cjtReturnSpanLease', { numberOfKeys: 2, lua: RETURN_SPAN_LEASE });
    this.scripts = redis as unknown as LimitScripts;
  }

  async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock> {
    const [granted, ttl] = await this.store.guard(() => this.scripts.cjtTakeWindowBlock(RATE_KEY(key), String(wanted), String(limit), String(windowMs)));
    return { granted: Number(granted), resetInMs: Number(ttl) };
  }

  async returnWindowBlock(key: string, count: number): Promise<void> {
    if (count <= 0) return;
    await this.store.guard(() => this.scripts.cjtGiveBack(RATE_KEY(key), String(count)));
  }

  async leaseSpans(jobId: number, request: SpanLeaseRequest): Promise<SpanLease> {
    const [quotaGranted, rateGranted, rateTtl] = await this.store.guard(() =>
      this.scripts.cjtLeaseSpans(
        JOB_SPANS_KEY(jobId),
        JOB_SPAN_RATE_KEY(jobId),
        JOB_SPAN_LEASES_KEY(jobId),
        String(Date.now()),
        request.leaseId,
        String(Math.round(request.spent)),
        String(request.quotaWanted),
        String(request.rateWanted),
        String(request.limits.perJob),
        String(request.limits.perSecond),
        String(Math.max(1, Math.round(request.quotaTtlMs))),
        String(Math.max(1, Math.round(request.leaseMs))),
      ),
    );
    return { quotaGranted: Number(quotaGranted), rateGranted: Number(rateGranted), rateResetInMs: Number(rateTtl) };
  }

  async returnSpanLease(jobId: number, leaseId: string, unspent: number): Promise<void> {
    await this.store.guard(() => this.scripts.cjtReturnSpanLease(JOB_SPANS_KEY(jobId), JOB_SPAN_LEASES_KEY(jobId), leaseId, String(Math.max(0, unspent))));
  }

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    if (spans <= 0) return;
    await this.store.guard(() => this.scripts.cjtGiveBack(JOB_SPANS_KEY(jobId), String(spans)));
  }
}
