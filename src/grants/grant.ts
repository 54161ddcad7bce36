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
}

export interface GrantStore {
  /** Stores or replaces the grant of `grant.jobId`; it disappears at `grant.expiresAt`. */
  saveGrant(grant: Grant): Promise<void>;
  findGrant(jobId: number): Promise<Grant | null>;
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
