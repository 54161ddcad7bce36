/*
 * Limits shared by every replica (SPEC §6, issue 21): fixed windows (a runner's exports and auth lookups)
 * and each job's span quota and per-second rate. A replica takes a block of a limit in one store call and
 * spends it itself (see block-lease.ts); the store only ever hands out what the limit has left.
 */

/** What one job may send, shared across replicas (SPEC §6). */
export interface JobSpanLimits {
  /** Spans over the grant's life. */
  readonly perJob: number;
  /** Spans in any one-second window. */
  readonly perSecond: number;
}

/** A block taken from a fixed window shared by every replica, to be spent by one replica alone. */
export interface WindowBlock {
  /** Hits granted: at most what was asked, never more than the window had left. */
  readonly granted: number;
  /** Milliseconds until the window ends, and with it the block. */
  readonly resetInMs: number;
}

/** One replica's lease on a job's span quota and rate (SPEC §6, issue 21). */
export interface SpanLeaseRequest {
  /** The replica's own id: its outstanding lease is kept under it. */
  readonly leaseId: string;
  /** Spans spent from this replica's lease since its last call (negative: given back meanwhile). */
  readonly spent: number;
  readonly quotaWanted: number;
  readonly rateWanted: number;
  readonly limits: JobSpanLimits;
  /** How long the job's quota lives from its first use (the grant's life). */
  readonly quotaTtlMs: number;
  /** How long the lease holds without another call; after that any replica's call takes its unspent part back. */
  readonly leaseMs: number;
}

export interface SpanLease {
  /** Spans of the job's quota added to the lease. */
  readonly quotaGranted: number;
  /** Spans of the current one-second window granted. */
  readonly rateGranted: number;
  /** Milliseconds until the current one-second window ends. */
  readonly rateResetInMs: number;
}

export interface LimitStore {
  /**
   * Takes up to `wanted` hits of `key`'s current fixed window (shared by every replica, `limit` per
   * `windowMs`) at once, for one replica to spend locally: the window is charged with what was granted,
   * so blocks never add up to more than the limit.
   */
  takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock>;
  /** Gives back `count` unspent hits of a block of `key`'s current window, never below zero; an ended window stays ended. */
  returnWindowBlock(key: string, count: number): Promise<void>;
  /**
   * One replica's lease on job `jobId`'s spans, in one atomic step: takes back the unspent part of every
   * other replica's lease that has run out, settles what this replica spent, and adds up to `quotaWanted`
   * of the quota's room to its lease and up to `rateWanted` of the current second's rate. The quota is
   * charged for the whole lease, so the leases of all replicas never exceed it.
   */
  leaseSpans(jobId: number, request: SpanLeaseRequest): Promise<SpanLease>;
  /** Ends a replica's lease, giving back its `unspent` spans to the job's quota (never below zero). */
  returnSpanLease(jobId: number, leaseId: string, unspent: number): Promise<void>;
  /**
   * Gives back `spans` of job `jobId`'s quota charged for spans that were then not accepted
   * (SPEC §6: the collector refused them, so the client sends them again), never below zero and without
   * extending the quota's life. A quota that has already ended stays ended; the per-second rate is not
   * given back (a retry comes in a later second).
   */
  releaseSpans(jobId: number, spans: number): Promise<void>;
}
