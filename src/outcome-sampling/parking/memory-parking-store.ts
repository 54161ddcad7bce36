import {
  EntryToPark,
  FactsUpdate,
  idToPark,
  OutcomeFacts,
  ParkedEntry,
  ParkedEntryId,
  ParkingLimits,
  ParkingStore,
  ParkingUsage,
  ParkOutcome,
  RootOutcome,
  TraceDecision,
} from './parking';

interface ParkedTrace {
  readonly entries: Map<string, ParkedEntry>;
  spans: number;
  bytes: number;
  expiresAt: number;
}

interface Remembered<T> {
  value: T;
  expiresAt: number;
}

interface KnownFacts {
  statuses: Set<string>;
  longestQueueMs: number;
  whenNoOutcome?: 'keep' | 'drop';
  rootEnd?: RootOutcome;
  runningChildren: Set<number>;
  finishedRootJobs: Set<number>;
}

/** The parking store of one process (embedded default, and the memory side of the store suites). */
export class MemoryParkingStore implements ParkingStore {
  private readonly traces = new Map<string, ParkedTrace>();
  private readonly decisions = new Map<string, Remembered<TraceDecision>>();
  private readonly facts = new Map<string, Remembered<KnownFacts>>();
  private readonly pipelineJobStatuses = new Map<number, Remembered<Set<string>>>();
  /** The time-limit index: when the sweep looks at each trace next, and until when a claim of it holds. */
  private readonly due = new Map<string, { dueAt: number; claimedUntil: number }>();
  private totalBytes = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    sweepIntervalMs = 60_000,
  ) {
    // Reads check expiry themselves; the sweep only returns memory of records nobody asks about again (the facts and
    // decision of a pipeline long delivered).
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs).unref();
  }

  async park(traceId: string, entry: EntryToPark, limits: ParkingLimits): Promise<ParkOutcome> {
    const decision = this.live(this.decisions, traceId);
    if (decision !== undefined) return { kind: 'decided', decision };
    const trace = this.trace(traceId);
    const bytes = entry.body.length;
    const id = idToPark(entry);
    if (trace?.entries.has(id.id) === true) return { kind: 'parked' };
    if (entry.exempt !== true) {
      if ((trace?.spans ?? 0) + entry.spans > limits.maxTraceSpans) return { kind: 'full', limit: 'trace_spans' };
      if ((trace?.bytes ?? 0) + bytes > limits.maxTraceBytes) return { kind: 'full', limit: 'trace_bytes' };
      if (this.totalBytes + bytes > limits.maxTotalBytes) return { kind: 'full', limit: 'total_bytes' };
    }
    const now = this.now();
    const parked = trace ?? { entries: new Map<string, ParkedEntry>(), spans: 0, bytes: 0, expiresAt: 0 };
    parked.entries.set(id.id, { ...id, body: Buffer.from(entry.body) });
    parked.spans += entry.spans;
    parked.bytes += bytes;
    parked.expiresAt = Math.max(parked.expiresAt, now + limits.holdMs + limits.rememberMs);
    this.traces.set(traceId, parked);
    this.totalBytes += bytes;
    if (!this.due.has(traceId)) this.due.set(traceId, { dueAt: now + limits.holdMs, claimedUntil: 0 });
    return { kind: 'parked' };
  }

  async noteFacts(traceId: string, facts: FactsUpdate, ttlMs: number): Promise<void> {
    const known: KnownFacts = this.live(this.facts, traceId) ?? {
      statuses: new Set(),
      longestQueueMs: 0,
      runningChildren: new Set(),
      finishedRootJobs: new Set(),
    };
    for (const status of facts.statuses ?? []) known.statuses.add(status);
    known.longestQueueMs = Math.max(known.longestQueueMs, facts.longestQueueMs ?? 0);
    if (facts.whenNoOutcome !== undefined) known.whenNoOutcome = facts.whenNoOutcome;
    if (facts.rootEnd === null) known.rootEnd = undefined;
    else if (facts.rootEnd !== undefined) known.rootEnd = { ...facts.rootEnd };
    if (facts.childRunning !== undefined) known.runningChildren.add(facts.childRunning);
    if (facts.childEnded !== undefined) known.runningChildren.delete(facts.childEnded);
    for (const jobId of facts.finishedRootJobs ?? []) known.finishedRootJobs.add(jobId);
    const expiresAt = Math.max(this.facts.get(traceId)?.expiresAt ?? 0, this.now() + ttlMs);
    this.facts.set(traceId, { value: known, expiresAt });
  }

  async notePipelineJobStatuses(pipelineId: number, statuses: readonly string[], ttlMs: number): Promise<void> {
    const known = this.live(this.pipelineJobStatuses, pipelineId) ?? new Set<string>();
    for (const status of statuses) known.add(status);
    const expiresAt = Math.max(this.pipelineJobStatuses.get(pipelineId)?.expiresAt ?? 0, this.now() + ttlMs);
    this.pipelineJobStatuses.set(pipelineId, { value: known, expiresAt });
  }

  async jobStatusesOf(pipelineId: number): Promise<string[]> {
    return [...(this.live(this.pipelineJobStatuses, pipelineId) ?? [])].sort();
  }

  async readFacts(traceId: string): Promise<OutcomeFacts> {
    const known = this.live(this.facts, traceId);
    return {
      statuses: [...(known?.statuses ?? [])].sort(),
      longestQueueMs: known?.longestQueueMs ?? 0,
      ...(known?.whenNoOutcome === undefined ? {} : { whenNoOutcome: known.whenNoOutcome }),
      ...(known?.rootEnd === undefined ? {} : { rootEnd: { ...known.rootEnd } }),
      runningChildren: [...(known?.runningChildren ?? [])].sort((a, b) => a - b),
      finishedRootJobs: [...(known?.finishedRootJobs ?? [])].sort((a, b) => a - b),
    };
  }

  async decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ decision: TraceDecision; changed: boolean }> {
    const recorded = this.live(this.decisions, traceId);
    if (recorded !== undefined) return { decision: recorded, changed: false };
    this.decisions.set(traceId, { value: decision, expiresAt: this.now() + rememberMs });
    return { decision, changed: true };
  }

  async reopen(traceId: string, holdMs: number): Promise<boolean> {
    const known = this.live(this.facts, traceId);
    if (known !== undefined) known.rootEnd = undefined;
    if (this.live(this.decisions, traceId)?.keep !== false) {
      const due = this.due.get(traceId);
      if (due !== undefined && this.live(this.decisions, traceId) === undefined) due.dueAt = this.now() + holdMs;
      return false;
    }
    this.decisions.delete(traceId);
    this.due.set(traceId, { dueAt: this.now() + holdMs, claimedUntil: 0 });
    return true;
  }

  async findDecision(traceId: string): Promise<TraceDecision | null> {
    return this.live(this.decisions, traceId) ?? null;
  }

  async parkedIds(traceId: string): Promise<ParkedEntryId[]> {
    return [...(this.trace(traceId)?.entries.values() ?? [])].map(({ id, kind, spans, bytes }) => ({ id, kind, spans, bytes }));
  }

  async parkedEntries(traceId: string, ids: readonly ParkedEntryId[]): Promise<ParkedEntry[]> {
    const trace = this.trace(traceId);
    return ids.flatMap(({ id }) => {
      const entry = trace?.entries.get(id);
      return entry === undefined ? [] : [{ ...entry }];
    });
  }

  async release(traceId: string, entryIds: readonly string[]): Promise<void> {
    const trace = this.trace(traceId);
    if (trace === undefined) return;
    for (const id of entryIds) {
      const entry = trace.entries.get(id);
      if (entry === undefined) continue;
      trace.entries.delete(id);
      trace.spans -= entry.spans;
      trace.bytes -= entry.body.length;
      this.totalBytes -= entry.body.length;
    }
  }

  async drop(traceId: string): Promise<void> {
    const trace = this.traces.get(traceId);
    if (trace === undefined) return;
    this.totalBytes -= trace.bytes;
    this.traces.delete(traceId);
  }

  async finish(traceId: string): Promise<void> {
    this.due.delete(traceId);
  }

  async schedule(traceId: string, dueAt: number): Promise<void> {
    this.due.set(traceId, { dueAt, claimedUntil: 0 });
  }

  async claimOverdue(max: number, leaseMs: number): Promise<string[]> {
    const now = this.now();
    const claimed: string[] = [];
    for (const [traceId, due] of this.due) {
      if (due.dueAt > now || due.claimedUntil > now) continue;
      due.claimedUntil = now + leaseMs;
      claimed.push(traceId);
      if (claimed.length >= max) break;
    }
    return claimed;
  }

  async usage(): Promise<ParkingUsage> {
    let spans = 0;
    for (const [traceId] of this.traces) spans += this.trace(traceId)?.spans ?? 0;
    // As on Redis: traces the time-limit index holds (waiting for a decision, or for their delivery).
    return { traces: this.due.size, spans, bytes: this.totalBytes };
  }

  close(): void {
    clearInterval(this.sweeper);
    this.traces.clear();
    this.decisions.clear();
    this.facts.clear();
    this.pipelineJobStatuses.clear();
    this.due.clear();
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

  private sweep(): void {
    const now = this.now();
    for (const records of [this.facts, this.decisions, this.pipelineJobStatuses] as Array<Map<unknown, Remembered<unknown>>>) {
      for (const [key, record] of records) if (record.expiresAt <= now) records.delete(key);
    }
  }

  private live<K, T>(records: Map<K, Remembered<T>>, key: K): T | undefined {
    const record = records.get(key);
    if (record === undefined) return undefined;
    if (record.expiresAt > this.now()) return record.value;
    records.delete(key);
    return undefined;
  }
}
