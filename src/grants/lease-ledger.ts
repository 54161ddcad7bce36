import { randomUUID } from 'node:crypto';
import { GrantStore, JobSpanLimits } from './grant';

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
 * A charge answers a receipt; the receipt's refund gives spans back (the collector did not accept them,
 * so the client sends them again and must not pay twice).
 */

/** Milliseconds since the epoch: `Date.now` in production, a hand-moved clock in tests. */
export interface LedgerClock {
  now(): number;
}

const systemClock: LedgerClock = { now: () => Date.now() };

/** One charge's proof: refunding gives (part of) it back. */
export interface Receipt {
  readonly count: number;
  /** Gives back `count` of what was charged (all of it by default); a refund beyond the charge is ignored. */
  refund(count?: number): void;
}

export type WindowCharge = { readonly allowed: true; readonly receipt: Receipt } | { readonly allowed: false; readonly resetInMs: number };

export interface SpanCharge {
  /** Spans granted: min(wanted, quota room, rate room). */
  readonly granted: number;
  /** What the quota and the current second's rate had for this charge, to enforce exactly that much. */
  readonly quotaRoom: number;
  readonly rateRoom: number;
  readonly receipt: Receipt;
}

/** Counts the store calls the ledger makes, for the metric and the benches. */
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

const NO_RECEIPT: Receipt = { count: 0, refund: () => undefined };
/** A rate block that ends sooner than this after it was granted is waited out, and the next second's taken. */
const RATE_EDGE_MS = 50;
const DEFAULT_IDLE_MS = 10_000;
/**
 * Charges that wait on a refill share it, and the first of them may spend all it brought. A charge left
 * without room asks the store again while the store still had room to give: it is refused (or granted
 * part) only when the shared limit itself is spent. This many attempts at most, a bound on a charge's
 * store calls under a stampede, far above what a burst of thousands of concurrent charges needs.
 */
const MAX_REFILLS_PER_CHARGE = 16;
const DEFAULT_LEASE_MS = 30_000;
/** Charges a block is meant to last: one store call per this many exports of a steady job. */
const CHARGES_PER_BLOCK = 64;
/** No block takes more than this share of a limit, so the blocks stranded on other replicas stay small. */
const MAX_BLOCK_SHARE = 8;

/** The block to take for charges of `need`: some dozens of charges, at most 1/8 of the limit, never less than `need`. */
export function blockFor(need: number, limit: number): number {
  return Math.min(limit, Math.max(need, Math.min(need * CHARGES_PER_BLOCK, Math.floor(limit / MAX_BLOCK_SHARE))));
}

interface WindowState {
  remaining: number;
  resetsAt: number;
  lastBlock: number;
  /** The last block came short of what was asked: the window itself is spent, on every replica. */
  windowSpent: boolean;
  usedAt: number;
  refill?: Promise<void>;
}

