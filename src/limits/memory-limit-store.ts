import { LimitStore, SpanLease, SpanLeaseRequest, WindowBlock } from './limit-store';

interface Counter {
  used: number;
  resetsAt: number;
}

/** Single-process limits: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryLimitStore implements LimitStore {
  /** Windows, quotas and rates by key, each started anew once its time is up. */
  private readonly counters = new Map<string, Counter>();
  /** Each job's outstanding span leases by replica: the unspent spans and when the lease runs out. */
  private readonly spanLeases = new Map<number, Map<string, { amount: number; expiresAt: number }>>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of entries nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock> {
    const now = this.now();
    const window = this.counter(`window:${key}`, windowMs, now);
    const granted = Math.max(0, Math.min(wanted, limit - window.used));
    window.used += granted;
    return { granted, resetInMs: window.resetsAt - now };
  }

  async returnWindowBlock(key: string, count: number): Promise<void> {
    this.giveBack(`window:${key}`, count);
  }

  async leaseSpans(jobId: number, request: SpanLeaseRequest): Promise<SpanLease> {
    const now = this.now();
    const quota = this.counter(`job:${jobId}:spans`, request.quotaTtlMs, now);
    const rate = this.counter(`job:${jobId}:span-rate`, 1000, now);
    const leases = this.spanLeases.get(jobId) ?? new Map<string, { amount: number; expiresAt: number }>();
    this.spanLeases.set(jobId, leases);
    for (const [leaseId, lease] of leases) {
      if (lease.expiresAt > now) continue;
      quota.used = Math.max(0, quota.used - lease.amount);
      leases.delete(leaseId);
    }
    const own = Math.max(0, (leases.get(request.leaseId)?.amount ?? 0) - request.spent);
    const quotaGranted = Math.max(0, Math.min(request.quotaWanted, request.limits.perJob - quota.used));
    quota.used += quotaGranted;
    if (own + quotaGranted > 0) leases.set(request.leaseId, { amount: own + quotaGranted, expiresAt: now + request.leaseMs });
    else leases.delete(request.leaseId);
    const rateGranted = Math.max(0, Math.min(request.rateWanted, request.limits.perSecond - rate.used));
    rate.used += rateGranted;
    return { quotaGranted, rateGranted, rateResetInMs: rate.resetsAt - now };
  }

  async returnSpanLease(jobId: number, leaseId: string, unspent: number): Promise<void> {
    const leases = this.spanLeases.get(jobId);
    const lease = leases?.get(leaseId);
    if (lease === undefined) return;
    leases!.delete(leaseId);
    this.giveBack(`job:${jobId}:spans`, Math.min(unspent, lease.amount));
  }

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    this.giveBack(`job:${jobId}:spans`, spans);
  }

  close(): void {
    clearInterval(this.sweeper);
    this.counters.clear();
    this.spanLeases.clear();
  }

  /** A window, quota or rate counter, started anew once its time is up. */
  private counter(key: string, ttlMs: number, now: number): Counter {
    let current = this.counters.get(key);
    if (current === undefined || current.resetsAt <= now) {
      current = { used: 0, resetsAt: now + ttlMs };
      this.counters.set(key, current);
    }
    return current;
  }

  /** Never below zero; an ended counter stays ended. */
  private giveBack(key: string, count: number): void {
    const counter = this.counters.get(key);
    if (counter === undefined || counter.resetsAt <= this.now()) return;
    counter.used = Math.max(0, counter.used - count);
  }

  private sweep(): void {
    const now = this.now();
    for (const [key, counter] of this.counters) if (counter.resetsAt <= now) this.counters.delete(key);
    for (const [jobId, leases] of this.spanLeases) if (!this.counters.has(`job:${jobId}:spans`) || leases.size === 0) this.spanLeases.delete(jobId);
  }
}
