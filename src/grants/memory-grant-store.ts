import { Grant, GrantStore, SaveGrantOptions, SpanLease, SpanLeaseRequest, WindowBlock } from './grant';
import {
  ClaimedSpan,
  EnqueueOutcome,
  OutboxDepth,
  OutboxLimits,
  OutboxSpan,
  MIN_TRACED_MEMORY_MS,
  Remembered,
  RunnerJobEnd,
  TracedJob,
  TracedPipeline,
} from './traced-work';

interface Expiring<T> {
  readonly value: T;
  readonly expiresAt: number;
}

/** Single-process store: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryGrantStore implements GrantStore {
  private readonly grants = new Map<number, Grant>();
  private readonly jobIdsByTokenDigest = new Map<string, number>();
  private readonly windows = new Map<string, { count: number; resetsAt: number }>();
  private readonly quotas = new Map<string, { used: number; resetsAt: number }>();
  /** Each job's outstanding span leases by replica: the unspent spans and when the lease runs out. */
  private readonly spanLeases = new Map<number, Map<string, { amount: number; expiresAt: number }>>();
  private readonly tracedJobs = new Map<number, Expiring<TracedJob>>();
  private readonly tracedPipelines = new Map<number, Expiring<TracedPipeline>>();
  private readonly pipelineSpanVersions = new Map<number, Expiring<number>>();
  private readonly runnerJobEnds = new Map<number, Expiring<Map<number, RunnerJobEnd>>>();
  /** Span ids ever enqueued, until they are forgotten. */
  private readonly rememberedSpans = new Map<string, number>();
  /** Waiting spans by id, with the time each is next due. */
  private readonly outbox = new Map<string, { span: OutboxSpan; dueAt: number; attempts: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of entries nobody asks about again.
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async saveGrant(grant: Grant, tracedJob?: TracedJob, { indexJobToken = true }: SaveGrantOptions = {}): Promise<Grant> {
    const previous = await this.findGrant(grant.jobId);
    const remember = (until: number) => {
      if (tracedJob !== undefined)
        this.tracedJobs.set(tracedJob.jobId, { value: { ...tracedJob }, expiresAt: Math.max(until, this.now() + MIN_TRACED_MEMORY_MS) });
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

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    const quota = this.quotas.get(`job:${jobId}:spans`);
    if (quota === undefined || quota.resetsAt <= this.now()) return;
    quota.used = Math.max(0, quota.used - spans);
  }

  async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock> {
    const now = this.now();
    let window = this.windows.get(key);
    if (window === undefined || window.resetsAt <= now) {
      window = { count: 0, resetsAt: now + windowMs };
      this.windows.set(key, window);
    }
    const granted = Math.max(0, Math.min(wanted, limit - window.count));
    window.count += granted;
    return { granted, resetInMs: window.resetsAt - now };
  }

  async returnWindowBlock(key: string, count: number): Promise<void> {
    const window = this.windows.get(key);
    if (window === undefined || window.resetsAt <= this.now()) return;
    window.count = Math.max(0, window.count - count);
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
    const quota = this.quotas.get(`job:${jobId}:spans`);
    if (quota === undefined || quota.resetsAt <= this.now()) return;
    quota.used = Math.max(0, quota.used - Math.min(unspent, lease.amount));
  }

  async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    const now = this.now();
    for (const { value: pipeline, ttlMs } of pipelines) {
      const kept = this.tracedPipelines.get(pipeline.pipelineId);
      this.tracedPipelines.set(pipeline.pipelineId, { value: { ...pipeline }, expiresAt: Math.max(now + ttlMs, kept?.expiresAt ?? 0) });
    }
  }

  async findTracedJob(jobId: number): Promise<TracedJob | null> {
    return this.live(this.tracedJobs, jobId);
  }

  async findTracedPipeline(pipelineId: number): Promise<TracedPipeline | null> {
    return this.live(this.tracedPipelines, pipelineId);
  }

  async raisePipelineSpanVersion(pipelineId: number, version: number, ttlMs: number): Promise<number> {
    const entry = this.pipelineSpanVersions.get(pipelineId);
    const kept = entry === undefined || entry.expiresAt <= this.now() ? 0 : entry.value;
    if (version > kept) this.pipelineSpanVersions.set(pipelineId, { value: version, expiresAt: this.now() + ttlMs });
    return Math.max(kept, version);
  }

  async recordRunnerJobEnd(pipelineId: number, end: RunnerJobEnd, ttlMs: number): Promise<RunnerJobEnd[]> {
    const now = this.now();
    const kept = this.runnerJobEnds.get(pipelineId);
    const ends = kept === undefined || kept.expiresAt <= now ? new Map<number, RunnerJobEnd>() : kept.value;
    ends.set(end.jobId, { ...end });
    this.runnerJobEnds.set(pipelineId, { value: ends, expiresAt: Math.max(now + ttlMs, kept?.expiresAt ?? 0) });
    return [...ends.values()].map((job) => ({ ...job }));
  }

  async enqueueSpans(spans: readonly OutboxSpan[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const now = this.now();
    let queued = 0;
    let duplicates = 0;
    let refused = 0;
    for (const span of spans) {
      if ((this.rememberedSpans.get(span.spanId) ?? 0) > now) duplicates++;
      else if (this.outbox.size >= limits.maxSpans) refused++;
      else {
        this.rememberedSpans.set(span.spanId, now + limits.rememberMs);
        this.outbox.set(span.spanId, { span, dueAt: now, attempts: 0 });
        queued++;
      }
    }
    return { queued, duplicates, refused };
  }

  async claimSpans(max: number, leaseMs: number): Promise<ClaimedSpan[]> {
    const now = this.now();
    const claimed: ClaimedSpan[] = [];
    for (const entry of this.outbox.values()) {
      if (claimed.length >= max) break;
      if (entry.dueAt > now) continue;
      entry.dueAt = now + leaseMs;
      claimed.push({ ...entry.span, attempts: entry.attempts });
    }
    return claimed;
  }

  async acknowledgeSpans(spanIds: readonly string[]): Promise<void> {
    for (const spanId of spanIds) this.outbox.delete(spanId);
  }

  async retrySpans(spanIds: readonly string[], delayMs: number): Promise<void> {
    const dueAt = this.now() + delayMs;
    for (const spanId of spanIds) {
      const entry = this.outbox.get(spanId);
      if (entry === undefined) continue;
      entry.dueAt = dueAt;
      entry.attempts++;
    }
  }

  async outboxDepth(): Promise<OutboxDepth> {
    let oldest: number | undefined;
    for (const { span } of this.outbox.values()) oldest = Math.min(oldest ?? Infinity, span.enqueuedAt);
    return { spans: this.outbox.size, ...(oldest === undefined ? {} : { oldestEnqueuedAt: oldest }) };
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.grants.clear();
    this.jobIdsByTokenDigest.clear();
    this.windows.clear();
    this.quotas.clear();
    this.spanLeases.clear();
    this.tracedJobs.clear();
    this.tracedPipelines.clear();
    this.pipelineSpanVersions.clear();
    this.runnerJobEnds.clear();
    this.rememberedSpans.clear();
    this.outbox.clear();
  }

  /** A quota or rate counter, started anew once its time is up. */
  private counter(key: string, ttlMs: number, now: number): { used: number; resetsAt: number } {
    let current = this.quotas.get(key);
    if (current === undefined || current.resetsAt <= now) {
      current = { used: 0, resetsAt: now + ttlMs };
      this.quotas.set(key, current);
    }
    return current;
  }

  private live<K, T>(entries: Map<K, Expiring<T>>, key: K): T | null {
    const entry = entries.get(key);
    if (entry === undefined) return null;
    if (entry.expiresAt <= this.now()) {
      entries.delete(key);
      return null;
    }
    return { ...entry.value };
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
    for (const [jobId, leases] of this.spanLeases) if (!this.quotas.has(`job:${jobId}:spans`) || leases.size === 0) this.spanLeases.delete(jobId);
    for (const entries of [this.tracedJobs, this.tracedPipelines, this.pipelineSpanVersions, this.runnerJobEnds] as Array<Map<number, Expiring<unknown>>>) {
      for (const [key, entry] of entries) if (entry.expiresAt <= now) entries.delete(key);
    }
    for (const [spanId, forgetAt] of this.rememberedSpans) if (forgetAt <= now && !this.outbox.has(spanId)) this.rememberedSpans.delete(spanId);
  }
}
