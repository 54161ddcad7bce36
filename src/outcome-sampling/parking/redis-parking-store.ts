import {
  OUTCOME_FACTS_KEY,
  PARKED_KEY,
  PIPELINE_JOB_STATUSES_KEY,
  PARKED_SIZE_KEY,
  PARKING_OVERDUE_KEY,
  PARKING_TAKE_BACK_KEY,
  PARKING_TOTAL_KEY,
  TRACE_DECISION_KEY,
} from '../../store/redis-keys';
import { RedisStore } from '../../store/redis-store';
import {
  FactsUpdate,
  KeepReason,
  OutcomeFacts,
  ParkedEntry,
  ParkedEntryId,
  parkedDigest,
  parkedEntryId,
  parsedEntryId,
  ParkedKind,
  ParkingLimits,
  ParkingStore,
  ParkingUsage,
  ParkOutcome,
  RootOutcome,
  TraceDecision,
} from './parking';
import { JoinedPark, JoinedParks } from './joined-parks';
import { packedBody, unpackedBody } from './packed-body';

/**
 * What one parking transaction carries at most. Redis runs it whole, and every other command (a pickup's grant) waits
 * behind it: the bytes bound the bodies' writes (about 20 µs for each 46 KiB export), the entries the script's work
 * for a run of small ones (the control plane's spans).
 */
const JOINED_PARKS_LIMITS = { maxEntries: 16, maxBytes: 128 * 1024 };

/*
 * The budget of all traces ({parking} slot) counts what each trace reserved in a field of its own beside the total
 * (`b:<trace>`, `s:<trace>`). Reserving and parking are in different slots, so a process that dies between them, or
 * an answer lost to a timeout, can leave a reservation with nothing parked behind it; when the trace is finished
 * (delivered, or dropped) its whole reservation is given back, whatever happened in between. So the total counts
 * exactly what is parked once every trace in the time-limit index has ended, and never only ever rises.
 */

/**
 * Reserves an entry's bytes and spans in the budget of all traces, or answers 0 with nothing changed when the total
 * would pass its bound; the first reservation of a trace puts it in the time-limit index. Expects locals totalKey,
 * overdueKey and rBytes, rSpans, rMax (-1: exempt from the bound), rTrace, rDue.
 */
const RESERVE_STEP = `
local total = tonumber(redis.call('HGET', totalKey, 'bytes') or '0')
if tonumber(rMax) >= 0 and total + tonumber(rBytes) > tonumber(rMax) then return 0 end
redis.call('HINCRBY', totalKey, 'bytes', rBytes)
redis.call('HINCRBY', totalKey, 'spans', rSpans)
redis.call('HINCRBY', totalKey, 'b:' .. rTrace, rBytes)
redis.call('HINCRBY', totalKey, 's:' .. rTrace, rSpans)
redis.call('ZADD', overdueKey, 'NX', rDue, rTrace)
return 1
`;

/** KEYS: total, overdue. ARGV: bytes, spans, max total bytes (-1: exempt), trace id, due at. Answers 1, or 0 (full). */
const RESERVE = `
local totalKey, overdueKey = KEYS[1], KEYS[2]
local rBytes, rSpans, rMax, rTrace, rDue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local function reserve()
${RESERVE_STEP}
end
return reserve()
`;

/*
 * Amounts are given back as `0 - n`, never `-n`: Lua's -0 reaches Redis as "-0", which HINCRBY refuses as "not an
 * integer" (an export whose spans were all rejected parks with 0 spans).
 */

/** Gives part of a trace's reservation back (ARGV: trace id, bytes, spans). KEYS: total. */
const GIVE_BACK = `
redis.call('HINCRBY', KEYS[1], 'bytes', 0 - tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'spans', 0 - tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 'b:' .. ARGV[1], 0 - tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 's:' .. ARGV[1], 0 - tonumber(ARGV[3]))
return 1
`;

