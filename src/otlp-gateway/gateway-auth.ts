import { Pool } from 'undici';
import { OUTAGE_RETRY_AFTER_SECONDS, parseRetryAfter } from '../otlp/retry-after';
import { AuthIdentityBody, AuthOutcome, identityFromBody } from '../runner-auth/auth-outcome';
import { capabilityPath } from '../runner-auth/job-capability';
import { RunnerCredential } from '../runner-auth/runner-credential';

/**
 * Who decides the gateway's exports: in a ROLE=all process the RunnerAuthService itself (same outcomes,
 * no conversion); in a ROLE=gateway process the RemoteAuthenticator below.
 */
export interface GatewayAuthenticator {
  authenticate(credential: RunnerCredential): Promise<AuthOutcome>;
  close?(): Promise<void>;
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

  async authenticate(credential: RunnerCredential): Promise<AuthOutcome> {
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
    const retryAfter = parseRetryAfter(headerValue(response.headers['retry-after'])) ?? OUTAGE_RETRY_AFTER_SECONDS;
    // The control process's own reason (never a token: SPEC §5), so this gateway's refusal log says why.
    const reason = (fallback: string) => errorOf(text) ?? fallback;
    switch (response.statusCode) {
      case 200: {
        const maxAge = /max-age=(\d+)/.exec(String(response.headers['cache-control'] ?? ''))?.[1];
        return { kind: 'allowed', identity: identityFromBody(JSON.parse(text) as AuthIdentityBody), maxAgeSeconds: maxAge === undefined ? 0 : Number(maxAge) };
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
