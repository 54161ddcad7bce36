import { Grant, GrantStore, JobSpanLimits, RateWindow, SpanReservation } from './grant';

/** Single-process store: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryGrantStore implements GrantStore {
  private readonly grants = new Map<number, Grant>();
  private readonly jobIdsByTokenDigest = new Map<string, number>();
  private readonly windows = new Map<string, { count: number; resetsAt: number }>();
  private readonly quotas = new Map<string, { used: number; resetsAt: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of entries nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async saveGrant(grant: Grant): Promise<Grant> {
    const previous = await this.findGrant(grant.jobId);
    if (previous === null && grant.expiresAt <= this.now()) return { ...grant };
    if (previous?.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.delete(previous.jobTokenDigest);
    const stored: Grant =
      previous === null
        ? { ...grant }
        : { ...grant, expiresAt: previous.expiresAt, ...(previous.revokedAt === undefined ? {} : { revokedAt: previous.revokedAt }) };
    this.grants.set(grant.jobId, stored);
    if (grant.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.set(grant.jobTokenDigest, grant.jobId);
    return { ...stored };
  }

  async findGrant(jobId: number): Promise<Grant | null> {
    const grant = this.grants.get(jobId);
    if (grant === undefined) return null;
    if (grant.expiresAt <= this.now()) {
      this.grants.delete(jobId);
      return null;
    }
    return { ...grant };
  }

  async findGrantByJobTokenDigest(jobTokenDigest: string): Promise<Grant | null> {
    const jobId = this.jobIdsByTokenDigest.get(jobTokenDigest);
    if (jobId === undefined) return null;
    const grant = await this.findGrant(jobId);
    return grant?.jobTokenDigest === jobTokenDigest ? grant : null;
  }

  async revokeGrant(jobId: number, revokedAt: number): Promise<Grant | null> {
    const grant = await this.findGrant(jobId);
    if (grant === null) return null;
    const revoked = { ...grant, revokedAt: Math.min(grant.revokedAt ?? Infinity, revokedAt) };
    this.grants.set(jobId, revoked);
    return { ...revoked };
  }

  async hitRateWindow(key: string, limit: number, windowMs: number): Promise<RateWindow> {
    const now = this.now();
    let window = this.windows.get(key);
    if (window === undefined || window.resetsAt <= now) {
      window = { count: 0, resetsAt: now + windowMs };
      this.windows.set(key, window);
    }
    window.count++;
    return { allowed: window.count <= limit, resetInMs: window.resetsAt - now };
  }

  async releaseRateWindowHit(key: string): Promise<void> {
    const window = this.windows.get(key);
    if (window === undefined || window.resetsAt <= this.now()) return;
    window.count = Math.max(0, window.count - 1);
  }

  async reserveSpans(jobId: number, wanted: number, limits: JobSpanLimits, quotaTtlMs: number): Promise<SpanReservation> {
    const now = this.now();
    const counter = (key: string, ttlMs: number) => {
      let current = this.quotas.get(key);
      if (current === undefined || current.resetsAt <= now) {
        current = { used: 0, resetsAt: now + ttlMs };
        this.quotas.set(key, current);
      }
      return current;
    };
    const quota = counter(`job:${jobId}:spans`, quotaTtlMs);
    const rate = counter(`job:${jobId}:span-rate`, 1000);
    const quotaRoom = Math.max(0, limits.perJob - quota.used);
    const rateRoom = Math.max(0, limits.perSecond - rate.used);
    const granted = Math.max(0, Math.min(wanted, quotaRoom, rateRoom));
    quota.used += granted;
    rate.used += granted;
    return { granted, quotaRoom, rateRoom };
  }

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    const quota = this.quotas.get(`job:${jobId}:spans`);
    if (quota === undefined || quota.resetsAt <= this.now()) return;
    quota.used = Math.max(0, quota.used - spans);
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.grants.clear();
    this.jobIdsByTokenDigest.clear();
    this.windows.clear();
    this.quotas.clear();
  }

  private sweep(): void {
    const now = this.now();
    for (const [jobId, grant] of this.grants) {
      if (grant.expiresAt > now) continue;
      this.grants.delete(jobId);
      if (grant.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.delete(grant.jobTokenDigest);
    }
    for (const [key, window] of this.windows) if (window.resetsAt <= now) this.windows.delete(key);
    for (const [key, quota] of this.quotas) if (quota.resetsAt <= now) this.quotas.delete(key);
  }
}
