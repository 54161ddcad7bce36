import { Grant, grantEndsAt } from '../grants/grant';

/**
 * The job an auth decision lets a credential write for: what the gateway stamps, and until when.
 * Converted from the stored grant once, in the decision; in process it never takes the wire form.
 */
export interface JobIdentity {
  readonly jobId: number;
  readonly projectId: number;
  readonly pipelineId: number;
  readonly runnerId: number;
  /** 32 hex digits: the one trace the job may write to. */
  readonly traceId: string;
  /** Epoch ms: the grant's end, revocation grace included. */
  readonly expiresAt: number;
  /** Its pipeline is traced provisionally (SPEC §11): its spans are parked until the pipeline's outcome decides. */
  readonly provisional?: boolean;
  /**
   * The span ids the control plane writes GitLab's account of the job on (trace-context.ts controlPlaneSpanIdsOf):
   * the gateway refuses a span with one of them. Empty when the decision did not say (an older control process).
   */
  readonly controlPlaneSpanIds: readonly string[];
}

/**
 * Every answer the token check can give (SPEC §5), whoever makes it: this process or, for a
 * ROLE=gateway process, a control process over HTTP. Each edge maps it in one exhaustive switch:
 * HTTP in the auth endpoint, OTLP statuses in the gateway.
 */
export type AuthOutcome =
  | { readonly kind: 'allowed'; readonly identity: JobIdentity; readonly maxAgeSeconds: number }
  /** Bad, expired or unknown tokens, or a job not picked up by this runner: 401. */
  | { readonly kind: 'unauthenticated'; readonly reason: string }
  /** Valid tokens, but telemetry was not enabled for the job, or its grant was revoked: 403. */
  | { readonly kind: 'forbidden'; readonly reason: string }
  /** Per-runner rate limit: 429 with Retry-After. */
  | { readonly kind: 'rate_limited'; readonly reason: string; readonly retryAfterSeconds: number }
  /** The store or GitLab's keys did not answer: 503 with Retry-After, never 401 for an infrastructure fault. */
  | { readonly kind: 'unavailable'; readonly reason: string; readonly retryAfterSeconds: number };

/** Every answer but `allowed`: what the auth endpoint and the gateway refuse with. */
export type AuthRefusal = Exclude<AuthOutcome, { readonly kind: 'allowed' }>;

/** A refusal as HTTP answers it; each edge writes it in its own error shape (internal API, OTLP). */
export interface RefusalAnswer {
  readonly httpStatus: 401 | 403 | 429 | 503;
  readonly message: string;
  /** For 429 and 503, which the runner (or nginx's client) retries. */
  readonly retryAfterSeconds?: number;
}

/** The one mapping of a refusal to its answer, for the auth endpoint and the gateway alike (SPEC §5, §6). */
export function refusalAnswer(refusal: AuthRefusal): RefusalAnswer {
  switch (refusal.kind) {
    case 'unauthenticated':
      return { httpStatus: 401, message: refusal.reason };
    case 'forbidden':
      return { httpStatus: 403, message: refusal.reason };
    case 'rate_limited':
      return { httpStatus: 429, message: 'runner rate limit exceeded', retryAfterSeconds: refusal.retryAfterSeconds };
    case 'unavailable':
      return { httpStatus: 503, message: refusal.reason, retryAfterSeconds: refusal.retryAfterSeconds };
    default: {
      const unreachable: never = refusal;
      throw new Error(`unhandled auth refusal ${JSON.stringify(unreachable)}`);
    }
  }
}

export function jobIdentityOf(grant: Grant, controlPlaneSpanIds: readonly string[]): JobIdentity {
  return {
    jobId: grant.jobId,
    projectId: grant.projectId,
    pipelineId: grant.pipelineId,
    runnerId: grant.runnerId,
    traceId: grant.traceId,
    expiresAt: grantEndsAt(grant),
    ...(grant.provisional === true ? { provisional: true } : {}),
    controlPlaneSpanIds,
  };
}

/** The auth endpoint's 200 body (SPEC §5): what nginx and a ROLE=gateway process read. */
export interface AuthIdentityBody {
  readonly job_id: number;
  readonly project_id: number;
  readonly pipeline_id: number;
  readonly runner_id: number;
  readonly trace_id: string;
  readonly expires_at: string;
  readonly provisional?: boolean;
  readonly control_plane_span_ids?: readonly string[];
}

export function identityBodyOf(identity: JobIdentity): AuthIdentityBody {
  return {
    job_id: identity.jobId,
    project_id: identity.projectId,
    pipeline_id: identity.pipelineId,
    runner_id: identity.runnerId,
    trace_id: identity.traceId,
    expires_at: new Date(identity.expiresAt).toISOString(),
    ...(identity.provisional === true ? { provisional: true } : {}),
    control_plane_span_ids: identity.controlPlaneSpanIds,
  };
}

export function identityFromBody(body: AuthIdentityBody): JobIdentity {
  return {
    jobId: body.job_id,
    projectId: body.project_id,
    pipelineId: body.pipeline_id,
    runnerId: body.runner_id,
    traceId: body.trace_id,
    expiresAt: Date.parse(body.expires_at),
    ...(body.provisional === true ? { provisional: true } : {}),
    // A control process from before issue 56 does not say: nothing is refused by id then, the readers' mark still holds.
    controlPlaneSpanIds: Array.isArray(body.control_plane_span_ids)
      ? body.control_plane_span_ids.filter((id) => typeof id === 'string' && /^[0-9a-f]{16}$/i.test(id))
      : [],
  };
}