/** The trace has ended: it leaves the index and all it still has reserved is given back. KEYS: total, overdue. ARGV: trace id. */
const FINISH = `
local bytes = tonumber(redis.call('HGET', KEYS[1], 'b:' .. ARGV[1]) or '0')
local spans = tonumber(redis.call('HGET', KEYS[1], 's:' .. ARGV[1]) or '0')
redis.call('HINCRBY', KEYS[1], 'bytes', 0 - bytes)
redis.call('HINCRBY', KEYS[1], 'spans', 0 - spans)
redis.call('HDEL', KEYS[1], 'b:' .. ARGV[1], 's:' .. ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`;

/**
 * Reads an entry's field (`<digest>:<kind>:<spans>:<bytes>`, parkedEntryId): its spans, and the bytes it holds as they
 * would be forwarded (nil for a field written before the bytes were in it).
 */
const FIELD_READERS = `
local function fieldSpans(field) return tonumber(string.match(field, '^[^:]+:[^:]+:(%d+)')) end
local function fieldBytes(field) return tonumber(string.match(field, '^[^:]+:[^:]+:%d+:(%d+)')) end
`;

/**
 * An entry's checks in its trace's slot (answers {'decided', decision}, {'exists'} or {'full', limit}). Expect locals
 * parkedKey, sizeKey, decisionKey, pField, pLength (the body's bytes), pSpans, pMaxSpans (-1: exempt), pMaxBytes, and
 * a function parkedBefore(): whether the entry is parked already.
 */
const PARK_CHECKS = `
local decision = redis.call('GET', decisionKey)
if decision then return {'decided', decision} end
if parkedBefore() then return {'exists'} end
if tonumber(pMaxSpans) >= 0 then
  local spans = tonumber(redis.call('HGET', sizeKey, 'spans') or '0')
  local bytes = tonumber(redis.call('HGET', sizeKey, 'bytes') or '0')
  if spans + tonumber(pSpans) > tonumber(pMaxSpans) then return {'full', 'trace_spans'} end
  if bytes + pLength > tonumber(pMaxBytes) then return {'full', 'trace_bytes'} end
end
`;
/** Counts a parked entry in its trace's size, kept pTtl at least. */
const PARK_COUNT = `
redis.call('HINCRBY', sizeKey, 'spans', pSpans)
redis.call('HINCRBY', sizeKey, 'bytes', pLength)
if redis.call('PTTL', sizeKey) < tonumber(pTtl) then redis.call('PEXPIRE', sizeKey, pTtl) end
`;

/**
 * On a cluster, after a reservation (RESERVE) in the budget's slot: checks and parks one entry, its body passed in.
 * KEYS parked, size, decision; ARGV body, field, spans, max trace spans, max trace bytes, ttl ms.
 */
const PARK = `
local parkedKey, sizeKey, decisionKey = KEYS[1], KEYS[2], KEYS[3]
local pBody, pField, pSpans, pMaxSpans, pMaxBytes, pTtl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
${FIELD_READERS}
-- The bytes as forwarded (the field says them), not the body's: it may be packed (packed-body.ts).
local pLength = fieldBytes(pField)
local function parkedBefore() return redis.call('HEXISTS', parkedKey, pField) == 1 end
${PARK_CHECKS}
redis.call('HSET', parkedKey, pField, pBody)
if redis.call('PTTL', parkedKey) < tonumber(pTtl) then redis.call('PEXPIRE', parkedKey, pTtl) end
${PARK_COUNT}
return {'parked'}
`;

/** What PARK_MANY takes of each entry: field, bytes, spans, max trace spans, max trace bytes, ttl ms, then RESERVE's (max total bytes, trace id, due at). */
const PARK_MANY_ARGS = 9;
/** Where an entry's field and ttl are among its PARK_MANY arguments (PARKED_SETTLE takes them too). */
const PARK_MANY_FIELD = 0;
const PARK_MANY_TTL = 5;

/**
 * Outside a cluster, where every key is one server's, several entries are parked in one transaction: PARK_MANY, the
 * bodies' HSETs, PARKED_SETTLE. A body goes to Redis as a plain command's argument, never into a script: a 46 KiB
 * body passed to a script cost Redis about 100 µs (copied into Lua and out again) against 20 µs for HSET.
 *
 * PARK_MANY checks, reserves and counts each entry in order, as single parks one after another would, and answers one
 * reply an entry (a full total is {'full', 'total_bytes'}). An entry refused whose field holds no body yet is listed
 * in the take-back key, for PARKED_SETTLE to remove the body the HSET after it writes. KEYS: total, overdue, take-back,
 * then parked, size, decision of each entry; ARGV: PARK_MANY_ARGS an entry.
 */
