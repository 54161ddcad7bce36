import { Grant, GrantStore } from './grant';

/** Single-process store: the embedded default when no REDIS_URL is set (SPEC §7). */
export class MemoryGrantStore implements GrantStore {
  private readonly grants = new Map<number, Grant>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly now: () => number = Date.now, sweepIntervalMs = 60_000) {
    // Reads check expiry themselves; the sweep only returns memory of grants nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async saveGrant(grant: Grant): Promise<void> {
    if (grant.expiresAt <= this.now()) {
      this.grants.delete(grant.jobId);
      return;
    }
    this.grants.set(grant.jobId, { ...grant });
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

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.grants.clear();
  }

  private sweep(): void {
    const now = this.now();
    for (const [jobId, grant] of this.grants) if (grant.expiresAt <= now) this.grants.delete(jobId);
  }
}
