/**
 * The parking store (SPEC §11): a provisional pipeline's spans wait here, in its trace's slot, until GitLab
 * reports the pipeline's outcome; then they are kept (delivered once) or dropped (deleted). The decision is
 * remembered, so what arrives after it follows it.
 */

/** Why a pipeline's spans reached the collector though the head decision left it out. */
export type KeepReason = 'failed' | 'slow' | 'queued' | 'no_outcome';

/**
 * The decision on a provisional pipeline: kept for a reason, or dropped because its outcome matched nothing
 * in the policy (`outcome`) or because no outcome came before the time limit (`no_outcome`).
 */
export type TraceDecision = { readonly keep: true; readonly reason: KeepReason } | { readonly keep: false; readonly reason: 'outcome' | 'no_outcome' };

/**
 * What one parked entry holds: an enforced OTLP/HTTP traces export as it would be forwarded (`protobuf`,
 * `json`), or the control plane's own spans (`spans`: OTLP/JSON `ResourceSpans` texts joined with commas).
 */
export type ParkedKind = 'protobuf' | 'json' | 'spans';

export interface ParkedEntry {
  /** Unique within the trace, in parking order. */
  readonly id: string;
  readonly kind: ParkedKind;
  readonly body: Buffer;
  readonly spans: number;
}

export interface ParkingLimits {
  /** Spans and bytes one pipeline (trace) may park. */
  readonly maxTraceSpans: number;
  readonly maxTraceBytes: number;
  /** Bytes all pipelines may park together. */
  readonly maxTotalBytes: number;
  /** How long after a trace's first parked entry its decision is due without an outcome (the time limit). */
  readonly holdMs: number;
  /** How long a decision, and parked data not yet delivered, is remembered. */
  readonly rememberMs: number;
}

/** Which bound a refused entry hit (SPEC §11 "Bounds"). */
export type ParkingLimit = 'trace_spans' | 'trace_bytes' | 'total_bytes';

export type ParkOutcome =
  | { readonly kind: 'parked' }
  /** Decided already: the entry was not parked; its caller follows the decision. */
  | { readonly kind: 'decided'; readonly decision: TraceDecision }
  /** A budget is full: nothing parked, nothing evicted; the caller falls back to the head decision. */
  | { readonly kind: 'full'; readonly limit: ParkingLimit };

/** What the decision reads besides the root pipeline's own hook: collected from pickups and other hooks. */
export interface OutcomeFacts {
  /** Statuses GitLab reported for the trace's pipelines and jobs (child pipelines, allowed-to-fail jobs). */
  readonly statuses: readonly string[];
  /** The longest queue wait of any of its jobs, in milliseconds. */
  readonly longestQueueMs: number;
  /** What the time limit decides without an outcome (the policy's `when_no_outcome` at pickup); absent: keep. */
  readonly whenNoOutcome?: 'keep' | 'drop';
}

export interface ParkingUsage {
  readonly traces: number;
  readonly spans: number;
  readonly bytes: number;
}

export interface ParkingStore {
  /**
   * Parks one entry for `traceId` in one atomic step: refused when the trace is decided already (the decision
   * is answered) or a budget is full. The first entry of a trace sets its time limit.
   */
  park(traceId: string, entry: { kind: ParkedKind; body: Buffer; spans: number }, limits: ParkingLimits): Promise<ParkOutcome>;
  /** Adds statuses and a queue wait to a trace's facts, kept `ttlMs` at least. */
  noteFacts(traceId: string, facts: Partial<OutcomeFacts>, ttlMs: number): Promise<void>;
  readFacts(traceId: string): Promise<OutcomeFacts>;
  /**
   * Records the decision unless one is recorded already (the first one stands, except that a later `keep` replaces
   * a `drop`: a pipeline retried into failure after it was dropped is kept from then on). Answers the decision
   * recorded after the call; remembered `rememberMs`.
   */
  decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ readonly decision: TraceDecision; readonly changed: boolean }>;
  findDecision(traceId: string): Promise<TraceDecision | null>;
  /**
   * Forgets a `drop` (a kept decision stays): the pipeline runs again (a retry, a manual job played), so what comes
   * now parks and its next outcome decides. Answers whether a drop was forgotten.
   */
  reopen(traceId: string): Promise<boolean>;
  /** Every entry parked for the trace, in parking order. */
  parked(traceId: string): Promise<ParkedEntry[]>;
  /** Removes entries (delivered, or dropped with their trace) and gives their bytes back to the budget. */
  release(traceId: string, entryIds: readonly string[]): Promise<void>;
  /** Up to `max` traces whose time limit has passed, each handed to one caller for `leaseMs`. */
  claimOverdue(max: number, leaseMs: number): Promise<string[]>;
  /** The trace has its decision: it leaves the time-limit index. */
  settled(traceId: string): Promise<void>;
  usage(): Promise<ParkingUsage>;
}
