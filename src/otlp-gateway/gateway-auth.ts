import { Pool } from 'undici';
import { OUTAGE_RETRY_AFTER_SECONDS, upstreamRetryAfter } from '../observability/retry-after';
import { capabilityPath } from '../runner-auth/job-capability';
import { RunnerCredential } from '../runner-auth/runner-credential';
import { AuthIdentity, AuthOutcome, identityOf } from '../token-auth/auth-outcome';
import { TokenAuthService } from '../token-auth/token-auth.service';
import type { GatewayGrant } from './otlp-payload';

/** The gateway's view of an auth outcome: the identity to stamp, and until when it may be reused. */
export type GatewayDecision =
  | { readonly kind: 'allowed'; readonly grant: GatewayGrant; readonly expiresAt: number; readonly maxAgeSeconds: number }
  | Exclude<AuthOutcome, { kind: 'allowed' }>;

export interface GatewayAuthenticator {
  authenticate(credential: RunnerCredential): Promise<GatewayDecision>;
}

/** ROLE=all: the auth decision is made in this process, by the same service the endpoint uses. */
export class InProcessAuthenticator implements GatewayAuthenticator {
  constructor(private readonly tokenAuth: TokenAuthService) {}

  async authenticate(credential: RunnerCredential): Promise<GatewayDecision> {
    const outcome = await this.tokenAuth.authenticate(credential);
    return outcome.kind === 'allowed' ? allowedFrom(identityOf(outcome.grant), outcome.maxAgeSeconds) : outcome;
  }
}

/** The auth endpoint's answer as the gateway uses it, whether it came in-process or over HTTP. */
function allowedFrom(identity: AuthIdentity, maxAgeSeconds: number): GatewayDecision {
  return {
    kind: 'allowed',
    grant: { jobId: identity.job_id, projectId: identity.project_id, pipelineId: identity.pipeline_id, runnerId: identity.runner_id, traceId: identity.trace_id },
    expiresAt: Date.parse(identity.expires_at),
    maxAgeSeconds,
  };
}

/**
 * The runner's credential as the auth endpoint reads it: header credentials exactly as received, a
 * capability as the export path in `X-Original-URI` (as nginx `auth_request` passes it).
 */
function credentialHeaders(credential: Exclude<RunnerCredential, { kind: 'missing' }>): Record<string, string> {
  switch (credential.kind) {
    case 'tokens':
      return { authorization: `Bearer ${credential.jobToken}`, 'runner-token': credential.runnerToken };
    case 'capability':
      return { 'x-original-uri': `${capabilityPath(credential.jobId, credential.capability)}/v1/traces` };
    default: {
      const unreachable: never = credential;
      throw new Error(`unhandled credential ${JSON.stringify(unreachable)}`);
    }
  }
}

/**
 * ROLE=gateway (SPEC §2): asks a control process's auth endpoint over HTTP, passing the runner's
 * credential, and reads its answer back into the same outcomes.
 */
export class RemoteAuthenticator implements GatewayAuthenticator {
  private readonly pool: Pool;
  private readonly path: string;

  constructor(
    url: string,
    private readonly internalApiHeaders: () => Promise<Record<string, string>>,
    private readonly timeoutMs: number,
  ) {
    const target = new URL(url);
    this.pool = new Pool(target.origin, { connections: 16, keepAliveTimeout: 30_000 });
    this.path = target.pathname + target.search;
  }

  async authenticate(credential: RunnerCredential): Promise<GatewayDecision> {
    if (credential.kind === 'missing') return { kind: 'unauthenticated', reason: credential.reason };
    let response;
    try {
      response = await this.pool.request({
        path: this.path,
        method: 'POST',
        headers: { ...(await this.internalApiHeaders()), ...credentialHeaders(credential) },
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
    } catch {
      // An unreachable control process is an outage, never a reason to call a runner unauthenticated.
      return { kind: 'unavailable', reason: 'control process unreachable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
    }
    const text = await response.body.text();
    const retryAfter = upstreamRetryAfter(headerValue(response.headers['retry-after'])) ?? OUTAGE_RETRY_AFTER_SECONDS;
    // The control process's own reason (never a token: SPEC §5), so this gateway's refusal log says why.
    const reason = (fallback: string) => errorOf(text) ?? fallback;
    switch (response.statusCode) {
      case 200: {
        const maxAge = /max-age=(\d+)/.exec(String(response.headers['cache-control'] ?? ''))?.[1];
        return allowedFrom(JSON.parse(text) as AuthIdentity, maxAge === undefined ? 0 : Number(maxAge));
      }
      case 401:
        return { kind: 'unauthenticated', reason: reason('tokens refused by the control process') };
      case 403:
        return { kind: 'forbidden', reason: reason('telemetry is not enabled for this job') };
      case 429:
        return { kind: 'rate_limited', reason: reason('runner rate limit exceeded'), retryAfterSeconds: retryAfter };
      default:
        return { kind: 'unavailable', reason: reason(`control process answered ${response.statusCode}`), retryAfterSeconds: retryAfter };
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}

function errorOf(body: string): string | undefined {
  try {
    const error = (JSON.parse(body) as { error?: unknown }).error;
    return typeof error === 'string' ? error : undefined;
  } catch {
    return undefined;
  }
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
