import { luaScript, transactionScript } from '../store/redis-scripts';

/*
 * The outbox's scripts (redis-outbox-store.ts), all on its one slot `{outbox}`. Each chooses entries and changes them
 * in one step, so two replicas never lease, retry or count the same entry twice. Redis serves nothing else while one
 * runs, and every pickup's grant waits behind it: so they touch many entries with a few variadic commands, not a few
 * commands per entry (a claim of 100 entries took 1.3 ms of Redis as 500 single-entry calls; issue 37), in pieces of
 * at most 1,000 arguments, under Lua's limit on unpack.
 */

const CHUNKED = `
local function chunked(command, key, list)
  for i = 1, #list, 1000 do
    redis.call(command, key, unpack(list, i, math.min(i + 999, #list)))
  end
end
`;

/**
 * The outbox's size in spans (KEYS[1] the due set, KEYS[5] the bundled count, see OUTBOX_BUNDLED_KEY), and a
 * bundle's weight from its key as weightOf (outbox.ts) reads it: a plain find first, as most keys are no bundle's.
 */
const SPANS = `
local function outboxSpans()
  local entries = redis.call('ZCARD', KEYS[1])
  if entries == 0 then
    redis.call('DEL', KEYS[5])
    return 0
  end
  return entries + (tonumber(redis.call('GET', KEYS[5])) or 0)
end
local function weight(key)
  if not string.find(key, '~', 1, true) then return 1 end
  return tonumber(string.match(key, '~%x+%*(%d+)$')) or 1
end
`;

/**
 * Makes entries (ARGV[2..]) due again at ARGV[1] made even (no lease), each only if still in the due set (KEYS[1]): one
 * acknowledged meanwhile stays gone. `andThen` is Lua run for each one made due (its key ARGV[i]).
 */
const dueAgain = (andThen: string) => `
local dueAt = tonumber(ARGV[1]) - tonumber(ARGV[1]) % 2
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], dueAt, ARGV[i])${andThen}
  end
end
return 1
`;

/** The outbox's keys, first in the enqueue and acknowledge scripts' KEYS (OUTBOX_KEYS in redis-outbox-store.ts). */
type OutboxKeys = [due: string, enqueued: string, spans: string, attempts: string, bundled: string];

/** An enqueue's KEYS: the outbox's, then a seen-marker per span (OUTBOX_SEEN_KEY). */
export type EnqueueKeys = [...OutboxKeys, ...seenMarkers: string[]];
/** An enqueue's ARGV: then the spans' ids, or the bundle's key. */
export type EnqueueArgs = [now: number, maxSpans: number, rememberMs: number, ...entryKeys: string[]];

