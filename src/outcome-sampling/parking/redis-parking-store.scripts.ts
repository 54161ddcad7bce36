import { luaScript, transactionScript } from '../../store/redis-scripts';

/*
 * The parking store's scripts (redis-parking-store.ts). A trace's parked entries, its size, decision and facts are in
 * its trace's slot; the budget of all traces and the index of time limits in `{parking}` (redis-keys.ts).
 *
 * The budget of all traces counts what each trace reserved in a field of its own beside the total (`b:<trace>`,
 * `s:<trace>`). Reserving and parking are in different slots, so a process that dies between them, or an answer lost
 * to a timeout, can leave a reservation with nothing parked behind it; when the trace is finished (delivered, or
 * dropped) its whole reservation is given back, whatever happened in between. So the total counts exactly what is
 * parked once every trace in the time-limit index has ended, and never only ever rises.
 *
 * Amounts are given back as `0 - n`, never `-n`: Lua's -0 reaches Redis as "-0", which HINCRBY refuses as "not an
 * integer" (an export whose spans were all rejected parks with 0 spans).
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

/** A trace's keys an entry is parked with: its entries, its size, its decision. */
export type ParkKeys = [parked: string, size: string, decision: string];

/** What parkMany takes of each entry, after the keys: the entry's checks (as park), then the reservation's (as reserve). */
export type ParkManyEntry = [
  field: string,
  bytes: number,
  spans: number,
  maxTraceSpans: number,
  maxTraceBytes: number,
  ttlMs: number,
  maxTotalBytes: number,
  traceId: string,
  dueAt: number,
];
const PARK_MANY_ARGS: ParkManyEntry['length'] = 9;
/** Where an entry's field and ttl are among its parkMany arguments (settle takes them too). */
export const PARK_MANY_FIELD = 0;
export const PARK_MANY_TTL = 5;

/** An entry's answer: `parked`, `exists` (parked before), `decided` with the decision, or `full` with the bound it hit. */
export type ParkReply = string[];

