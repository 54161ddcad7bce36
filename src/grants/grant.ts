import { TracedJob } from '../traced-work/traced-work';

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
  /** The pipeline is traced provisionally (SPEC §11): the head decision left it out, its outcome decides. */
  readonly provisional?: true;
}

/** When the grant stops being usable: its expiry, or its revocation when that comes sooner. */
export function grantEndsAt(grant: Grant): number {
  return Math.min(grant.expiresAt, grant.revokedAt ?? Infinity);
}

export interface SaveGrantOptions {
  /**
   * Whether the grant can be found by its job token's digest (`findGrantByJobTokenDigest`); default yes. Only an
   * opaque job token is looked up that way: a JWT job token names its job, so its index entry would never be read.
   */
  readonly indexJobToken?: boolean;
}

/** The grants (SPEC §4), shared by every replica: written at pickup, read by the auth decision, revoked by GitLab. */
export interface GrantStore {
  /**
   * Stores the grant of `grant.jobId`; it disappears at its expiry. A job decorated again gets its
   * fields replaced but keeps the expiry and any revocation its grant already has (SPEC §4): a
   * pickup must never extend a job's credentials or lift the end GitLab declared. Resolves with
   * the grant as stored. `tracedJob`, when given, is remembered in the same step for as long as the grant
   * as stored lives, and at least MIN_TRACED_MEMORY_MS (SPEC §10: whether the job's spans are ours to emit).
   */
  saveGrant(grant: Grant, tracedJob?: TracedJob, options?: SaveGrantOptions): Promise<Grant>;
  /**
   * Takes back a `saveGrant` whose caller gave up waiting (STORE_TIMEOUT_MS) and answered the job as not traced: the
   * write may still land when the store answers again, and would then say a job is traced that its runner was told
   * is not (SPEC §10 "only traced work"). Removes the grant and the traced job only if they are exactly what that
   * call wrote: its traced job (its pickup time makes it that pickup's own), and a grant with its expiry, so one that
   * kept an earlier pickup's expiry, or a later pickup's, stays. Sent after the save on the same connection, so the
   * store carries them out in that order. Answers whether something was taken back.
   */
  withdrawGrant(grant: Grant, tracedJob: TracedJob): Promise<boolean>;
  findGrant(jobId: number): Promise<Grant | null>;
  /** The grant whose opaque job token has this digest (SPEC §5). */
  findGrantByJobTokenDigest(jobTokenDigest: string): Promise<Grant | null>;
  /**
   * Marks the grant revoked from `revokedAt` on; the record stays until its expiry so the answer
   * is "revoked" (403), not "unknown". Resolves with the updated grant, or null when there is none.
   */
  revokeGrant(jobId: number, revokedAt: number): Promise<Grant | null>;
}
