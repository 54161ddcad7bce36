/**
 * Limits shared by every replica, spent without a store round trip per charge (issue 21): a replica takes
 * a block of a limit in one store call and spends it locally, takes the next block before this one runs
 * dry, and hands back what it did not spend when the block falls idle or the process stops.
 *
 * Every block is charged to the shared count when it is taken, so the blocks of all replicas never add up
 * to more than the limit: with any number of replicas a runner never gets more exports than its window,
 * nor a job more spans than its quota or rate, while every replica lives. The price is the other way: a
 * replica may refuse while another holds an unspent block, at most one block per other replica (blocks
 * are at most 1/8 of a limit, see `blockFor`). A replica that dies with a block: a window's block ends with
 * its window; a quota lease runs out after `leaseMs` without a call, and the next call of any replica takes
 * its unspent part back, as it was last reported. What the dead replica spent after its last report is
 * taken back too, so a job may exceed its quota by at most that: the blocks outstanding at its death.
 *
 * A charge answers a receipt; the receipt's refund gives its count back (the collector did not accept the
 * spans, so the client sends them again and must not pay twice).
 *
 * `BlockLease` is the lifecycle both ledgers share (window-ledger.ts, job-span-ledger.ts): one refill in
 * flight per key that every waiting charge shares, the refill loop that asks again while the shared limit
 * still had room, the early refill at half a block, the sweeper that hands idle blocks back, and close.
 */

/** Milliseconds since the epoch: `Date.now` in production, a hand-moved clock in tests. */
export interface LedgerClock {
  now(): number;
}

/** One charge's proof: refunding gives (part of) it back. */
export interface Receipt {
  readonly count: number;
  /** Gives back `count` of what was charged (all of it by default); a refund beyond the charge is ignored. */
  refund(count?: number): void;
}

export const NO_RECEIPT: Receipt = { count: 0, refund: () => undefined };

/** Counts the store calls a ledger makes, for the metrics and the benches. */
export interface LedgerObserver {
  storeCall(kind: 'window' | 'spans' | 'return'): void;
}

export interface LedgerOptions {
  readonly clock?: LedgerClock;
  readonly observer?: LedgerObserver;
  /** Blocks nobody charged for this long are handed back (another replica may need them). */
  readonly idleMs?: number;
  /** How long a quota lease holds without a call; it is renewed well before. */
  readonly leaseMs?: number;
}

const systemClock: LedgerClock = { now: () => Date.now() };
const DEFAULT_IDLE_MS = 10_000;
/**
 * Charges that wait on a refill share it, and the first of them may spend all it brought. A charge left
 * without room asks the store again while the store still had room to give: it is refused (or granted
 * part) only when the shared limit itself is spent. This many attempts at most, a bound on a charge's
 * store calls under a stampede, far above what a burst of thousands of concurrent charges needs.
 */
const MAX_REFILLS_PER_CHARGE = 16;
/** Charges a block is meant to last: one store call per this many exports of a steady job. */
const CHARGES_PER_BLOCK = 64;
/** No block takes more than this share of a limit, so the blocks stranded on other replicas stay small. */
const MAX_BLOCK_SHARE = 8;

/** The block to take for charges of `need`: some dozens of charges, at most 1/8 of the limit, never less than `need`. */
export function blockFor(need: number, limit: number): number {
  return Math.min(limit, Math.max(need, Math.min(need * CHARGES_PER_BLOCK, Math.floor(limit / MAX_BLOCK_SHARE))));
}

/** What a ledger holds of one key's limit; each ledger adds what its blocks are. */
export interface HeldBlock {
  /** When it was last charged: idle blocks go back. */
  usedAt: number;
  /** The store call in flight that refills it, shared by every charge waiting on it. */
  refill?: Promise<void>;
}

/** What a charge does after a refill: answer, or ask the store again. */
export const ASK_AGAIN = Symbol('ASK_AGAIN');

/**
 * One replica's blocks of limits, by key. `Need` is what a refill is sized by (a window's limit and length,
 * a job's wanted spans and limits).
 */
export abstract class BlockLease<K, S extends HeldBlock, Need> {
  protected readonly held = new Map<K, S>();
  protected readonly clock: LedgerClock;
  protected readonly observer: LedgerObserver | undefined;
  private readonly idleMs: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly refillKind: 'window' | 'spans',
    options: LedgerOptions,
  ) {
    this.clock = options.clock ?? systemClock;
    this.observer = options.observer;
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.sweeper = setInterval(() => void this.handBackIdle(), this.idleMs / 2).unref();
  }

  /** Hands back every block (the process stops). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.held.keys()].map((key) => this.handBack(key)));
  }

  /** Hands back blocks nobody charged lately. */
  async handBackIdle(): Promise<void> {
    const idleBefore = this.clock.now() - this.idleMs;
    await Promise.all([...this.held].filter(([, state]) => state.usedAt < idleBefore && state.refill === undefined).map(([key]) => this.handBack(key)));
  }

  /** A new, empty block for `key`. */
  protected abstract emptyBlock(need: Need, now: number): S;

  /** The store call that refills `state`, applying what the store granted to it. */
  protected abstract takeBlock(key: K, state: S, need: Need): Promise<void>;

  /** The store call that gives back what `state` still holds, or undefined when it holds nothing to give back. */
  protected abstract giveBack(key: K, state: S): Promise<void> | undefined;

  /**
   * Refills `key`, then lets `decide` answer from what it holds, or ask the store again (`ASK_AGAIN`) while
   * the shared limit had room: charges sharing the refill may have spent it. `lastAttempt` says it may not.
   */
  protected async refillAndDecide<A>(
    key: K,
    need: Need,
    decide: (state: S | undefined, lastAttempt: boolean) => A | typeof ASK_AGAIN | Promise<A | typeof ASK_AGAIN>,
  ): Promise<A> {
    for (let attempt = 1; ; attempt++) {
      await this.refill(key, need);
      const decided = decide(this.held.get(key), attempt >= MAX_REFILLS_PER_CHARGE);
      const answer = decided instanceof Promise ? await decided : decided;
      if (answer !== ASK_AGAIN) return answer;
    }
  }

  /** The next block is asked for while part of this one is left (`low`), so a steady charger never waits for it. */
  protected refillEarly(key: K, need: Need, state: S, low: boolean): void {
    if (low && state.refill === undefined) this.refill(key, need).catch(() => undefined);
  }

  protected refill(key: K, need: Need): Promise<void> {
    const current = this.held.get(key);
    if (current?.refill !== undefined) return current.refill;
    const state = current ?? this.emptyBlock(need, this.clock.now());
    this.held.set(key, state);
    this.observer?.storeCall(this.refillKind);
    const refill = this.takeBlock(key, state, need).then(
      () => {
        state.refill = undefined;
      },
      (error: unknown) => {
        state.refill = undefined;
        throw error;
      },
    );
    state.refill = refill;
    return refill;
  }

  private async handBack(key: K): Promise<void> {
    const state = this.held.get(key);
    if (state === undefined) return;
    this.held.delete(key);
    const giving = this.giveBack(key, state);
    if (giving === undefined) return;
    this.observer?.storeCall('return');
    await giving.catch(() => undefined);
  }
}
