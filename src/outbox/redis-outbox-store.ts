import { Cluster } from 'ioredis';
import {
  OUTBOX_ATTEMPTS_KEY,
  OUTBOX_BUNDLED_KEY,
  OUTBOX_DUE_KEY,
  OUTBOX_ENQUEUED_KEY,
  OUTBOX_LEASED_KEY,
  OUTBOX_SEEN_KEY,
  OUTBOX_SPANS_KEY,
} from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { ClaimedEntry, EnqueueOutcome, OutboxDepth, OutboxEntry, OutboxLimits, OutboxStore } from './outbox';

const OUTBOX_KEYS = [OUTBOX_DUE_KEY, OUTBOX_ENQUEUED_KEY, OUTBOX_SPANS_KEY, OUTBOX_ATTEMPTS_KEY, OUTBOX_BUNDLED_KEY] as const;
/** The outbox's keys, then where versions before this one marked leases (see ACKNOWLEDGE_SPANS). */
const LEASE_KEYS = [...OUTBOX_KEYS, OUTBOX_LEASED_KEY] as const;

/**
 * The scripts run in Redis, which serves nothing else meanwhile: every pickup's grant waits behind them. So they
 * touch many entries with a few variadic commands, not a few commands per entry (a claim of 100 entries took
 * 1.3 ms of Redis as 500 single-entry calls; issue 37), in pieces of at most 1,000 arguments, under Lua's limit
 * on unpack.
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
 * Enqueues spans never seen before while the outbox has room. KEYS: due, enqueued, spans, attempts, bundled, then one
 * seen-marker per span; ARGV: now, max spans, remember ms, then the span ids. Runs in one transaction after a plain
 * HSET of every span's body: a body given to a script passes through Lua, and collecting it there later held Redis
 * a quarter longer per enqueue (issue 37). So the bodies are already there, and the script removes those of spans it
 * does not queue, unless an entry queued before still holds that span (its body written again, the same).
 */
const ENQUEUE_SPANS = `${CHUNKED}${SPANS}
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
`;

/**
 * A bundle (see bundled in outbox.ts), queued whole when none of its spans was seen and all fit; else its body is
 * removed and the answer is -1, and the caller enqueues its spans one by one. KEYS: due, enqueued, spans, attempts,
 * bundled, then one seen-marker per span; ARGV: now, max spans, remember ms, the bundle's key. After a plain HSET of
 * its body, in one transaction, as ENQUEUE_SPANS. Its key is unique (a nonce), so no other entry's body was replaced.
 */
const ENQUEUE_BUNDLE = `${SPANS}
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
`;

/**
 * Leases due entries carrying up to ARGV[2] spans (a bundle counts its spans; the first is taken whatever its weight)
 * for ARGV[3] ms; answers each one's id and the due time it had. Only the choosing and
 * leasing must be one step: the rest of an entry (body, attempts, enqueue time) does not change while it is leased,
 * so the caller reads it after, with plain commands. Reading it here held Redis about three times as long: 100 bodies
 * of 1.2 KB read into Lua and answered from it took about 0.3 ms, where a plain HMGET of them takes 16 µs, and every
 * variadic command a script sends costs about its own time again in turning arguments and answers between Lua and
 * Redis (issue 37).
 *
 * A lease is its entry's due time, set to an odd millisecond at or just past the lease's end, where every other due
 * time (enqueued, retried, put back) is made even: an entry claimed at an odd due time is one whose lease ran out
 * unanswered, with no per-entry mark beside it to write at each claim and read at the next. Whole milliseconds keep
 * a small sorted set's scores as integers, which Redis compares without parsing them (a half-millisecond mark tried
 * first made the claim slower).
 */
const CLAIM_SPANS = `${CHUNKED}${SPANS}
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
`;

/**
 * KEYS[6] held the lease marks of versions before the due times said it; delivering an entry drops any left. A
 * bundle still waiting (not acknowledged already by another replica) takes its spans off the bundled count.
 */
const ACKNOWLEDGE_SPANS = `${CHUNKED}${SPANS}
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
`;

/** Puts claimed spans back, due at ARGV[1] made even (no lease); a span acknowledged meanwhile stays gone. */
const RETRY_SPANS = `
local dueAt = tonumber(ARGV[1]) - tonumber(ARGV[1]) % 2
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], dueAt, ARGV[i])
    redis.call('HINCRBY', KEYS[2], ARGV[i], 1)
  end
end
return 1
`;

