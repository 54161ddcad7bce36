import { OutcomeFacts, ParkedEntry, ParkedKind, ParkingLimits, ParkingStore, ParkingUsage, ParkOutcome, TraceDecision } from './parking';

interface ParkedTrace {
  entries: ParkedEntry[];
  spans: number;
  bytes: number;
  seq: number;
  /** When its time limit ends, while undecided. */
  overdueAt?: number;
  /** Epoch ms until which an overdue claim holds. */
  claimedUntil?: number;
  expiresAt: number;
}

interface Remembered<T> {
  value: T;
  expiresAt: number;
}

/** The parking store of one process (embedded default, and the memory side of the store suites). */
export class MemoryParkingStore implements ParkingStore {
  private readonly traces = new Map<string, ParkedTrace>();
  private readonly decisions = new Map<string, Remembered<TraceDecision>>();
  private readonly facts = new Map<string, Remembered<{ statuses: Set<string>; longestQueueMs: number; whenNoOutcome?: 'keep' | 'drop' }>>();
  private totalBytes = 0;

  constructor(private readonly now: () => number = Date.now) {}

  async park(traceId: string, entry: { kind: ParkedKind; body: Buffer; spans: number }, limits: ParkingLimits): Promise<ParkOutcome> {
    const decision = this.live(this.decisions, traceId);
    if (decision !== undefined) return { kind: 'decided', decision };
    const trace = this.trace(traceId);
    const bytes = entry.body.length;
    if ((trace?.spans ?? 0) + entry.spans > limits.maxTraceSpans) return { kind: 'full', limit: 'trace_spans' };
    if ((trace?.bytes ?? 0) + bytes > limits.maxTraceBytes) return { kind: 'full', limit: 'trace_bytes' };
    if (this.totalBytes + bytes > limits.maxTotalBytes) return { kind: 'full', limit: 'total_bytes' };
    const now = this.now();
    const parked = trace ?? { entries: [], spans: 0, bytes: 0, seq: 0, overdueAt: now + limits.holdMs, expiresAt: 0 };
    parked.seq++;
    parked.entries.push({ id: String(parked.seq), kind: entry.kind, body: Buffer.from(entry.body), spans: entry.spans });
    parked.spans += entry.spans;
    parked.bytes += bytes;
    parked.expiresAt = Math.max(parked.expiresAt, now + limits.holdMs + limits.rememberMs);
    this.traces.set(traceId, parked);
    this.totalBytes += bytes;
    return { kind: 'parked' };
  }

  async noteFacts(traceId: string, facts: Partial<OutcomeFacts>, ttlMs: number): Promise<void> {
    const known = this.live(this.facts, traceId) ?? { statuses: new Set<string>(), longestQueueMs: 0 };
    for (const status of facts.statuses ?? []) known.statuses.add(status);
    known.longestQueueMs = Math.max(known.longestQueueMs, facts.longestQueueMs ?? 0);
    if (facts.whenNoOutcome !== undefined) known.whenNoOutcome = facts.whenNoOutcome;
    const expiresAt = Math.max(this.facts.get(traceId)?.expiresAt ?? 0, this.now() + ttlMs);
    this.facts.set(traceId, { value: known, expiresAt });
  }

  async readFacts(traceId: string): Promise<OutcomeFacts> {
    const known = this.live(this.facts, traceId);
    return {
      statuses: [...(known?.statuses ?? [])].sort(),
      longestQueueMs: known?.longestQueueMs ?? 0,
      ...(known?.whenNoOutcome === undefined ? {} : { whenNoOutcome: known.whenNoOutcome }),
    };
  }

  async decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ decision: TraceDecision; changed: boolean }> {
    const recorded = this.live(this.decisions, traceId);
    if (recorded !== undefined && (recorded.keep || !decision.keep)) return { decision: recorded, changed: false };
    this.decisions.set(traceId, { value: decision, expiresAt: this.now() + rememberMs });
    return { decision, changed: true };
  }

  async reopen(traceId: string): Promise<boolean> {
    if (this.live(this.decisions, traceId)?.keep !== false) return false;
    this.decisions.delete(traceId);
    return true;
  }

  async findDecision(traceId: string): Promise<TraceDecision | null> {
    return this.live(this.decisions, traceId) ?? null;
  }

  async parked(traceId: string): Promise<ParkedEntry[]> {
    return [...(this.trace(traceId)?.entries ?? [])];
  }

  async release(traceId: string, entryIds: readonly string[]): Promise<void> {
    const trace = this.trace(traceId);
    if (trace === undefined) return;
    const gone = new Set(entryIds);
    for (const entry of trace.entries.filter(({ id }) => gone.has(id))) {
      trace.spans -= entry.spans;
      trace.bytes -= entry.body.length;
      this.totalBytes -= entry.body.length;
    }
    trace.entries = trace.entries.filter(({ id }) => !gone.has(id));
  }

  async claimOverdue(max: number, leaseMs: number): Promise<string[]> {
    const now = this.now();
    const claimed: string[] = [];
    for (const [traceId] of this.traces) {
      const trace = this.trace(traceId);
      if (trace?.overdueAt === undefined || trace.overdueAt > now || (trace.claimedUntil ?? 0) > now) continue;
      trace.claimedUntil = now + leaseMs;
      claimed.push(traceId);
      if (claimed.length >= max) break;
    }
    return claimed;
  }

  async settled(traceId: string): Promise<void> {
    const trace = this.trace(traceId);
    if (trace !== undefined) trace.overdueAt = undefined;
  }

  async usage(): Promise<ParkingUsage> {
    let traces = 0;
    let spans = 0;
    for (const [traceId] of this.traces) {
      const trace = this.trace(traceId);
      if (trace === undefined) continue;
      // As on Redis: traces still waiting for their decision.
      if (trace.overdueAt !== undefined) traces++;
      spans += trace.spans;
    }
    return { traces, spans, bytes: this.totalBytes };
  }

  close(): void {
    this.traces.clear();
    this.decisions.clear();
    this.facts.clear();
  }

  /** A trace past its memory is gone, its bytes given back. */
  private trace(traceId: string): ParkedTrace | undefined {
    const trace = this.traces.get(traceId);
    if (trace !== undefined && trace.expiresAt <= this.now()) {
      this.totalBytes -= trace.bytes;
      this.traces.delete(traceId);
      return undefined;
    }
    return trace;
  }

  private live<T>(records: Map<string, Remembered<T>>, traceId: string): T | undefined {
    const record = records.get(traceId);
    if (record === undefined) return undefined;
    if (record.expiresAt > this.now()) return record.value;
    records.delete(traceId);
    return undefined;
  }
}
