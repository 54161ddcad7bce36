import { Inject, Injectable, Logger } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { Grant, grantEndsAt, GrantStore, StoreUnavailableError } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { digestsMatch, tokenDigest } from '../grants/token-digest';
import { AuthOutcome } from './auth-outcome';
import { JobTokenVerifier } from './job-token-verifier';
import { JOB_TOKEN_VERIFIER } from './token-auth.constants';

/** How long a caller should wait before asking again when the store is down. */
const STORE_RETRY_AFTER_SECONDS = 5;

/**
 * Turns a runner token and a job token into the identity of one job and the one trace it may write
 * to (SPEC §5). Used by the auth endpoint and, in-process, by the gateway.
 */
@Injectable()
export class TokenAuthService {
  private readonly logger = new Logger(TokenAuthService.name);

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    @Inject(JOB_TOKEN_VERIFIER) private readonly jobTokens: JobTokenVerifier,
  ) {}

  async authenticate(jobToken: string | undefined, runnerToken: string | undefined): Promise<AuthOutcome> {
    if (!jobToken) return { kind: 'unauthenticated', reason: 'missing job token (Authorization: Bearer)' };
    if (!runnerToken) return { kind: 'unauthenticated', reason: 'missing runner token (Runner-Token)' };
    try {
      return await this.decide(jobToken, runnerToken);
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      this.logger.warn(`auth lookup failed: ${error.message}`);
      return { kind: 'unavailable', retryAfterSeconds: STORE_RETRY_AFTER_SECONDS };
    }
  }

  /** Ends a job's grant after the configured grace, so the runner can still flush (SPEC §5). */
  async revoke(jobId: number, now = Date.now()): Promise<Grant | null> {
    return this.store.revokeGrant(jobId, now + this.config.GRANT_REVOKE_GRACE_SECONDS * 1000);
  }

  private async decide(jobToken: string, runnerToken: string): Promise<AuthOutcome> {
    const check = await this.jobTokens.check(jobToken);
    let grant: Grant | null;
    switch (check.kind) {
      case 'invalid':
        return { kind: 'unauthenticated', reason: 'invalid job token' };
      case 'jwt':
        grant = await this.store.findGrant(check.jobId);
        // A verified token for a job without a grant is a job telemetry was not enabled for.
        if (grant === null) return { kind: 'forbidden', reason: 'telemetry is not enabled for this job' };
        if (grant.jobId !== check.jobId) return { kind: 'unauthenticated', reason: 'job token does not match the grant' };
        break;
      case 'opaque':
        grant = await this.store.findGrantByJobTokenDigest(tokenDigest(this.secrets.tokenDigestKey, jobToken));
        // An opaque token proves nothing by itself: unknown is indistinguishable from forged.
        if (grant === null) return { kind: 'unauthenticated', reason: 'unknown job token' };
        break;
      default: {
        const unreachable: never = check;
        throw new Error(`unhandled job token check ${JSON.stringify(unreachable)}`);
      }
    }

    if (!digestsMatch(grant.runnerTokenDigest, tokenDigest(this.secrets.tokenDigestKey, runnerToken))) {
      return { kind: 'unauthenticated', reason: 'job was not picked up by this runner' };
    }
    const now = Date.now();
    if (grant.revokedAt !== undefined && grant.revokedAt <= now) return { kind: 'forbidden', reason: 'grant revoked' };

    const window = await this.store.hitRateWindow(
      `runner:${grant.runnerId}`,
      this.config.RUNNER_RATE_LIMIT,
      this.config.RUNNER_RATE_WINDOW_SECONDS * 1000,
    );
    if (!window.allowed) return { kind: 'rate_limited', retryAfterSeconds: Math.max(1, Math.ceil(window.resetInMs / 1000)) };

    const endsAt = grantEndsAt(grant);
    const maxAgeSeconds = Math.max(0, Math.min(this.config.AUTH_DECISION_MAX_AGE_SECONDS, Math.floor((endsAt - now) / 1000)));
    return { kind: 'allowed', grant, maxAgeSeconds };
  }
}