/** Makes entries due at once (ARGV[1], made even: no lease), no attempt counted; one acknowledged meanwhile stays gone. */
const PUT_BACK = `
local dueAt = tonumber(ARGV[1]) - tonumber(ARGV[1]) % 2
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], dueAt, ARGV[i])
  end
end
return 1
`;

/**
 * Spans one enqueue script takes. Its hold grows with the spans it is given: 25 spans of 1.2 KB held Redis about
 * 0.15 ms on an idle server (issue 37), and a kept pipeline's parked spans, released at once, can be a thousand.
 * Pieces of 25 bound the wait of a pickup's grant write arriving meanwhile, whatever the batch, at the same total.
 */
const ENQUEUE_PIECE = 25;

/** The outbox scripts as ioredis commands: sent by SHA (EVALSHA) after the first use, not as text (the enqueue's is not one: see `bodiesThenScript`). */
interface OutboxScripts {
  /** Answers id and former due time per span leased. */
  cjtClaimSpans(due: string, now: string, max: string, leaseMs: string): Promise<string[]>;
  cjtAcknowledgeSpans(due: string, enqueued: string, spans: string, attempts: string, bundled: string, leased: string, ...keys: string[]): Promise<number>;
  cjtRetrySpans(due: string, attempts: string, dueAt: string, ...keys: string[]): Promise<number>;
  cjtPutBackSpans(due: string, dueAt: string, ...keys: string[]): Promise<number>;
}

/**
 * The outbox on Redis, one slot `{outbox}` (see redis-keys.ts): enqueueing (dedup marker, entry, due time) is one
 * atomic script on a cluster too. The key names are what running installs hold already (`spans`, `seen:<key>`).
 */
export class RedisOutboxStore implements OutboxStore {
  private readonly scripts: OutboxScripts;

  constructor(private readonly store: RedisStore) {
    const redis = store.client;
    redis.defineCommand('cjtClaimSpans', { numberOfKeys: 1, lua: CLAIM_SPANS });
    redis.defineCommand('cjtAcknowledgeSpans', { numberOfKeys: 6, lua: ACKNOWLEDGE_SPANS });
    redis.defineCommand('cjtRetrySpans', { numberOfKeys: 2, lua: RETRY_SPANS });
    redis.defineCommand('cjtPutBackSpans', { numberOfKeys: 1, lua: PUT_BACK });
    this.scripts = redis as unknown as OutboxScripts;
  }