const PARK_MANY = `
local totalKey, overdueKey, takeBackKey = KEYS[1], KEYS[2], KEYS[3]
local accepted = {}
local function reserve(rBytes, rSpans, rMax, rTrace, rDue)
${RESERVE_STEP}
end
local function park(parkedKey, sizeKey, decisionKey, pField, pLength, pSpans, pMaxSpans, pMaxBytes, pTtl, rMax, rTrace, rDue)
  pLength = tonumber(pLength)
  local function parkedBefore() return accepted[parkedKey .. ' ' .. pField] or redis.call('HEXISTS', parkedKey, pField) == 1 end
${PARK_CHECKS}
  if reserve(pLength, pSpans, rMax, rTrace, rDue) == 0 then return {'full', 'total_bytes'} end
${PARK_COUNT}
  return {'parked'}
end
local replies = {}
for i = 0, (#KEYS - 3) / 3 - 1 do
  local k, a = 3 + 3 * i, ${PARK_MANY_ARGS} * i
  local parkedKey, field = KEYS[k + 1], ARGV[a + 1]
  local reply = park(parkedKey, KEYS[k + 2], KEYS[k + 3], unpack(ARGV, a + 1, a + ${PARK_MANY_ARGS}))
  local key = parkedKey .. ' ' .. field
  if reply[1] == 'parked' or reply[1] == 'exists' then accepted[key] = true
  elseif not accepted[key] and redis.call('HEXISTS', parkedKey, field) == 0 then redis.call('RPUSH', takeBackKey, i) end
  replies[i + 1] = reply
end
return replies
`;

/**
 * After the bodies' HSETs: removes the bodies PARK_MANY listed (by entry index) and keeps every parked hash the time
 * asked at least (also one whose PARK_MANY failed, so that no body is left without a time limit). KEYS: take-back,
 * then each entry's parked hash; ARGV: ttl ms, then each entry's field.
 */
const PARKED_SETTLE = `
for _, i in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('HDEL', KEYS[2 + tonumber(i)], ARGV[2 + tonumber(i)])
end
redis.call('DEL', KEYS[1])
for i = 2, #KEYS do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
end
return 1
`;

/**
 * Removes entries (ARGV: fields) and answers the bytes and spans they held. KEYS: parked, size. An entry's bytes are
 * the ones its field says (`<digest>:<kind>:<spans>:<bytes>`, parkedEntryId), as they would be forwarded and as they
 * were counted, whether its body is stored packed or plain; a field written before the bytes were in it holds a body
 * never packed, whose length they are.
 */
const RELEASE = `
${FIELD_READERS}
local bytes, spans = 0, 0
for _, field in ipairs(ARGV) do
  local size = fieldBytes(field) or redis.call('HSTRLEN', KEYS[1], field)
  if redis.call('HDEL', KEYS[1], field) == 1 then
    bytes = bytes + size
    spans = spans + fieldSpans(field)
  end
end
if bytes > 0 or spans > 0 then
  redis.call('HINCRBY', KEYS[2], 'bytes', 0 - bytes)
  redis.call('HINCRBY', KEYS[2], 'spans', 0 - spans)
end
return {bytes, spans}
`;

/** The first decision stands. ARGV: decision, remember ms. */
const DECIDE = `
local current = redis.call('GET', KEYS[1])
if current then return {current, 0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], 1}
`;

/**
 * The pipeline runs again: forgets a drop (never a keep) and the root's end. KEYS: decision, facts. Answers 1 when a
 * drop was forgotten, 0 when a keep stands, 2 when there was no decision.
 */
const REOPEN = `
redis.call('HDEL', KEYS[2], 'root_end')
local current = redis.call('GET', KEYS[1])
if not current then return 2 end
if string.sub(current, 1, 5) == 'drop:' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`;

