import { MemoryTracedWorkStore } from '../traced-work/memory-traced-work-store';
import { MIN_TRACED_MEMORY_MS, TracedJob } from '../traced-work/traced-work';
import { Grant, GrantStore, SaveGrantOptions } from './grant';

/** Single-process grants: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryGrantStore implements GrantStore {
  private readonly grants = new Map<number, Grant>();
  private readonly jobIdsByTokenDigest = new Map<string, number>();
  private readonly sweeper: NodeJS.Timeout;

  /** `tracedWork`: where `saveGrant` remembers the traced job, as the Redis store writes it beside the grant. */
  constructor(
    private readonly now: () => number = Date.now,
    private readonly tracedWork: MemoryTracedWorkStore = new MemoryTracedWorkStore(now),
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of entries nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async saveGrant(grant: Grant, tracedJob?: TracedJob, { indexJobToken = true }: SaveGrantOptions = {}): Promise<Grant> {
    const previous = await this.findGrant(grant.jobId);
    const remember = (until: number) => {
      if (tracedJob !== undefined) this.tracedWork.rememberTracedJob(tracedJob, Math.max(until, this.now() + MIN_TRACED_MEMORY_MS));
    };
    if (previous === null && grant.expiresAt <= this.now()) {
      remember(0);
      return { ...grant };
    }
    if (previous?.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.delete(previous.jobTokenDigest);
    const stored: Grant =
      previous === null
        ? { ...grant }
        : { ...grant, expiresAt: previous.expiresAt, ...(previous.revokedAt === undefined ? {} : { revokedAt: previous.revokedAt }) };
    this.grants.set(grant.jobId, stored);
    if (indexJobToken && grant.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.set(grant.jobTokenDigest, grant.jobId);
    remember(stored.expiresAt);
    return { ...stored };
  }

  async withdrawGrant(grant: Grant, tracedJob: TracedJob): Promise<boolean> {
    const current = await this.tracedWork.findTracedJob(grant.jobId);
    if (current === null || JSON.stringify(current) !== JSON.stringify(tracedJob)) return false;
    const stored = await this.findGrant(grant.jobId);
    if (stored !== null && stored.expiresAt !== grant.expiresAt) return false;
    this.grants.delete(grant.jobId);
    this.tracedWork.forgetTracedJob(grant.jobId);
    return true;
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

  close(): void {
    clearInterval(this.sweeper);
    this.grants.clear();
    this.jobIdsByTokenDigest.clear();
  }

  private sweep(): void {
    const now = this.now();
    for (const [jobId, grant] of this.grants) {
      if (grant.expiresAt > now) continue;
      this.grants.delete(jobId);
      if (grant.jobTokenDigest !== undefined) this.jobIdsByTokenDigest.delete(grant.jobTokenDigest);
    }
  }
}
