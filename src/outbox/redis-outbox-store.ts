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
import { defineScripts, evalArguments, TransactionScript, ttlArgument } from '../store/redis-scripts';
import { RedisStore } from '../store/redis-store';
import { ClaimedEntry, EnqueueOutcome, OutboxDepth, OutboxEntry, OutboxLimits, OutboxStore } from './outbox';
import { EnqueueArgs, EnqueueKeys, OUTBOX_SCRIPTS } from './redis-outbox-store.scripts';

const OUTBOX_KEYS = [OUTBOX_DUE_KEY, OUTBOX_ENQUEUED_KEY, OUTBOX_SPANS_KEY, OUTBOX_ATTEMPTS_KEY, OUTBOX_BUNDLED_KEY] as const;
/** The outbox's keys, then where versions before this one marked leases (see acknowledgeSpans). */
const LEASE_KEYS = [...OUTBOX_KEYS, OUTBOX_LEASED_KEY] as const;

/**
 * Spans one enqueue script takes. Its hold grows with the spans it is given: 25 spans of 1.2 KB held Redis about
 * 0.15 ms on an idle server (issue 37), and a kept pipeline's parked spans, released at once, can be a thousand.
 * Pieces of 25 bound the wait of a pickup's grant write arriving meanwhile, whatever the batch, at the same total.
 */
const ENQUEUE_PIECE = 25;

/**
 * The outbox on Redis, one slot `{outbox}` (see redis-keys.ts): enqueueing (dedup marker, entry, due time) is one
 * atomic script on a cluster too. The key names are what running installs hold already (`spans`, `seen:<key>`).
 */
export class RedisOutboxStore implements OutboxStore {
  private readonly scripts;

  constructor(private readonly store: RedisStore) {
    this.scripts = defineScripts(store, OUTBOX_SCRIPTS);
  }

  /**
   * In pieces of ENQUEUE_PIECE spans, one after another, so that Redis serves the pickups' grant writes between
   * them. Each piece is one transaction (its bodies, then enqueueSpans); a store failure part way leaves the pieces
   * before it enqueued, and enqueueing the same spans again (as a webhook GitLab sends again does) adds only the
   * rest, their seen-markers kept. A bundle is a transaction of its own (its body, then enqueueBundle); one not
   * queued whole goes on as its spans, in pieces.
   */
  async enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const outcome = { queued: 0, duplicates: 0, refused: 0 };
    const spans: OutboxEntry[] = [];
    for (const entry of entries) {
      if (entry.members === undefined) spans.push(entry);
      else {
        const queued = await this.store.guard(() =>
          this.bodiesThenScript(OUTBOX_SCRIPTS.enqueueBundle, [entry.key, Buffer.from(entry.body)], entry.members!, limits, [entry.key]),
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
      const [queued, duplicates, refused] = await this.store.guard(() => this.bodiesThenScript(OUTBOX_SCRIPTS.enqueueSpans, bodies, piece, limits, keys));
      outcome.queued += Number(queued);
      outcome.duplicates += Number(duplicates);
      outcome.refused += Number(refused);
    }
    return outcome;
  }

  /**
   * One transaction: the bodies' HSET, then `script` (enqueueSpans or enqueueBundle) with the outbox's keys and the
   * seen-markers of `spans`, given `ids` after the limits (as EVAL: a script missing from Redis' cache would fail
   * inside the transaction after the bodies were written, leaving them to no entry). On one server it is the store's
   * own (`RedisStore.transaction`); a cluster routes by key, so there it is ioredis'.
   */
  private async bodiesThenScript<Reply>(
    script: TransactionScript<EnqueueKeys, EnqueueArgs, Reply>,
    bodies: Array<string | Buffer>,
    spans: readonly OutboxEntry[],
    limits: OutboxLimits,
    ids: readonly string[],
  ): Promise<Reply> {
    const enqueue = evalArguments(
      script,
      [...OUTBOX_KEYS, ...spans.map((entry) => OUTBOX_SEEN_KEY(entry.key))],
      [Date.now(), limits.maxSpans, ttlArgument(limits.rememberMs), ...ids],
    );
    const client = this.store.client;
    if (!(client instanceof Cluster)) {
      const replies = await this.store.transaction((redis) => [redis.hset(OUTBOX_SPANS_KEY, ...bodies), redis.eval(...enqueue)]);
      return replies[1] as Reply;
    }
    const answers = await client
      .multi()
      .hset(OUTBOX_SPANS_KEY, ...bodies)
      .eval(...enqueue)
      .exec();
    const failed = answers?.find(([error]) => error !== null)?.[0];
    if (answers === null || failed) throw failed ?? new Error('the outbox enqueue transaction was discarded');
    return answers[1][1] as Reply;
  }

  /**
   * The claim script leases the entries; what they hold is read after it, the bodies in bytes (ioredis' `Buffer` form
   * of HMGET) so they never become strings. A body missing then was delivered and acknowledged meanwhile by a replica
   * whose lease had run out, or its entry was left half-written by hand or by eviction: either way there is nothing to
   * send, and the entry is removed as an acknowledged one is.
   */
  async claim(max: number, leaseMs: number): Promise<ClaimedEntry[]> {
    const now = Date.now();
    const due = await this.store.guard(() => this.scripts.claimSpans([OUTBOX_DUE_KEY], [now, max, Math.round(leaseMs)]));
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
        // A lease's due time is odd (see claimSpans).
        leaseRanOut: Number(due[i * 2 + 1]) % 2 === 1,
      });
    });
    // Not worth failing the claim over: the entries come back once their leases run out, and are removed then.
    await this.acknowledge(gone).catch(() => undefined);
    return claimed;
  }

  async acknowledge(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.acknowledgeSpans(LEASE_KEYS, keys));
  }

  async retry(keys: readonly string[], delayMs: number): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.retrySpans([OUTBOX_DUE_KEY, OUTBOX_ATTEMPTS_KEY], [Date.now() + Math.round(delayMs), ...keys]));
  }

  async putBack(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.store.guard(() => this.scripts.putBackSpans([OUTBOX_DUE_KEY], [Date.now(), ...keys]));
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
