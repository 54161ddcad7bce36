import { TracedJob, TracedWorkStore } from './traced-work';

/**
 * A telemetry grant (SPEC §4 "Grant"): what the decorator knew at job pickup, kept until the job
 * could no longer be exporting. Raw tokens are never part of it, only their HMAC digests.
 */
export interface Grant {
  readonly jobId: number;
  readonly projectId: number;
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  readonly runnerId: number;
  readonly traceId: string;
  readonly spanParentId: string;
  readonly runnerTokenDigest?: string;
  readonly jobTokenDigest?: string;
  /** Epoch milliseconds. */
  readonly expiresAt: number;
  /** Epoch milliseconds from which the grant is revoked (job finished or canceled, plus grace). */
  readonly revokedAt?: number;
}

/** When the grant stops being usable: its expiry, or its revocation when that comes sooner. */
export function grantEndsAt(grant: Grant): number {
  return Math.min(grant.expiresAt, grant.revokedAt ?? Infinity);
}

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

export interface SaveGrantOptions {
  /**
   * Whether the grant can be found by its job token's digest (`findGrantByJobTokenDigest`); default yes. Only an
   * opaque job token is looked up that way: a JWT job token names its job, so its index entry would never be read.
   */
  readonly indexJobToken?: boolean;
}

export interface GrantStore extends TracedWorkStore {
  /**
   * Stores the grant of `grant.jobId`; it disappears at its expiry. A job decorated again gets its
   * fields replaced but keeps the expiry and any revocation its grant already has (SPEC §4): a
   * pickup must never extend a job's credentials or lift the end GitLab declared. Resolves with
   * the grant as stored. `tracedJob`, when given, is remembered in the same step for as long as the grant
   * as stored lives, and at least MIN_TRACED_MEMORY_MS (SPEC §10: whether the job's spans are ours to emit).
   */
  saveGrant(grant: Grant, tracedJob?: TracedJob, options?: SaveGrantOptions): Promise<Grant>;
  findGrant(jobId: number): Promise<Grant | null>;
  /** The grant whose opaque job token has this digest (SPEC §5). */
  findGrantByJobTokenDigest(jobTokenDigest: string): Promise<Grant | null>;
  /**
   * Marks the grant revoked from `revokedAt` on; the record stays until its expiry so the answer
   * is "revoked" (403), not "unknown". Resolves with the updated grant, or null when there is none.
   */
  revokeGrant(jobId: number, revokedAt: number): Promise<Grant | null>;
  /**
   * Gives back `spans` of job `jobId`'s quota charged for spans that were then not accepted
   * (SPEC §6: the collector refused them, so the client sends them again), never below zero and without
   * extending the quota's life. A quota that has already ended stays ended; the per-second rate is not
   * given back (a retry comes in a later second).
   */
  releaseSpans(jobId: number, spans: number): Promise<void>;
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
  /** Resolves when the store answers; rejects otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`grant store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StoreUnavailableError';
  }
}
