import { randomUUID } from 'node:crypto';
import { ASK_AGAIN, BlockLease, blockFor, HeldBlock, LedgerOptions, NO_RECEIPT, Receipt } from './block-lease';
import { JobSpanLimits, LimitStore } from './limit-store';

export interface SpanCharge {
  /** Spans granted: min(wanted, quota room, rate room). */
  readonly granted: number;
  /** What the quota and the current second's rate had for this charge, to enforce exactly that much. */
  readonly quotaRoom: number;
  readonly rateRoom: number;
  readonly receipt: Receipt;
}

const NOTHING: SpanCharge = { granted: 0, quotaRoom: 0, rateRoom: 0, receipt: NO_RECEIPT };
/** A rate block that ends sooner than this after it was granted is waited out, and the next second's taken. */
const RATE_EDGE_MS = 50;
const DEFAULT_LEASE_MS = 30_000;

interface JobLease extends HeldBlock {
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
  limits: JobSpanLimits;
  quotaTtlMs: number;
}

interface SpanNeed {
  readonly wanted: number;
  readonly limits: JobSpanLimits;
  readonly quotaTtlMs: number;
}

/** A job's span quota and per-second rate, leased by this replica (the gateway's exports). */
export class JobSpanLedger extends BlockLease<number, JobLease, SpanNeed> {
  /** This replica's name in the store's leases: new each process, so a restart never inherits a dead lease. */
  readonly leaseId = randomUUID();
  private readonly leaseMs: number;

  constructor(
    private readonly store: Pick<LimitStore, 'leaseSpans' | 'returnSpanLease' | 'releaseSpans'>,
    options: LedgerOptions = {},
  ) {
    super('spans', options);
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  }

  /**
   * Up to `wanted` spans of job `jobId` under its quota and rate: answered without a promise while the
   * leased blocks cover it, else after one store call that refills them.
   */
  charge(jobId: number, wanted: number, limits: JobSpanLimits, quotaTtlMs: number): SpanCharge | Promise<SpanCharge> {
    if (wanted <= 0) return NOTHING;
    const state = this.held.get(jobId);
    const now = this.clock.now();
    if (state !== undefined && this.quotaLeft(state, now) >= wanted && this.rateLeft(state, now) >= wanted) return this.spend(jobId, state, wanted, now);
    let waitedForSecond = false;
    return this.refillAndDecide(jobId, { wanted, limits, quotaTtlMs }, async (refilled, lastAttempt) => {
      // Handed back meanwhile (the process is stopping): nothing to spend from.
      if (refilled === undefined) return NOTHING;
      const at = this.clock.now();
      const quotaShort = this.quotaLeft(refilled, at) < wanted;
      const rateShort = this.rateLeft(refilled, at) < wanted;
      if (!quotaShort && !rateShort) return this.spend(jobId, refilled, wanted, at);
      const windowEnding = refilled.rateResetsAt - at;
      if (rateShort && !waitedForSecond && windowEnding < RATE_EDGE_MS) {
        // The second ended (or is about to) between the store's answer and now: its rate is gone, and the
        // next second's is not ours yet. Wait for it rather than refuse spans the job is allowed.
        waitedForSecond = true;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, windowEnding) + 1));
        return ASK_AGAIN;
      }
      // Charges sharing the refill spent it while the quota and the second's rate still have room: another lease.
      const storeHadRoom = (!quotaShort || !refilled.quotaSpent) && (!rateShort || !refilled.rateSpent);
      if (storeHadRoom && !lastAttempt) return ASK_AGAIN;
      return this.spend(jobId, refilled, wanted, this.clock.now());
    });
  }

  protected emptyBlock({ limits, quotaTtlMs }: SpanNeed, now: number): JobLease {
    return {
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
  }

  protected async takeBlock(jobId: number, held: JobLease, { wanted, limits, quotaTtlMs }: SpanNeed): Promise<void> {
    const now = this.clock.now();
    held.limits = limits;
    held.quotaTtlMs = quotaTtlMs;
    const quotaBlock = blockFor(wanted, limits.perJob);
    const rateBlock = blockFor(wanted, limits.perSecond);
    const quotaWanted = Math.max(0, quotaBlock - (held.leaseUntil > now ? held.unspent : 0));
    const rateWanted = Math.max(0, rateBlock - this.rateLeft(held, now));
    const reported = held.unreported;
    const lease = await this.store.leaseSpans(jobId, {
      leaseId: this.leaseId,
      spent: reported,
      quotaWanted,
      rateWanted,
      limits,
      quotaTtlMs,
      leaseMs: this.leaseMs,
    });
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
  }

  protected giveBack(jobId: number, state: JobLease): Promise<void> | undefined {
    const now = this.clock.now();
    if (state.leaseUntil <= now && state.unreported === 0) return undefined;
    // What was spent stays charged; only the unspent part of a lease that still holds goes back.
    return this.store.returnSpanLease(jobId, this.leaseId, this.quotaLeft(state, now));
  }

  private quotaLeft(state: JobLease, now: number): number {
    return state.leaseUntil > now ? state.unspent : 0;
  }

  private rateLeft(state: JobLease, now: number): number {
    return state.rateResetsAt > now ? state.rateRemaining : 0;
  }

  private spend(jobId: number, state: JobLease, wanted: number, now: number): SpanCharge {
    const quotaRoom = this.quotaLeft(state, now);
    const rateRoom = this.rateLeft(state, now);
    const granted = Math.max(0, Math.min(wanted, quotaRoom, rateRoom));
    state.unspent = quotaRoom - granted;
    state.rateRemaining = rateRoom - granted;
    state.unreported += granted;
    state.usedAt = now;
    const low = state.unspent < state.lastQuotaBlock / 2 || state.rateRemaining < state.lastRateBlock / 2 || now >= state.renewAt;
    this.refillEarly(jobId, { wanted, limits: state.limits, quotaTtlMs: state.quotaTtlMs }, state, low);
    return { granted, quotaRoom, rateRoom, receipt: granted === 0 ? NO_RECEIPT : this.receipt(jobId, state, granted) };
  }

  /** Spans given back return to the lease while it holds; the per-second rate is not given back (a retry comes later). */
  private receipt(jobId: number, state: JobLease, count: number): Receipt {
    let left = count;
    return {
      count,
      refund: (spans = count) => {
        const back = Math.min(left, Math.max(0, spans));
        if (back === 0) return;
        left -= back;
        if (this.held.get(jobId) === state && state.leaseUntil > this.clock.now()) {
          state.unspent += back;
          state.unreported -= back;
        } else {
          // The lease is gone: the spans were charged to the job's quota itself.
          this.observer?.storeCall('return');
          this.store.releaseSpans(jobId, back).catch(() => undefined);
        }
      },
    };
  }
}