export const OUTBOX_SCRIPTS = {
  /**
   * Enqueues spans never seen before while the outbox has room: checked and queued in one step, so the bound holds
   * and a span sent twice is queued once. Runs in one transaction after a plain HSET of every span's body: a body given
   * to a script passes through Lua, and collecting it there later held Redis a quarter longer per enqueue (issue 37).
   * So the bodies are already there, and the script removes those of spans it does not queue, unless an entry queued
   * before still holds that span (its body written again, the same). Answers how many were queued, duplicates, refused.
   */
  enqueueSpans: transactionScript<EnqueueKeys, EnqueueArgs, [queued: number, duplicates: number, refused: number]>(`${CHUNKED}${SPANS}
local now = ARGV[1]
local dueAt = string.format('%.0f', tonumber(now) - tonumber(now) % 2)
local max = tonumber(ARGV[2])
local size = outboxSpans()
local queued, duplicates, refused = 0, 0, 0
local scores, dues, unqueued = {}, {}, {}
for i = 6, #KEYS do
  local spanId = ARGV[i - 2]
  if size >= max then
    if redis.call('EXISTS', KEYS[i]) == 1 then duplicates = duplicates + 1 else refused = refused + 1 end
    unqueued[#unqueued + 1] = spanId
  elseif redis.call('SET', KEYS[i], '1', 'PX', ARGV[3], 'NX') then
    scores[#scores + 1] = now
    scores[#scores + 1] = spanId
    dues[#dues + 1] = dueAt
    dues[#dues + 1] = spanId
    size = size + 1
    queued = queued + 1
  else
    duplicates = duplicates + 1
    unqueued[#unqueued + 1] = spanId
  end
end
if queued > 0 then
  chunked('ZADD', KEYS[1], dues)
  chunked('ZADD', KEYS[2], scores)
end
for _, spanId in ipairs(unqueued) do
  if not redis.call('ZSCORE', KEYS[1], spanId) then redis.call('HDEL', KEYS[3], spanId) end
end
return {queued, duplicates, refused}
`),

  /**
   * A bundle (see bundled in outbox.ts), queued whole when none of its spans was seen and all fit, in one step; else its
   * body is removed and the answer is -1, and the caller enqueues its spans one by one. After a plain HSET of its body,
   * in one transaction, as enqueueSpans. Its key is unique (a nonce), so no other entry's body was replaced.
   */
  enqueueBundle: transactionScript<EnqueueKeys, EnqueueArgs, number>(`${SPANS}
local now = ARGV[1]
local spans = #KEYS - 5
local whole = outboxSpans() + spans <= tonumber(ARGV[2])
for i = 6, #KEYS do
  if not whole then break end
  if redis.call('EXISTS', KEYS[i]) == 1 then whole = false end
end
if not whole then
  redis.call('HDEL', KEYS[3], ARGV[4])
  return -1
end
for i = 6, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', ARGV[3]) end
redis.call('ZADD', KEYS[1], string.format('%.0f', tonumber(now) - tonumber(now) % 2), ARGV[4])
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('INCRBY', KEYS[5], spans - 1)
return spans
`),

  /**
   * Leases due entries carrying up to `max` spans (a bundle counts its spans; the first is taken whatever its weight)
   * for leaseMs: chosen and leased in one step, so no two replicas lease one entry. Answers each one's id and the due
   * time it had. The rest of an entry (body, attempts, enqueue time) does not change while it is leased, so the caller
   * reads it after, with plain commands. Reading it here held Redis about three times as long: 100 bodies of 1.2 KB read
   * into Lua and answered from it took about 0.3 ms, where a plain HMGET of them takes 16 µs, and every variadic command
   * a script sends costs about its own time again in turning arguments and answers between Lua and Redis (issue 37).
   *
   * A lease is its entry's due time, set to an odd millisecond at or just past the lease's end, where every other due
   * time (enqueued, retried, put back) is made even: an entry claimed at an odd due time is one whose lease ran out
   * unanswered, with no per-entry mark beside it to write at each claim and read at the next. Whole milliseconds keep
   * a small sorted set's scores as integers, which Redis compares without parsing them (a half-millisecond mark tried
   * first made the claim slower).
   */
  claimSpans: luaScript<[due: string], [now: number, max: number, leaseMs: number], string[]>({
    keys: 1,
    lua: `${CHUNKED}${SPANS}
local now = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
local leaseEnds = now + tonumber(ARGV[3])
leaseEnds = string.format('%.0f', leaseEnds + 1 - leaseEnds % 2)
local leased, taken, spans = {}, {}, 0
for i = 1, #due, 2 do
  local w = weight(due[i])
  if spans > 0 and spans + w > max then break end
  spans = spans + w
  leased[#leased + 1] = leaseEnds
  leased[#leased + 1] = due[i]
  taken[#taken + 1] = due[i]
  taken[#taken + 1] = due[i + 1]
end
if #leased > 0 then chunked('ZADD', KEYS[1], leased) end
return taken
`,
  }),

  /**
   * Removes delivered entries in one step with the bundled count they carried. `leased` held the lease marks of
   * versions before the due times said it; delivering an entry drops any left. A bundle still waiting (not
   * acknowledged already by another replica) takes its spans off the bundled count.
   */
  acknowledgeSpans: luaScript<[...OutboxKeys, leased: string], string[], number>({
    keys: 6,
    lua: `${CHUNKED}${SPANS}
local bundled = 0
for _, key in ipairs(ARGV) do
  local w = weight(key)
  if w > 1 and redis.call('ZSCORE', KEYS[1], key) then bundled = bundled + w - 1 end
end
chunked('ZREM', KEYS[1], ARGV)
chunked('ZREM', KEYS[2], ARGV)
chunked('HDEL', KEYS[3], ARGV)
chunked('HDEL', KEYS[4], ARGV)
chunked('HDEL', KEYS[6], ARGV)
if bundled > 0 then redis.call('DECRBY', KEYS[5], bundled) end
outboxSpans()
return #ARGV
`,
  }),

  /** Puts claimed spans back, due at dueAt made even (no lease), one attempt more; a span acknowledged meanwhile stays gone. */
  retrySpans: luaScript<[due: string, attempts: string], [dueAt: number, ...keys: string[]], number>({
    keys: 2,
    lua: dueAgain(`
    redis.call('HINCRBY', KEYS[2], ARGV[i], 1)`),
  }),

  /** Makes entries due at once (dueAt, made even: no lease), no attempt counted; one acknowledged meanwhile stays gone. */
  putBackSpans: luaScript<[due: string], [dueAt: number, ...keys: string[]], number>({
    keys: 1,
    lua: dueAgain(''),
  }),
};
