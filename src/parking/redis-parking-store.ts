import { OUTCOME_FACTS_KEY, PARKED_KEY, PARKED_SIZE_KEY, PARKING_OVERDUE_KEY, PARKING_TOTAL_KEY, TRACE_DECISION_KEY } from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { KeepReason, OutcomeFacts, ParkedEntry, ParkedKind, ParkingLimits, ParkingStore, ParkingUsage, ParkOutcome, TraceDecision } from './parking';

/**
 * Reserves an entry's bytes and spans in the budget of all traces ({parking} slot) and puts its trace in the
 * time-limit index if it is not there yet. ARGV: bytes, spans, max total bytes, trace id, due at. Answers 1,
 * or 0 with nothing changed when the total would pass its bound.
 */
const RESERVE = `
local bytes = redis.call('HINCRBY', KEYS[1], 'bytes', ARGV[1])
if bytes > tonumber(ARGV[3]) then
  redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(ARGV[1]))
  return 0
end
redis.call('HINCRBY', KEYS[1], 'spans', ARGV[2])
redis.call('ZADD', KEYS[2], 'NX', ARGV[5], ARGV[4])
return 1
`;

/** Gives reserved bytes and spans back (ARGV: bytes, spans). */
const GIVE_BACK = `
redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[1], 'spans', -tonumber(ARGV[2]))
return 1
`;

/**
 * Parks one entry in its trace's slot. KEYS: parked, size, decision. ARGV: body, kind, spans, max trace spans,
 * max trace bytes, ttl ms. Answers {'decided', decision}, {'full', limit} or {'parked'}.
 */
const PARK = `
local decision = redis.call('GET', KEYS[3])
if decision then return {'decided', decision} end
local spans = tonumber(redis.call('HGET', KEYS[2], 'spans') or '0')
local bytes = tonumber(redis.call('HGET', KEYS[2], 'bytes') or '0')
if spans + tonumber(ARGV[3]) > tonumber(ARGV[4]) then return {'full', 'trace_spans'} end
if bytes + string.len(ARGV[1]) > tonumber(ARGV[5]) then return {'full', 'trace_bytes'} end
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('HSET', KEYS[1], seq .. ':' .. ARGV[2] .. ':' .. ARGV[3], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'spans', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'bytes', string.len(ARGV[1]))
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[6]) then redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
end
return {'parked'}
`;

/** Removes entries (ARGV: field names) and answers the bytes and spans they held. KEYS: parked, size. */
const RELEASE = `
local bytes, spans = 0, 0
for _, field in ipairs(ARGV) do
  local size = redis.call('HSTRLEN', KEYS[1], field)
  if redis.call('HDEL', KEYS[1], field) == 1 then
    bytes = bytes + size
    spans = spans + tonumber(string.match(field, ':(%d+)$'))
  end
end
if bytes > 0 or spans > 0 then
  redis.call('HINCRBY', KEYS[2], 'bytes', -bytes)
  redis.call('HINCRBY', KEYS[2], 'spans', -spans)
end
return {bytes, spans}
`;

/** The first decision stands, except that a keep replaces a drop. ARGV: decision, remember ms. */
const DECIDE = `
local current = redis.call('GET', KEYS[1])
if current and (string.sub(current, 1, 5) == 'keep:' or string.sub(ARGV[1], 1, 5) == 'drop:') then return {current, 0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], 1}
`;

/** Forgets a drop decision, never a keep. */
const REOPEN = `
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 5) == 'drop:' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`;

/**
 * Adds statuses (ARGV[4..]), a queue wait (ARGV[2], ms) and the no-outcome choice (ARGV[3], unless empty) to a
 * trace's facts, kept ARGV[1] ms at least.
 */
const NOTE_FACTS = `
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'no_outcome', ARGV[3]) end
for i = 4, #ARGV do redis.call('HSET', KEYS[1], 'status:' .. ARGV[i], '1') end
local queue = tonumber(redis.call('HGET', KEYS[1], 'queue') or '0')
if tonumber(ARGV[2]) > queue then redis.call('HSET', KEYS[1], 'queue', ARGV[2]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`;

