import { ClaimedEntry, EnqueueOutcome, OutboxDepth, OutboxEntry, OutboxLimits, OutboxStore, weightOf } from './outbox';

type StoredEntry = Omit<ClaimedEntry, 'attempts' | 'leaseRanOut'>;

/** Single-process outbox: the embedded default when no Redis is configured (SPEC §7). */
export class MemoryOutboxStore implements OutboxStore {
  /** Keys ever enqueued, until they are forgotten. */
  private readonly remembered = new Map<string, number>();
  /** Waiting entries by key, with the time each is next due: their bodies as bytes once, not at every claim. */
  private readonly waiting = new Map<string, { entry: StoredEntry; dueAt: number; attempts: number; leased: boolean }>();
  /** Spans waiting: a bundle counts its spans. */
  private spans = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    const now = this.now();
    let queued = 0;
    let duplicates = 0;
    let refused = 0;
    for (const entry of entries) {
      const spans = entry.members ?? [entry];
      // A bundle whole, or else as its spans (see bundled).
      if (entry.members !== undefined && this.spans + spans.length <= limits.maxSpans && !spans.some((span) => this.remembers(span.key, now))) {
        for (const span of spans) this.remembered.set(span.key, now + limits.rememberMs);
        this.wait(entry, now, spans.length);
        queued += spans.length;
        continue;
      }
      for (const span of spans) {
        if (this.remembers(span.key, now)) duplicates++;
        else if (this.spans >= limits.maxSpans) refused++;
        else {
          this.remembered.set(span.key, now + limits.rememberMs);
          this.wait(span, now, 1);
          queued++;
        }
      }
    }
    return { queued, duplicates, refused };
  }

  async claim(max: number, leaseMs: number): Promise<ClaimedEntry[]> {
    const now = this.now();
    const claimed: ClaimedEntry[] = [];
    let spans = 0;
    for (const waiting of this.waiting.values()) {
      if (waiting.dueAt > now) continue;
      const weight = weightOf(waiting.entry.key);
      if (spans > 0 && spans + weight > max) break;
      spans += weight;
      waiting.dueAt = now + leaseMs;
      const { key, body, enqueuedAt } = waiting.entry;
      claimed.push({ key, body, enqueuedAt, attempts: waiting.attempts, leaseRanOut: waiting.leased });
      waiting.leased = true;
    }
    return claimed;
  }

  async acknowledge(keys: readonly string[]): Promise<void> {
    for (const key of keys) if (this.waiting.delete(key)) this.spans -= weightOf(key);
  }

  async retry(keys: readonly string[], delayMs: number): Promise<void> {
    this.due(keys, this.now() + delayMs, 1);
  }

  async putBack(keys: readonly string[]): Promise<void> {
    this.due(keys, this.now(), 0);
  }

  async depth(): Promise<OutboxDepth> {
    let oldest: number | undefined;
    for (const { entry } of this.waiting.values()) oldest = Math.min(oldest ?? Infinity, entry.enqueuedAt);
    return { spans: this.spans, ...(oldest === undefined ? {} : { oldestEnqueuedAt: oldest }) };
  }

  close(): void {
    clearInterval(this.sweeper);
    this.remembered.clear();
    this.waiting.clear();
    this.spans = 0;
  }

  private remembers(key: string, now: number): boolean {
    return (this.remembered.get(key) ?? 0) > now;
  }

  private wait(entry: OutboxEntry, now: number, spans: number): void {
    const stored = { key: entry.key, body: Buffer.from(entry.body), enqueuedAt: entry.enqueuedAt };
    this.waiting.set(entry.key, { entry: stored, dueAt: now, attempts: 0, leased: false });
    this.spans += spans;
  }

  private due(keys: readonly string[], dueAt: number, attempts: number): void {
    for (const key of keys) {
      const waiting = this.waiting.get(key);
      if (waiting === undefined) continue;
      // Moved to the end, so entries put back go after the others due now.
      this.waiting.delete(key);
      this.waiting.set(key, { ...waiting, dueAt, attempts: waiting.attempts + attempts, leased: false });
    }
  }

  private sweep(): void {
    const now = this.now();
    for (const [key, forgetAt] of this.remembered) if (forgetAt <= now && !this.waiting.has(key)) this.remembered.delete(key);
  }
}
