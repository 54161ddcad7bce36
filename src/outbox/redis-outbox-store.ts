import { Cluster } from 'ioredis';
import { OUTBOX_ATTEMPTS_KEY, OUTBOX_DUE_KEY, OUTBOX_ENQUEUED_KEY, OUTBOX_LEASED_KEY, OUTBOX_SEEN_KEY, OUTBOX_SPANS_KEY } from '../store/redis-keys';
import { RedisStore } from '../store/redis-store';
import { ClaimedEntry, EnqueueOutcome, OutboxDepth, OutboxEntry, OutboxLimits, OutboxStore } from './outbox';

const OUTBOX_KEYS = [OUTBOX_DUE_KEY, OUTBOX_ENQUEUED_KEY, OUTBOX_SPANS_KEY, OUTBOX_ATTEMPTS_KEY] as const;
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
 * Enqueues spans never seen before while the outbox has room. KEYS: due, enqueued, spans, attempts, then one
 * seen-marker per span; ARGV: now, max spans, remember ms, then the span ids. Runs in one transaction after a plain
 * HSET of every span's body: a body given to a script passes through Lua, and collecting it there later held Redis
 * a quarter longer per enqueue (issue 37). So the bodies are already there, and the script removes those of spans it
 * does not queue, unless an entry queued before still holds that span (its body written again, the same).
 */
const ENQUEUE_SPANS = `${CHUNKED}
local now = ARGV[1]
local dueAt = string.format('%.0f', tonumber(now) - tonumber(now) % 2)
local max = tonumber(ARGV[2])
local size = redis.call('ZCARD', KEYS[1])
local queued, duplicates, refused = 0, 0, 0
local scores, dues, unqueued = {}, {}, {}
for i = 5, #KEYS do
  local spanId = ARGV[i - 1]
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
 * Leases up to ARGV[2] due spans for ARGV[3] ms; answers each one's id and the due time it had. Only the choosing and
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
const CLAIM_SPANS = `${CHUNKED}
local now = tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local leaseEnds = now + tonumber(ARGV[3])
leaseEnds = string.format('%.0f', leaseEnds + 1 - leaseEnds % 2)
local leased = {}
for i = 1, #due, 2 do
  leased[#leased + 1] = leaseEnds
  leased[#leased + 1] = due[i]
end
if #leased > 0 then chunked('ZADD', KEYS[1], leased) end
return due
`;

/** KEYS[5] held the lease marks of versions before the due times said it; delivering an entry drops any left. */
const ACKNOWLEDGE_SPANS = `${CHUNKED}
chunked('ZREM', KEYS[1], ARGV)
chunked('ZREM', KEYS[2], ARGV)
chunked('HDEL', KEYS[3], ARGV)
chunked('HDEL', KEYS[4], ARGV)
chunked('HDEL', KEYS[5], ARGV)
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
  cjtAcknowledgeSpans(due: string, enqueued: string, spans: string, attempts: string, leased: string, ...keys: string[]): Promise<number>;
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
    redis.defineCommand('cjtAcknowledgeSpans', { numberOfKeys: 5, lua: ACKNOWLEDGE_SPANS });
    redis.defineCommand('cjtRetrySpans', { numberOfKeys: 2, lua: RETRY_SPANS });
    redis.defineCommand('cjtPutBackSpans', { numberOfKeys: 1, lua: PUT_BACK });
    this.scripts = redis as unknown as OutboxScripts;
  }

  /**
   * In pieces of ENQUEUE_PIECE spans, one after another, so that Redis serves the pickups' grant writes between
   * them. Each piece is one transaction (its bodies, then ENQUEUE_SPANS); a store failure part way leaves the pieces
   * before it enqueued, and enqueueing the same spans again (as a webhook GitLab sends again does) adds only the
   * rest, their seen-markers kept.
   */
  async enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const outcome = { queued: 0, duplicates: 0, refused: 0 };
    for (let start = 0; start < entries.length; start += ENQUEUE_PIECE) {
      const piece = entries.slice(start, start + ENQUEUE_PIECE);
      const keys = [...OUTBOX_KEYS, ...piece.map((entry) => OUTBOX_SEEN_KEY(entry.key))];
      const args = [String(Date.now()), String(limits.maxSpans), String(Math.max(1, Math.round(limits.rememberMs))), ...piece.map((entry) => entry.key)];
      // Bodies as bytes: the command is written as its pieces, not first concatenated into one string on the heap.
      const bodies = piece.flatMap((entry) => [entry.key, Buffer.from(entry.body)]);
      const [queued, duplicates, refused] = await this.store.guard(() => this.bodiesThenScript(bodies, keys, args));
      outcome.queued += Number(queued);
      outcome.duplicates += Number(duplicates);
      outcome.refused += Number(refused);
    }
    return outcome;
  }

  /**
   * One transaction: the bodies' HSET, then ENQUEUE_SPANS (as EVAL: a script missing from Redis' cache would fail
   * inside the transaction after the bodies were written, leaving them to no entry). On one server it is the store's
   * own (`RedisStore.transaction`); a cluster routes by key, so there it is ioredis'.
   */
  private async bodiesThenScript(bodies: Array<string | Buffer>, keys: string[], args: string[]): Promise<[number, number, number]> {
    const client = this.store.client;
    if (!(client instanceof Cluster)) {
      const replies = await this.store.transaction((redis) => [
        redis.hset(OUTBOX_SPANS_KEY, ...bodies),
        redis.eval(ENQUEUE_SPANS, keys.length, ...keys, ...args),
      ]);
      return replies[1] as [number, number, number];
    }
    const answers = await client
      .multi()
      .hset(OUTBOX_SPANS_KEY, ...bodies)
      .eval(ENQUEUE_SPANS, keys.length, ...keys, ...args)
      .exec();
    const failed = answers?.find(([error]) => error !== null)?.[0];
    if (answers === null || failed) throw failed ?? new Error('the outbox enqueue transaction was discarded');
    return answers[1][1] as [number, number, number];
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
    const [spans, oldest] = await this.store.guard(() =>
      Promise.all([this.store.client.zcard(OUTBOX_ENQUEUED_KEY), this.store.client.zrange(OUTBOX_ENQUEUED_KEY, 0, 0, 'WITHSCORES')]),
    );
    return { spans, ...(oldest.length < 2 ? {} : { oldestEnqueuedAt: Number(oldest[1]) }) };
  }
}