export const PARKING_SCRIPTS = {
  /** Reserves an entry in the budget of all traces (see RESERVE_STEP): checked and reserved in one step, so the bound holds. Answers 1, or 0 (full). */
  parkingReserve: luaScript<[total: string, overdue: string], [bytes: number, spans: number, maxTotalBytes: number, traceId: string, dueAt: number], number>({
    keys: 2,
    lua: `
local totalKey, overdueKey = KEYS[1], KEYS[2]
local rBytes, rSpans, rMax, rTrace, rDue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local function reserve()
${RESERVE_STEP}
end
return reserve()
`,
  }),

  /** Gives part of a trace's reservation back, the total and the trace's own field in one step, so they always agree. */
  parkingGiveBack: luaScript<[total: string], [traceId: string, bytes: number, spans: number], number>({
    keys: 1,
    lua: `
redis.call('HINCRBY', KEYS[1], 'bytes', 0 - tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'spans', 0 - tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 'b:' .. ARGV[1], 0 - tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 's:' .. ARGV[1], 0 - tonumber(ARGV[3]))
return 1
`,
  }),

  /** The trace has ended: it leaves the index and all it still has reserved is given back, in one step with reading it. */
  parkingFinish: luaScript<[total: string, overdue: string], [traceId: string], number>({
    keys: 2,
    lua: `
local bytes = tonumber(redis.call('HGET', KEYS[1], 'b:' .. ARGV[1]) or '0')
local spans = tonumber(redis.call('HGET', KEYS[1], 's:' .. ARGV[1]) or '0')
redis.call('HINCRBY', KEYS[1], 'bytes', 0 - bytes)
redis.call('HINCRBY', KEYS[1], 'spans', 0 - spans)
redis.call('HDEL', KEYS[1], 'b:' .. ARGV[1], 's:' .. ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`,
  }),

  /**
   * On a cluster, after a reservation (parkingReserve) in the budget's slot: checks and parks one entry in one step in its
   * trace's slot, its body passed in, so the trace's bounds hold and a decision made meanwhile is answered.
   */
  park: luaScript<ParkKeys, [body: Buffer, field: string, spans: number, maxTraceSpans: number, maxTraceBytes: number, ttlMs: number], ParkReply>({
    keys: 3,
    lua: `
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
`,
  }),

  /**
   * Outside a cluster, where every key is one server's, several entries are parked in one transaction: parkMany, the
   * bodies' HSETs, settle. A body goes to Redis as a plain command's argument, never into a script: a 46 KiB body
   * passed to a script cost Redis about 100 µs (copied into Lua and out again) against 20 µs for HSET.
   *
   * parkMany checks, reserves and counts each entry in order, as single parks one after another would, and answers one
   * reply an entry (a full total is {'full', 'total_bytes'}). An entry refused whose field holds no body yet is listed
   * in the take-back key, for settle to remove the body the HSET after it writes. KEYS: total, overdue, take-back, then
   * each entry's ParkKeys; ARGV: each entry's ParkManyEntry.
   */
  parkMany: transactionScript<[total: string, overdue: string, takeBack: string, ...entriesKeys: string[]], Array<string | number>, ParkReply[]>(
    `
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
`,
  ),

  /**
   * After the bodies' HSETs: removes the bodies parkMany listed (by entry index) and keeps every parked hash the time
   * asked at least (also one whose parkMany failed, so that no body is left without a time limit).
   */
  settle: transactionScript<[takeBack: string, ...parked: string[]], [ttlMs: number, ...fields: string[]], number>(`
for _, i in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('HDEL', KEYS[2 + tonumber(i)], ARGV[2 + tonumber(i)])
end
redis.call('DEL', KEYS[1])
for i = 2, #KEYS do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
end
return 1
`),

  /**
   * Removes entries and answers the bytes and spans they held, counted off the trace's size in the same step. An
   * entry's bytes are the ones its field says (`<digest>:<kind>:<spans>:<bytes>`, parkedEntryId), as they would be
   * forwarded and as they were counted, whether its body is stored packed or plain; a field written before the bytes
   * were in it holds a body never packed, whose length they are.
   */
  parkingRelease: luaScript<[parked: string, size: string], string[], [bytes: number, spans: number]>({
    keys: 2,
    lua: `
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
`,
  }),

  /** Records a decision unless one is recorded: the first decision stands. Answers the one recorded and 1 when it is this one. */
  decide: luaScript<[decision: string], [decision: string, rememberMs: number], [decision: string, changed: number]>({
    keys: 1,
    lua: `
local current = redis.call('GET', KEYS[1])
if current then return {current, 0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], 1}
`,
  }),

  /**
   * The pipeline runs again: forgets a drop (never a keep) and the root's end, in one step with reading the decision.
   * Answers 1 when a drop was forgotten, 0 when a keep stands, 2 when there was no decision.
   */
  reopen: luaScript<[decision: string, facts: string], [], number>({
    keys: 2,
    lua: `
redis.call('HDEL', KEYS[2], 'root_end')
local current = redis.call('GET', KEYS[1])
if not current then return 2 end
if string.sub(current, 1, 5) == 'drop:' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`,
  }),

  /**
   * Adds to a trace's facts in one step, the longest queue only ever raised. The no-outcome choice '' leaves it; the
   * root end (JSON) '' leaves it, '-' forgets it; a field's value '' deletes the field.
   */
  noteFacts: luaScript<[facts: string], [ttlMs: number, queueMs: number, whenNoOutcome: string, rootEnd: string, ...fieldsAndValues: string[]], number>({
    keys: 1,
    lua: `
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'no_outcome', ARGV[3]) end
if ARGV[4] == '-' then redis.call('HDEL', KEYS[1], 'root_end') elseif ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'root_end', ARGV[4]) end
for i = 5, #ARGV, 2 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i]) else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
local queue = tonumber(redis.call('HGET', KEYS[1], 'queue') or '0')
if tonumber(ARGV[2]) > queue then redis.call('HSET', KEYS[1], 'queue', ARGV[2]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`,
  }),

  /** Adds statuses to a pipeline's set and lengthens its time (never shortens it) in one step. */
  noteStatuses: luaScript<[statuses: string], [ttlMs: number, ...statuses: string[]], number>({
    keys: 1,
    lua: `
redis.call('SADD', KEYS[1], unpack(ARGV, 2))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
`,
  }),

  /** Hands out traces that are due, each to one caller for the lease: chosen and leased in one step. */
  claimOverdue: luaScript<[overdue: string], [now: number, max: number, leaseMs: number], string[]>({
    keys: 1,
    lua: `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), id) end
return ids
`,
  }),
};