/** Hands out traces past their time limit (ARGV: now, max, lease ms), each to one caller for the lease. */
const CLAIM_OVERDUE = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), id) end
return ids
`;

interface ParkingScripts {
  cjtParkingReserve(total: string, overdue: string, bytes: string, spans: string, maxTotal: string, traceId: string, dueAt: string): Promise<number>;
  cjtParkingGiveBack(total: string, bytes: string, spans: string): Promise<number>;
  cjtPark(
    parked: string,
    size: string,
    decision: string,
    body: Buffer,
    kind: string,
    spans: string,
    maxSpans: string,
    maxBytes: string,
    ttlMs: string,
  ): Promise<string[]>;
  cjtParkingRelease(parked: string, size: string, ...fields: string[]): Promise<[number, number]>;
  cjtDecide(decision: string, value: string, rememberMs: string): Promise<[string, number]>;
  cjtReopen(decision: string): Promise<number>;
  cjtNoteFacts(facts: string, ttlMs: string, queueMs: string, whenNoOutcome: string, ...statuses: string[]): Promise<number>;
  cjtClaimOverdue(overdue: string, now: string, max: string, leaseMs: string): Promise<string[]>;
}

const encodeDecision = (decision: TraceDecision) => `${decision.keep ? 'keep' : 'drop'}:${decision.reason}`;

function decisionOf(stored: string): TraceDecision {
  const [verdict, reason] = stored.split(':');
  return verdict === 'keep' ? { keep: true, reason: reason as KeepReason } : { keep: false, reason: reason as 'outcome' | 'no_outcome' };
}

/** An entry's hash field: `<seq>:<kind>:<spans>`, so the entry says what it is without a second record. */
function entryOf(field: string, body: Buffer): ParkedEntry {
  const [, kind, spans] = field.split(':');
  return { id: field, kind: kind as ParkedKind, body, spans: Number(spans) };
}

/**
 * The parking store on Redis (SPEC §11): one hash of entries per trace, in the trace's slot, with its size
 * beside it; bodies are stored as the bytes they are (no base64), so a parked span costs its encoded size plus
 * the hash's per-field overhead. The budget of all traces is reserved before an entry is parked and given back
 * when it is refused or released: the two are in different slots, so a process that dies between them leaves
 * the total too high by one entry until it is corrected by hand (`HSET cjt:{parking}:total bytes …`); that errs
 * towards falling back to the head decision, never towards holding more than the bound.
 */
export class RedisParkingStore implements ParkingStore {
  private readonly scripts: ParkingScripts;

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtParkingReserve', { numberOfKeys: 2, lua: RESERVE });
    redis.defineCommand('cjtParkingGiveBack', { numberOfKeys: 1, lua: GIVE_BACK });
    redis.defineCommand('cjtPark', { numberOfKeys: 3, lua: PARK });
    store.writeAlone('cjtPark');
    redis.defineCommand('cjtParkingRelease', { numberOfKeys: 2, lua: RELEASE });
    redis.defineCommand('cjtDecide', { numberOfKeys: 1, lua: DECIDE });
    redis.defineCommand('cjtReopen', { numberOfKeys: 1, lua: REOPEN });
    redis.defineCommand('cjtNoteFacts', { numberOfKeys: 1, lua: NOTE_FACTS });
    redis.defineCommand('cjtClaimOverdue', { numberOfKeys: 1, lua: CLAIM_OVERDUE });
    this.scripts = redis as unknown as ParkingScripts;
  }

  async park(traceId: string, entry: { kind: ParkedKind; body: Buffer; spans: number }, limits: ParkingLimits): Promise<ParkOutcome> {
    const bytes = String(entry.body.length);
    const spans = String(entry.spans);
    const ttlMs = String(Math.max(1, Math.round(limits.holdMs + limits.rememberMs)));
    return this.store.guard(async () => {
      const dueAt = String(Date.now() + limits.holdMs);
      const reserved = await this.scripts.cjtParkingReserve(PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY, bytes, spans, String(limits.maxTotalBytes), traceId, dueAt);
      if (Number(reserved) !== 1) return { kind: 'full', limit: 'total_bytes' };
      let reply: string[];
      try {
        reply = await this.scripts.cjtPark(
          PARKED_KEY(traceId),
          PARKED_SIZE_KEY(traceId),
          TRACE_DECISION_KEY(traceId),
          entry.body,
          entry.kind,
          spans,
          String(limits.maxTraceSpans),
          String(limits.maxTraceBytes),
          ttlMs,
        );
      } catch (error) {
        await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, bytes, spans).catch(() => undefined);
        throw error;
      }
      if (reply[0] === 'parked') {
        // Acknowledged to the runner only once kept (SPEC §11): with REDIS_WAIT_REPLICAS, once replicas have it.
        await this.store.replicated(PARKED_KEY(traceId));
        return { kind: 'parked' };
      }
      await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, bytes, spans);
      return reply[0] === 'decided' ? { kind: 'decided', decision: decisionOf(reply[1]) } : { kind: 'full', limit: reply[1] as 'trace_spans' | 'trace_bytes' };
    });
  }

  async noteFacts(traceId: string, facts: Partial<OutcomeFacts>, ttlMs: number): Promise<void> {
    const queue = String(Math.max(0, Math.round(facts.longestQueueMs ?? 0)));
    await this.store.guard(() =>
      this.scripts.cjtNoteFacts(
        OUTCOME_FACTS_KEY(traceId),
        String(Math.max(1, Math.round(ttlMs))),
        queue,
        facts.whenNoOutcome ?? '',
        ...(facts.statuses ?? []),
      ),
    );
  }

  async readFacts(traceId: string): Promise<OutcomeFacts> {
    const stored = await this.store.guard(() => this.store.client.hgetall(OUTCOME_FACTS_KEY(traceId)));
    const statuses = Object.keys(stored)
      .filter((field) => field.startsWith('status:'))
      .map((field) => field.slice('status:'.length))
      .sort();
    const whenNoOutcome = stored.no_outcome === 'keep' || stored.no_outcome === 'drop' ? stored.no_outcome : undefined;
    return { statuses, longestQueueMs: Number(stored.queue ?? 0), ...(whenNoOutcome === undefined ? {} : { whenNoOutcome }) };
  }

  async decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ decision: TraceDecision; changed: boolean }> {
    const [recorded, changed] = await this.store.guard(async () => {
      const key = TRACE_DECISION_KEY(traceId);
      const reply = await this.scripts.cjtDecide(key, encodeDecision(decision), String(Math.max(1, Math.round(rememberMs))));
      await this.store.replicated(key);
      return reply;
    });
    return { decision: decisionOf(recorded), changed: Number(changed) === 1 };
  }

  async reopen(traceId: string): Promise<boolean> {
    return Number(await this.store.guard(() => this.scripts.cjtReopen(TRACE_DECISION_KEY(traceId)))) === 1;
  }

  async findDecision(traceId: string): Promise<TraceDecision | null> {
    const stored = await this.store.guard(() => this.store.client.get(TRACE_DECISION_KEY(traceId)));
    return stored === null ? null : decisionOf(stored);
  }

  async parked(traceId: string): Promise<ParkedEntry[]> {
    const stored = await this.store.guard(() => this.store.client.hgetallBuffer(PARKED_KEY(traceId)));
    return Object.entries(stored)
      .map(([field, body]) => entryOf(field, body))
      .sort((a, b) => Number(a.id.split(':')[0]) - Number(b.id.split(':')[0]));
  }

  async release(traceId: string, entryIds: readonly string[]): Promise<void> {
    if (entryIds.length === 0) return;
    await this.store.guard(async () => {
      const [bytes, spans] = await this.scripts.cjtParkingRelease(PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId), ...entryIds);
      if (Number(bytes) > 0 || Number(spans) > 0) await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, String(bytes), String(spans));
    });
  }

  async claimOverdue(max: number, leaseMs: number): Promise<string[]> {
    return this.store.guard(() => this.scripts.cjtClaimOverdue(PARKING_OVERDUE_KEY, String(Date.now()), String(max), String(Math.round(leaseMs))));
  }

  async settled(traceId: string): Promise<void> {
    await this.store.guard(() => this.store.client.zrem(PARKING_OVERDUE_KEY, traceId));
  }

  async usage(): Promise<ParkingUsage> {
    const [total, traces] = await this.store.guard(() =>
      Promise.all([this.store.client.hgetall(PARKING_TOTAL_KEY), this.store.client.zcard(PARKING_OVERDUE_KEY)]),
    );
    return { traces, spans: Math.max(0, Number(total.spans ?? 0)), bytes: Math.max(0, Number(total.bytes ?? 0)) };
  }
}