  /**
   * In pieces of ENQUEUE_PIECE spans, one after another, so that Redis serves the pickups' grant writes between
   * them. Each piece is one transaction (its bodies, then ENQUEUE_SPANS); a store failure part way leaves the pieces
   * before it enqueued, and enqueueing the same spans again (as a webhook GitLab sends again does) adds only the
   * rest, their seen-markers kept. A bundle is a transaction of its own (its body, then ENQUEUE_BUNDLE); one not
   * queued whole goes on as its spans, in pieces.
   */
  async enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const outcome = { queued: 0, duplicates: 0, refused: 0 };
    const spans: OutboxEntry[] = [];
    for (const entry of entries) {
      if (entry.members === undefined) spans.push(entry);
      else {
        const queued = await this.store.guard(() =>
          this.bodiesThenScript(ENQUEUE_BUNDLE, [entry.key, Buffer.from(entry.body)], entry.members!, limits, [entry.key]),
        );
        if (queued > 0) outcome.queued += queued;
        else spans.push(...entry.members);
      }
    }
    for (let start = 0; start < spans.length; start += ENQUEUE_PIECE) {
      const piece = spans.slice(start, start + ENQUEUE_PIECE);
      // Bodies as bytes: the command is written as its pieces, not first concatenated into one string on the heap.
      const bodies = piece.flatMap((entry) => [entry.key, Buffer.from(entry.body)]);
      const keys = piece.map((entry) => entry.key);
      const [queued, duplicates, refused] = await this.store.guard(() =>
        this.bodiesThenScript<[number, number, number]>(ENQUEUE_SPANS, bodies, piece, limits, keys),
      );
      outcome.queued += Number(queued);
      outcome.duplicates += Number(duplicates);
      outcome.refused += Number(refused);
    }
    return outcome;
  }

  /**
   * One transaction: the bodies' HSET, then `script` (ENQUEUE_SPANS or ENQUEUE_BUNDLE) with the outbox's keys and the
   * seen-markers of `spans`, given `ids` after the limits (as EVAL: a script missing from Redis' cache would fail
   * inside the transaction after the bodies were written, leaving them to no entry). On one server it is the store's
   * own (`RedisStore.transaction`); a cluster routes by key, so there it is ioredis'.
   */
  private async bodiesThenScript<T = number>(
    script: string,
    bodies: Array<string | Buffer>,
    spans: readonly OutboxEntry[],
    limits: OutboxLimits,
    ids: readonly string[],
  ): Promise<T> {
    const keys = [...OUTBOX_KEYS, ...spans.map((entry) => OUTBOX_SEEN_KEY(entry.key))];
    const args = [String(Date.now()), String(limits.maxSpans), String(Math.max(1, Math.round(limits.rememberMs))), ...ids];
    const client = this.store.client;
    if (!(client instanceof Cluster)) {
      const replies = await this.store.transaction((redis) => [redis.hset(OUTBOX_SPANS_KEY, ...bodies), redis.eval(script, keys.length, ...keys, ...args)]);
      return replies[1] as T;
    }
    const answers = await client
      .multi()
      .hset(OUTBOX_SPANS_KEY, ...bodies)
      .eval(script, keys.length, ...keys, ...args)
      .exec();
    const failed = answers?.find(([error]) => error !== null)?.[0];
    if (answers === null || failed) throw failed ?? new Error('the outbox enqueue transaction was discarded');
    return answers[1][1] as T;
  }

  /**
   * The claim script leases the entries; what they hold is read after it, the bodies in bytes (ioredis' `Buffer` form
   * of HMGET) so they never become strings. A body missing then was delivered and acknowledged meanwhile by a replica
   * whose lease had run out, or its entry was left half-written by hand or by eviction: either way there is nothing to
   * send, and the entry is removed as an acknowledged one is.
   */
  async claim(max: number, leaseMs: number): Promise<ClaimedEntry[]> {
    const now = Date.now();
    const due = await this.store.guard(() => this.scripts.cjtClaimSpans(OUTBOX_DUE_KEY, String(now), String(max), String(Math.round(leaseMs))));
    if (due.length === 0) return [];
    const keys: string[] = [];
    for (let i = 0; i < due.length; i += 2) keys.push(due[i]);
    const client = this.store.client;
    // Three plain commands, written together: one write and one round trip, and Redis serves other clients between
    // them. ZMSCORE needs Redis 6.2.
    const [bodies, attempts, enqueued] = await this.store.guard(() =>
      Promise.all(
        this.store.together(
          () =>
            [client.hmgetBuffer(OUTBOX_SPANS_KEY, ...keys), client.hmget(OUTBOX_ATTEMPTS_KEY, ...keys), client.zmscore(OUTBOX_ENQUEUED_KEY, ...keys)] as const,
        ),
      ),
    );
    const claimed: ClaimedEntry[] = [];
    const gone: string[] = [];
    keys.forEach((key, i) => {
      const body = bodies[i];
      if (body === null) {
        gone.push(key);
        return;
      }
      const enqueuedAt = enqueued[i];
      claimed.push({
        key,
        body,
        attempts: Number(attempts[i] ?? 0),
        enqueuedAt: enqueuedAt === null ? now : Number(enqueuedAt),
        // A lease's due time is odd (see CLAIM_SPANS).
        leaseRanOut: Number(due[i * 2 + 1]) % 2 === 1,
      });
    });
    // Not worth failing the claim over: the entries come back once their leases run out, and are removed then.
    await this.acknowledge(gone).catch(() => undefined);
    return claimed;
  }

  async acknowledge(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.cjtAcknowledgeSpans(...LEASE_KEYS, ...keys));
  }

  async retry(keys: readonly string[], delayMs: number): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.cjtRetrySpans(OUTBOX_DUE_KEY, OUTBOX_ATTEMPTS_KEY, String(Date.now() + Math.round(delayMs)), ...keys));
  }

  async putBack(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.cjtPutBackSpans(OUTBOX_DUE_KEY, String(Date.now()), ...keys));
  }

  async depth(): Promise<OutboxDepth> {
    const client = this.store.client;
    const [entries, bundled, oldest] = await this.store.guard(() =>
      Promise.all([client.zcard(OUTBOX_ENQUEUED_KEY), client.get(OUTBOX_BUNDLED_KEY), client.zrange(OUTBOX_ENQUEUED_KEY, 0, 0, 'WITHSCORES')]),
    );
    const spans = entries === 0 ? 0 : entries + Math.max(0, Number(bundled ?? 0));
    return { spans, ...(oldest.length < 2 ? {} : { oldestEnqueuedAt: Number(oldest[1]) }) };
  }
}