/**
 * Adds to a trace's facts. KEYS: facts. ARGV: ttl ms, queue ms, no-outcome choice ('' none), root end (JSON; '' leave,
 * '-' forget), then field/value pairs: a value '' deletes the field.
 */
const NOTE_FACTS = `
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'no_outcome', ARGV[3]) end
if ARGV[4] == '-' then redis.call('HDEL', KEYS[1], 'root_end') elseif ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'root_end', ARGV[4]) end
for i = 5, #ARGV, 2 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i]) else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
local queue = tonumber(redis.call('HGET', KEYS[1], 'queue') or '0')
if tonumber(ARGV[2]) > queue then redis.call('HSET', KEYS[1], 'queue', ARGV[2]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`;

/** Adds statuses to a pipeline's set (KEYS: the set; ARGV: ttl ms, statuses…), its time only ever lengthened. */
const NOTE_STATUSES = `
redis.call('SADD', KEYS[1], unpack(ARGV, 2))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`;

/** Hands out traces that are due (ARGV: now, max, lease ms), each to one caller for the lease. */
const CLAIM_OVERDUE = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), id) end
return ids
`;

interface ParkingScripts {
  cjtParkingReserve(total: string, overdue: string, bytes: string, spans: string, maxTotal: string, traceId: string, dueAt: string): Promise<number>;
  cjtParkingGiveBack(total: string, traceId: string, bytes: string, spans: string): Promise<number>;
  cjtParkingFinish(total: string, overdue: string, traceId: string): Promise<number>;
  cjtPark(
    parked: string,
    size: string,
    decision: string,
    body: Buffer,
    field: string,
    spans: string,
    maxSpans: string,
    maxBytes: string,
    ttlMs: string,
  ): Promise<string[]>;
  cjtParkingRelease(parked: string, size: string, ...fields: string[]): Promise<[number, number]>;
  cjtDecide(decision: string, value: string, rememberMs: string): Promise<[string, number]>;
  cjtReopen(decision: string, facts: string): Promise<number>;
  cjtNoteFacts(facts: string, ttlMs: string, queueMs: string, whenNoOutcome: string, rootEnd: string, ...fieldsAndValues: string[]): Promise<number>;
  cjtNoteStatuses(statuses: string, ttlMs: string, ...seen: string[]): Promise<number>;
  cjtClaimOverdue(overdue: string, now: string, max: string, leaseMs: string): Promise<string[]>;
}

const encodeDecision = (decision: TraceDecision) => `${decision.keep ? 'keep' : 'drop'}:${decision.reason}`;

function decisionOf(stored: string): TraceDecision {
  const [verdict, reason] = stored.split(':');
  return verdict === 'keep' ? { keep: true, reason: reason as KeepReason } : { keep: false, reason: reason as 'outcome' | 'no_outcome' };
}

/**
 * The parking store on Redis (SPEC §11): one hash of entries per trace, in the trace's slot, with its size beside
 * it; bodies are stored as bytes (no base64), exports packed with Brotli when that saves an eighth (packed-body.ts: a
 * runner's 100-span export about 9×), so a parked span costs at most its encoded size plus the hash's per-field
 * overhead, and bounds count it as it would be forwarded. Bodies are never read whole: a drop deletes without reading
 * (UNLINK), a delivery reads the field names and then pages of bodies, so no command's reply outgrows the store's
 * timeout.
 */
export class RedisParkingStore implements ParkingStore {
  private readonly scripts: ParkingScripts;
  private readonly joined = new JoinedParks((parks) => this.parkMany(parks), JOINED_PARKS_LIMITS);

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtParkingReserve', { numberOfKeys: 2, lua: RESERVE });
    redis.defineCommand('cjtParkingGiveBack', { numberOfKeys: 1, lua: GIVE_BACK });
    redis.defineCommand('cjtParkingFinish', { numberOfKeys: 2, lua: FINISH });
    redis.defineCommand('cjtPark', { numberOfKeys: 3, lua: PARK });
    redis.defineCommand('cjtParkingRelease', { numberOfKeys: 2, lua: RELEASE });
    redis.defineCommand('cjtDecide', { numberOfKeys: 1, lua: DECIDE });
    redis.defineCommand('cjtReopen', { numberOfKeys: 2, lua: REOPEN });
    redis.defineCommand('cjtNoteFacts', { numberOfKeys: 1, lua: NOTE_FACTS });
    redis.defineCommand('cjtNoteStatuses', { numberOfKeys: 1, lua: NOTE_STATUSES });
    redis.defineCommand('cjtClaimOverdue', { numberOfKeys: 1, lua: CLAIM_OVERDUE });
    this.scripts = redis as unknown as ParkingScripts;
  }

  async park(traceId: string, entry: { kind: ParkedKind; body: Buffer; spans: number; exempt?: boolean }, limits: ParkingLimits): Promise<ParkOutcome> {
    const bytes = String(entry.body.length);
    const spans = String(entry.spans);
    const field = parkedEntryId(parkedDigest(entry.body), entry.kind, entry.spans, entry.body.length).id;
    // An export is stored packed when that saves enough (packed-body.ts); the id, the digest and every bound count the
    // body as it is. The control plane's spans stay plain: a replica of a version before packing, during a rolling
    // upgrade, would read packed lines as spans and move them into the outbox, where it only fails a delivery round on
    // an export it cannot read (its lease runs out and a newer replica takes it).
    const stored = entry.kind === 'spans' ? entry.body : await packedBody(entry.body);
    const exempt = entry.exempt === true;
    const maxTraceSpans = exempt ? '-1' : String(limits.maxTraceSpans);
    const maxTraceBytes = String(limits.maxTraceBytes);
    const ttl = String(Math.max(1, Math.round(limits.holdMs + limits.rememberMs)));
    const maxTotalBytes = exempt ? '-1' : String(limits.maxTotalBytes);
    const dueAt = String(Date.now() + limits.holdMs);
    const keys = [PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId), TRACE_DECISION_KEY(traceId)] as const;
    if (!this.store.isCluster) {
      // One server holds every key: checked, reserved and parked in one transaction, with whatever other entries wait
      // to be parked beside it, so a lost answer leaves either nothing or a parked entry with its reservation (given
      // back when the trace ends).
      const args = [field, bytes, spans, maxTraceSpans, maxTraceBytes, ttl, maxTotalBytes, traceId, dueAt];
      return this.outcomeOf(traceId, await this.joined.park({ keys, args, body: stored }));
    }
    const reply = await this.store.guard(async () => {
      // On a cluster the budget ({parking}) and the trace are two slots: reserved first, given back if not parked.
      const reserved = await this.scripts.cjtParkingReserve(PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY, bytes, spans, maxTotalBytes, traceId, dueAt);
      if (Number(reserved) !== 1) return ['full', 'total_bytes'];
      let parked: string[];
      try {
        parked = await this.scripts.cjtPark(...keys, stored, field, spans, maxTraceSpans, maxTraceBytes, ttl);
      } catch (error) {
        // Perhaps parked after all (a timeout after the write): the trace's finish gives the reservation back then.
        await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, traceId, bytes, spans).catch(() => undefined);
        throw error;
      }
      if (parked[0] !== 'parked') await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, traceId, bytes, spans);
      // Acknowledged to the runner only once kept (SPEC §11): with REDIS_WAIT_REPLICAS, once replicas have it.
      else await this.store.replicated(PARKED_KEY(traceId));
      return parked;
    });
    return this.outcomeOf(traceId, reply);
  }

  /**
   * Several entries parked in one transaction (PARK_MANY, the bodies, PARKED_SETTLE), in order; each answered its own
   * reply, or the error that stands for it. A parked entry is acknowledged only once kept (SPEC §11): with
   * REDIS_WAIT_REPLICAS, once replicas have it, and one WAIT covers every write of the transaction.
   */
  private async parkMany(parks: readonly JoinedPark[]): Promise<(string[] | Error)[]> {
    const replies = await this.store.guard(() => this.parkingTransaction(parks));
    const parkedAt = replies.findIndex((reply) => reply[0] === 'parked');
    if (parkedAt < 0 || !this.store.waitsForReplicas) return replies;
    const unconfirmed = await this.store
      .guard(() => this.store.replicated(parks[parkedAt].keys[0]))
      .then(
        () => undefined,
        (error: Error) => error,
      );
    return unconfirmed === undefined ? replies : replies.map((reply) => (reply[0] === 'parked' ? unconfirmed : reply));
  }

  /** PARK_MANY, an HSET per body, PARKED_SETTLE: one transaction of the store's (`RedisStore.transaction`). */
  private async parkingTransaction(parks: readonly JoinedPark[]): Promise<string[][]> {
    const keys = parks.flatMap((park) => park.keys);
    const parkedKeys = parks.map((park) => park.keys[0]);
    const fields = parks.map((park) => park.args[PARK_MANY_FIELD]);
    const ttl = parks.reduce((longest, park) => Math.max(longest, Number(park.args[PARK_MANY_TTL])), 1);
    const [replies] = await this.store.transaction((redis) => [
      redis.eval(PARK_MANY, 3 + keys.length, PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY, PARKING_TAKE_BACK_KEY, ...keys, ...parks.flatMap((park) => park.args)),
      ...parks.map((park) => redis.hset(park.keys[0], park.args[PARK_MANY_FIELD], park.body)),
      redis.eval(PARKED_SETTLE, 1 + parkedKeys.length, PARKING_TAKE_BACK_KEY, ...parkedKeys, String(ttl), ...fields),
    ]);
    return replies as string[][];
  }

  /** What a park's reply says: a full total is looked at again, for a pipeline decided meanwhile. */
  private async outcomeOf(traceId: string, reply: string[]): Promise<ParkOutcome> {
    switch (reply[0]) {
      case 'parked':
      case 'exists':
        return { kind: 'parked' };
      case 'decided':
        return { kind: 'decided', decision: decisionOf(reply[1]) };
      default: {
        if (reply[1] !== 'total_bytes') return { kind: 'full', limit: reply[1] as 'trace_spans' | 'trace_bytes' };
        // A pipeline decided already is not held to the budget of what waits (SPEC §11 "Bounds": before a decision only).
        const decision = await this.findDecision(traceId);
        return decision === null ? { kind: 'full', limit: 'total_bytes' } : { kind: 'decided', decision };
      }
    }
  }

  async noteFacts(traceId: string, facts: FactsUpdate, ttlMs: number): Promise<void> {
    const queue = String(Math.max(0, Math.round(facts.longestQueueMs ?? 0)));
    const rootEnd = facts.rootEnd === null ? '-' : facts.rootEnd === undefined ? '' : JSON.stringify(facts.rootEnd);
    const fields: string[] = [];
    for (const status of facts.statuses ?? []) fields.push(`status:${status}`, '1');
    if (facts.childRunning !== undefined) fields.push(`child:${facts.childRunning}`, '1');
    if (facts.childEnded !== undefined) fields.push(`child:${facts.childEnded}`, '');
    for (const jobId of facts.finishedRootJobs ?? []) fields.push(`done:${jobId}`, '1');
    await this.store.guard(() =>
      this.scripts.cjtNoteFacts(OUTCOME_FACTS_KEY(traceId), String(Math.max(1, Math.round(ttlMs))), queue, facts.whenNoOutcome ?? '', rootEnd, ...fields),
    );
  }

  async notePipelineJobStatuses(pipelineId: number, statuses: readonly string[], ttlMs: number): Promise<void> {
    if (statuses.length === 0) return;
    const ttl = String(Math.max(1, Math.round(ttlMs)));
    await this.store.guard(() => this.scripts.cjtNoteStatuses(PIPELINE_JOB_STATUSES_KEY(pipelineId), ttl, ...statuses));
  }

  async jobStatusesOf(pipelineId: number): Promise<string[]> {
    const statuses = await this.store.guard(() => this.store.client.smembers(PIPELINE_JOB_STATUSES_KEY(pipelineId)));
    return statuses.sort();
  }

  async readFacts(traceId: string): Promise<OutcomeFacts> {
    const stored = await this.store.guard(() => this.store.client.hgetall(OUTCOME_FACTS_KEY(traceId)));
    const fields = Object.keys(stored);
    const named = (prefix: string) => fields.filter((field) => field.startsWith(prefix)).map((field) => field.slice(prefix.length));
    const whenNoOutcome = stored.no_outcome === 'keep' || stored.no_outcome === 'drop' ? stored.no_outcome : undefined;
    return {
      statuses: named('status:').sort(),
      longestQueueMs: Number(stored.queue ?? 0),
      ...(whenNoOutcome === undefined ? {} : { whenNoOutcome }),
      ...(stored.root_end === undefined ? {} : { rootEnd: JSON.parse(stored.root_end) as RootOutcome }),
      runningChildren: named('child:')
        .map(Number)
        .sort((a, b) => a - b),
      finishedRootJobs: named('done:')
        .map(Number)
        .sort((a, b) => a - b),
    };
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

  async reopen(traceId: string, holdMs: number): Promise<boolean> {
    const reopened = Number(await this.store.guard(() => this.scripts.cjtReopen(TRACE_DECISION_KEY(traceId), OUTCOME_FACTS_KEY(traceId))));
    // Undecided (a drop deferred for late child pipelines) or dropped: its time limit runs again from now.
    if (reopened !== 0) await this.schedule(traceId, Date.now() + holdMs);
    return reopened === 1;
  }

  async findDecision(traceId: string): Promise<TraceDecision | null> {
    const stored = await this.store.guard(() => this.store.client.get(TRACE_DECISION_KEY(traceId)));
    return stored === null ? null : decisionOf(stored);
  }

  async parkedIds(traceId: string): Promise<ParkedEntryId[]> {
    const fields = await this.store.guard(() => this.store.client.hkeys(PARKED_KEY(traceId)));
    return fields.map(parsedEntryId);
  }

  async parkedEntries(traceId: string, ids: readonly ParkedEntryId[]): Promise<ParkedEntry[]> {
    if (ids.length === 0) return [];
    const stored = await this.store.guard(() => this.store.client.hmgetBuffer(PARKED_KEY(traceId), ...ids.map(({ id }) => id)));
    const entries = await Promise.all(
      ids.map(async (id, i) => {
        const body = stored[i];
        if (body === null) return [];
        const unpacked = await unpackedBody(body, id.bytes);
        return [{ ...id, bytes: unpacked.length, body: unpacked }];
      }),
    );
    return entries.flat();
  }

  async release(traceId: string, entryIds: readonly string[]): Promise<void> {
    if (entryIds.length === 0) return;
    await this.store.guard(async () => {
      const [bytes, spans] = await this.scripts.cjtParkingRelease(PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId), ...entryIds);
      if (Number(bytes) > 0 || Number(spans) > 0) await this.scripts.cjtParkingGiveBack(PARKING_TOTAL_KEY, traceId, String(bytes), String(spans));
    });
  }

  async drop(traceId: string): Promise<void> {
    // UNLINK frees a large hash off Redis's main thread; the reservation comes back whole with finish().
    await this.store.guard(() => this.store.client.unlink(PARKED_KEY(traceId), PARKED_SIZE_KEY(traceId)));
  }

  async finish(traceId: string): Promise<void> {
    await this.store.guard(() => this.scripts.cjtParkingFinish(PARKING_TOTAL_KEY, PARKING_OVERDUE_KEY, traceId));
  }

  async schedule(traceId: string, dueAt: number): Promise<void> {
    await this.store.guard(() => this.store.client.zadd(PARKING_OVERDUE_KEY, String(Math.round(dueAt)), traceId));
  }

  async claimOverdue(max: number, leaseMs: number): Promise<string[]> {
    return this.store.guard(() => this.scripts.cjtClaimOverdue(PARKING_OVERDUE_KEY, String(Date.now()), String(max), String(Math.round(leaseMs))));
  }

  async usage(): Promise<ParkingUsage> {
    const [[bytes, spans], traces] = await this.store.guard(() =>
      Promise.all([this.store.client.hmget(PARKING_TOTAL_KEY, 'bytes', 'spans'), this.store.client.zcard(PARKING_OVERDUE_KEY)]),
    );
    return { traces, spans: Math.max(0, Number(spans ?? 0)), bytes: Math.max(0, Number(bytes ?? 0)) };
  }
}
