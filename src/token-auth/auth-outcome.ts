import { Grant, grantEndsAt } from '../grants/grant';

/**
 * Every answer the token check can give (SPEC §5). Gateways map it to their protocol in one
 * exhaustive switch each: HTTP here, OTLP statuses in the gateway.
 */
export type AuthOutcome =
  | { readonly kind: 'allowed'; readonly grant: Grant; readonly maxAgeSeconds: number }
  /** Bad, expired or unknown tokens, or a job not picked up by this runner: 401. */
  | { readonly kind: 'unauthenticated'; readonly reason: string }
  /** Valid tokens, but telemetry was not enabled for the job, or its grant was revoked: 403. */
  | { readonly kind: 'forbidden'; readonly reason: string }
  /** Per-runner rate limit: 429 with Retry-After. */
  | { readonly kind: 'rate_limited'; readonly reason: string; readonly retryAfterSeconds: number }
  /** The store or GitLab's keys did not answer: 503 with Retry-After, never 401 for an infrastructure fault. */
  | { readonly kind: 'unavailable'; readonly reason: string; readonly retryAfterSeconds: number };

/** What the auth endpoint answers on 200, and what our gateway stamps (SPEC §5). */
export interface AuthIdentity {
  readonly job_id: number;
  readonly project_id: number;
  readonly pipeline_id: number;
  readonly runner_id: number;
  readonly trace_id: string;
  readonly expires_at: string;
}

export function identityOf(grant: Grant): AuthIdentity {
  return {
    job_id: grant.jobId,
    project_id: grant.projectId,
    pipeline_id: grant.pipelineId,
    runner_id: grant.runnerId,
    trace_id: grant.traceId,
    expires_at: new Date(grantEndsAt(grant)).toISOString(),
  };
}