/** Blocks of fixed windows, by key: a runner's exports per window (the gateway's and the auth endpoint's). */
export class WindowLedger {
  private readonly blocks = new Map<string, WindowState>();
  private readonly clock: LedgerClock;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly store: Pick<GrantStore, 'takeWindowBlock' | 'returnWindowBlock'>,
    private readonly options: LedgerOptions = {},
  ) {
    this.clock = options.clock ?? systemClock;
    this.sweeper = setInterval(() => void this.handBackIdle(), (options.idleMs ?? DEFAULT_IDLE_MS) / 2).unref();
  }

  /** One hit of `key`'s window (`limit` per `windowMs`): answered without a promise while the block lasts. */
  charge(key: string, limit: number, windowMs: number): WindowCharge | Promise<WindowCharge> {
    const now = this.clock.now();
    const state = this.blocks.get(key);
    if (state !== undefined && state.resetsAt > now && state.remaining >= 1) return this.spend(key, state, limit, windowMs, now);
    return this.refillAndSpend(key, limit, windowMs);
  }

  private async refillAndSpend(key: string, limit: number, windowMs: number): Promise<WindowCharge> {
    let windowsAsked = 0;
    for (let attempt = 1; ; attempt++) {
      await this.refill(key, limit, windowMs);
      const refilled = this.blocks.get(key);
      const at = this.clock.now();
      const current = refilled !== undefined && refilled.resetsAt > at;
      if (current && refilled.remaining >= 1) return this.spend(key, refilled, limit, windowMs, at);
      // The window ended between the store's answer and now (or the block was handed back): the next one is asked once more.
      const askNextWindow = !current && windowsAsked++ === 0;
      // Charges sharing the refill spent it while the window still has room: another block.
      const askAgain = current && !refilled.windowSpent && attempt < MAX_REFILLS_PER_CHARGE;
      if (!askNextWindow && !askAgain) return { allowed: false as const, resetInMs: Math.max(0, (refilled?.resetsAt ?? at) - at) };
    }
  }

  /** Hands back every unspent block (the process stops). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.blocks.keys()].map((key) => this.handBack(key)));
  }

  /** Hands back blocks nobody charged lately. */
  async handBackIdle(): Promise<void> {
    const idleBefore = this.clock.now() - (this.options.idleMs ?? DEFAULT_IDLE_MS);
    await Promise.all([...this.blocks].filter(([, state]) => state.usedAt < idleBefore && state.refill === undefined).map(([key]) => this.handBack(key)));
  }

  private spend(key: string, state: WindowState, limit: number, windowMs: number, now: number): WindowCharge {
    state.remaining--;
    state.usedAt = now;
    // The next block is asked for while half of this one is left, so a steady runner never waits for it.
    if (state.remaining < state.lastBlock / 2 && state.refill === undefined) this.refill(key, limit, windowMs).catch(() => undefined);
    const resetsAt = state.resetsAt;
    let refunded = false;
    return {
      allowed: true,
      receipt: {
        count: 1,
        refund: () => {
          if (refunded) return;
          refunded = true;
          // A hit of a window that has ended needs no giving back: its window is gone.
          if (this.blocks.get(key) === state && state.resetsAt === resetsAt && resetsAt > this.clock.now()) state.remaining++;
        },
      },
    };
  }

  private refill(key: string, limit: number, windowMs: number): Promise<void> {
    const current = this.blocks.get(key);
    if (current?.refill !== undefined) return current.refill;
    const state: WindowState = current ?? { remaining: 0, resetsAt: 0, lastBlock: 0, windowSpent: false, usedAt: this.clock.now() };
    this.blocks.set(key, state);
    const wanted = blockFor(1, limit);
    this.options.observer?.storeCall('window');
    const refill = this.store.takeWindowBlock(key, wanted, limit, windowMs).then(
      (block) => {
        const now = this.clock.now();
        const resetsAt = now + block.resetInMs;
        // A block of a new window replaces what was left of the old one, which ended with it.
        state.remaining = (state.resetsAt > now && Math.abs(state.resetsAt - resetsAt) < windowMs / 2 ? state.remaining : 0) + block.granted;
        state.resetsAt = resetsAt;
        state.lastBlock = wanted;
        state.windowSpent = block.granted < wanted;
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

  private async handBack(key: string): Promise<void> {
    const state = this.blocks.get(key);
    if (state === undefined) return;
    this.blocks.delete(key);
    if (state.remaining <= 0 || state.resetsAt <= this.clock.now()) return;
    this.options.observer?.storeCall('return');
    await this.store.returnWindowBlock(key, state.remaining).catch(() => undefined);
  }
}

interface JobState {
  /** Spans of this replica's quota lease not yet spent. */
  unspent: number;
  /** Spans spent since the last store call: settled by the next one. */
  unreported: number;
  /** Until when the lease may be spent from (the store's lease, less a margin for clock skew). */
  leaseUntil: number;
  /** When the lease should be renewed, even with spans left. */
  renewAt: number;
  lastQuotaBlock: number;
  rateRemaining: number;
  rateResetsAt: number;
  lastRateBlock: number;
  /** The last lease came short of the quota, or of this second's rate, asked for: that limit itself is spent. */
  quotaSpent: boolean;
  rateSpent: boolean;
  usedAt: number;
  limits: JobSpanLimits;
  quotaTtlMs: number;
  refill?: Promise<void>;
}

/** A job's span quota and per-second rate, leased by this replica (the gateway's exports). */
export class JobSpanLedger {
  /** This replica's name in the store's leases: new each process, so a restart never inherits a dead lease. */
  readonly leaseId = randomUUID();
  private readonly jobs = new Map<number, JobState>();
  private readonly clock: LedgerClock;
  private readonly leaseMs: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly store: Pick<GrantStore, 'leaseSpans' | 'returnSpanLease' | 'releaseSpans'>,
    private readonly options: LedgerOptions = {},
  ) {
    this.clock = options.clock ?? systemClock;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.sweeper = setInterval(() => void this.handBackIdle(), (options.idleMs ?? DEFAULT_IDLE_MS) / 2).unref();
  }

  /**
   * Up to `wanted` spans of job `jobId` under its quota and rate: answered without a promise while the
   * leased blocks cover it, else after one store call that refills them.
   */
  charge(jobId: number, wanted: number, limits: JobSpanLimits, quotaTtlMs: number): SpanCharge | Promise<SpanCharge> {
    if (wanted <= 0) return { granted: 0, quotaRoom: 0, rateRoom: 0, receipt: NO_RECEIPT };
    const state = this.jobs.get(jobId);
    const now = this.clock.now();
    if (state !== undefined && this.quotaLeft(state, now) >= wanted && this.rateLeft(state, now) >= wanted) return this.spend(jobId, state, wanted, now);
    return this.refillAndSpend(jobId, wanted, limits, quotaTtlMs);
  }

  private async refillAndSpend(jobId: number, wanted: number, limits: JobSpanLimits, quotaTtlMs: number): Promise<SpanCharge> {
    let waitedForSecond = false;
    for (let attempt = 1; ; attempt++) {
      await this.refill(jobId, wanted, limits, quotaTtlMs);
      const refilled = this.jobs.get(jobId);
      // Handed back meanwhile (the process is stopping): nothing to spend from.
      if (refilled === undefined) return { granted: 0, quotaRoom: 0, rateRoom: 0, receipt: NO_RECEIPT };
      const now = this.clock.now();
      const quotaShort = this.quotaLeft(refilled, now) < wanted;
      const rateShort = this.rateLeft(refilled, now) < wanted;
      if (!quotaShort && !rateShort) return this.spend(jobId, refilled, wanted, now);
      const windowEnding = refilled.rateResetsAt - now;
      if (rateShort && !waitedForSecond && windowEnding < RATE_EDGE_MS) {
        // The second ended (or is about to) between the store's answer and now: its rate is gone, and the
        // next second's is not ours yet. Wait for it rather than refuse spans the job is allowed.
        waitedForSecond = true;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, windowEnding) + 1));
        continue;
      }
      // Charges sharing the refill spent it while the quota and the second's rate still have room: another lease.
      const storeHadRoom = (!quotaShort || !refilled.quotaSpent) && (!rateShort || !refilled.rateSpent);
      if (!storeHadRoom || attempt >= MAX_REFILLS_PER_CHARGE) return this.spend(jobId, refilled, wanted, this.clock.now());
    }
  }

  /** Hands back every lease (the process stops). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.jobs.keys()].map((jobId) => this.handBack(jobId)));
  }

  /** Hands back the leases of jobs that stopped exporting here. */
  async handBackIdle(): Promise<void> {
    const idleBefore = this.clock.now() - (this.options.idleMs ?? DEFAULT_IDLE_MS);
    await Promise.all([...this.jobs].filter(([, state]) => state.usedAt < idleBefore && state.refill === undefined).map(([jobId]) => this.handBack(jobId)));
  }

  private quotaLeft(state: JobState, now: number): number {
    return state.leaseUntil > now ? state.unspent : 0;
  }

  private rateLeft(state: JobState, now: number): number {
    return state.rateResetsAt > now ? state.rateRemaining : 0;
  }

  private spend(jobId: number, state: JobState, wanted: number, now: number): SpanCharge {
    const quotaRoom = this.quotaLeft(state, now);
    const rateRoom = this.rateLeft(state, now);
    const granted = Math.max(0, Math.min(wanted, quotaRoom, rateRoom));
    state.unspent = quotaRoom - granted;
    state.rateRemaining = rateRoom - granted;
    state.unreported += granted;
    state.usedAt = now;
    const low = state.unspent < state.lastQuotaBlock / 2 || state.rateRemaining < state.lastRateBlock / 2 || now >= state.renewAt;
    if (low && state.refill === undefined) void this.refill(jobId, wanted, state.limits, state.quotaTtlMs).catch(() => undefined);
    return { granted, quotaRoom, rateRoom, receipt: granted === 0 ? NO_RECEIPT : this.receipt(jobId, state, granted) };
  }

  /** Spans given back return to the lease while it holds; the per-second rate is not given back (a retry comes later). */
  private receipt(jobId: number, state: JobState, count: number): Receipt {
    let left = count;
    return {
      count,
      refund: (spans = count) => {
        const back = Math.min(left, Math.max(0, spans));
        if (back === 0) return;
        left -= back;
        if (this.jobs.get(jobId) === state && state.leaseUntil > this.clock.now()) {
          state.unspent += back;
          state.unreported -= back;
        } else {
          // The lease is gone: the spans were charged to the job's quota itself.
          this.options.observer?.storeCall('return');
          this.store.releaseSpans(jobId, back).catch(() => undefined);
        }
      },
    };
  }

  private refill(jobId: number, need: number, limits: JobSpanLimits, quotaTtlMs: number): Promise<void> {
    const now = this.clock.now();
    let state = this.jobs.get(jobId);
    if (state?.refill !== undefined) return state.refill;
    if (state === undefined) {
      state = {
        unspent: 0,
        unreported: 0,
        leaseUntil: 0,
        renewAt: 0,
        lastQuotaBlock: 0,
        rateRemaining: 0,
        rateResetsAt: 0,
        lastRateBlock: 0,
        quotaSpent: false,
        rateSpent: false,
        usedAt: now,
        limits,
        quotaTtlMs,
      };
      this.jobs.set(jobId, state);
    }
    const held = state;
    held.limits = limits;
    held.quotaTtlMs = quotaTtlMs;
    const quotaBlock = blockFor(need, limits.perJob);
    const rateBlock = blockFor(need, limits.perSecond);
    const leaseValid = held.leaseUntil > now;
    const quotaWanted = Math.max(0, quotaBlock - (leaseValid ? held.unspent : 0));
    const rateWanted = Math.max(0, rateBlock - this.rateLeft(held, now));
    const reported = held.unreported;
    this.options.observer?.storeCall('spans');
    const refill = this.store
      .leaseSpans(jobId, { leaseId: this.leaseId, spent: reported, quotaWanted, rateWanted, limits, quotaTtlMs, leaseMs: this.leaseMs })
      .then(
        (lease) => {
          const at = this.clock.now();
          held.unreported -= reported;
          // A lease that ran out was taken back by the store: only what it grants now is ours.
          held.unspent = (held.leaseUntil > at ? held.unspent : 0) + lease.quotaGranted;
          // The store's lease runs from the call; a quarter of it is kept as margin for clocks that differ.
          held.leaseUntil = now + (this.leaseMs * 3) / 4;
          held.renewAt = now + this.leaseMs / 2;
          held.rateRemaining = (held.rateResetsAt > at ? held.rateRemaining : 0) + lease.rateGranted;
          held.rateResetsAt = at + lease.rateResetInMs;
          held.lastQuotaBlock = quotaBlock;
          held.lastRateBlock = rateBlock;
          held.quotaSpent = lease.quotaGranted < quotaWanted;
          held.rateSpent = lease.rateGranted < rateWanted;
          held.refill = undefined;
        },
        (error: unknown) => {
          held.refill = undefined;
          throw error;
        },
      );
    held.refill = refill;
    return refill;
  }

  private async handBack(jobId: number): Promise<void> {
    const state = this.jobs.get(jobId);
    if (state === undefined) return;
    this.jobs.delete(jobId);
    if (state.leaseUntil <= this.clock.now() && state.unreported === 0) return;
    this.options.observer?.storeCall('return');
    // What was spent stays charged; only the unspent part of a lease that still holds goes back.
    await this.store.returnSpanLease(jobId, this.leaseId, this.quotaLeft(state, this.clock.now())).catch(() => undefined);
  }
}
