import { Inject, Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { SECRETS } from '../config/config.constants';
import { JobPayloadConfig } from '../config/sections/job-payload';
import { RunnerAuthConfig } from '../config/sections/runner-auth';
import { Secrets } from '../config/secrets';
import { startDecisionSpan } from '../observability/tracing';
import { Grant, GrantStore } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { LimitStore } from '../limits/limit-store';
import { LIMIT_STORE } from '../limits/limits.constants';
import { WindowLedger } from '../limits/window-ledger';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { digestsMatch, tokenDigest } from '../grants/token-digest';
import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow } from '../otlp/retry-after';
import { AuthOutcome, jobIdentityOf } from './auth-outcome';
import { controlPlaneSpanIdsOf } from '../trace-context/trace-context';
import { capabilityMatches } from './job-capability';
import { JobTokenVerifier } from './job-token-verifier';
import { JOB_TOKEN_VERIFIER } from './runner-auth.constants';
import { RunnerAuthMetrics } from './runner-auth.metrics';
import { RunnerCredential } from './runner-credential';

/** Opaque job tokens whose grant was read lately, remembered per process: about 1 MB when full. */
const REMEMBERED_TOKENS = 10_000;

/**
 * Turns a runner credential (a runner token and a job token, or a job's capability) into the identity
 * of one job and the one trace it may write to (SPEC §5, §6). Used by the auth endpoint and,
 * in-process, by the gateway.
 */
@Injectable()
export class RunnerAuthService implements OnModuleDestroy {
  private readonly logger = new Logger(RunnerAuthService.name);
  /**
   * The job of each opaque job token: a job token names one job for the grant's life, so a lookup of a
   * token seen before reads the grant straight away instead of the token index first.
   */
  private readonly jobOfToken = new LRUCache<string, number>({ max: REMEMBERED_TOKENS });
  /**
   * Each runner's lookups per window, spent from blocks this replica takes of the shared window (issue 21):
   * the window costs a store round trip per block, not per lookup, and only allowed lookups are charged.
   */
  private readonly windows: WindowLedger;

  constructor(
    private readonly config: RunnerAuthConfig,
    private readonly jobPayload: JobPayloadConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    @Inject(LIMIT_STORE) limits: LimitStore,
    @Inject(JOB_TOKEN_VERIFIER) private readonly jobTokens: JobTokenVerifier,
    metrics: RunnerAuthMetrics,
  ) {
    this.windows = new WindowLedger(limits, { observer: metrics });
  }

  /** Unspent blocks go back to the store for the other replicas. */
  async onModuleDestroy(): Promise<void> {
    await this.windows.close();
  }

  async authenticate(credential: RunnerCredential): Promise<AuthOutcome> {
    const span = startDecisionSpan('ci_job_telemetry.auth');
    const outcome = await this.decide(credential);
    span.end(
      outcome.kind,
      () => ({
        'ci_job_telemetry.credential': credential.kind,
        ...(outcome.kind === 'allowed' ? { 'ci.job.id': outcome.identity.jobId } : { 'ci_job_telemetry.reason': outcome.reason }),
      }),
      outcome.kind === 'unavailable',
    );
    return outcome;
  }

  private async decide(credential: RunnerCredential): Promise<AuthOutcome> {
    try {
      switch (credential.kind) {
        case 'missing':
          return { kind: 'unauthenticated', reason: credential.reason };
        case 'tokens':
          return await this.decideTokens(credential.jobToken, credential.runnerToken);
        case 'capability':
          return await this.decideCapability(credential.jobId, credential.capability);
        default: {
          const unreachable: never = credential;
          throw new Error(`unhandled credential ${JSON.stringify(unreachable)}`);
        }
      }
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      this.logger.warn(`auth lookup failed: ${error.message}`);
      return { kind: 'unavailable', reason: 'grant store unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
    }
  }

  /** Ends a job's grant after the configured grace, so the runner can still flush (SPEC §5). */
  async revoke(jobId: number, now = Date.now()): Promise<Grant | null> {
    return this.store.revokeGrant(jobId, now + this.config.grantRevokeGraceSeconds * 1000);
  }

  /**
   * The capability is checked before any store access (SPEC §6), so guessing costs the store nothing;
   * from there the grant applies exactly as for header credentials.
   */
  private async decideCapability(jobId: number, capability: string): Promise<AuthOutcome> {
    if (!capabilityMatches(this.secrets.capabilityKeys, jobId, capability)) {
      return { kind: 'unauthenticated', reason: 'invalid capability for this job' };
    }
    const grant = await this.store.findGrant(jobId);
    if (grant === null) return { kind: 'forbidden', reason: 'telemetry is not enabled for this job' };
    return this.allowWithin(grant);
  }

  private async decideTokens(jobToken: string, runnerToken: string): Promise<AuthOutcome> {
    const check = await this.jobTokens.check(jobToken);
    let grant: Grant | null;
    switch (check.kind) {
      case 'invalid':
        return { kind: 'unauthenticated', reason: 'invalid job token' };
      case 'unavailable':
        // GitLab's keys cannot be read: every JWT would look forged, so say outage, never 401 (SPEC §5).
        this.logger.warn(`auth lookup failed: ${check.reason}`);
        return { kind: 'unavailable', reason: 'job token keys unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
      case 'jwt':
        grant = await this.store.findGrant(check.jobId);
        // A verified token for a job without a grant is a job telemetry was not enabled for.
        if (grant === null) return { kind: 'forbidden', reason: 'telemetry is not enabled for this job' };
        if (grant.jobId !== check.jobId) return { kind: 'unauthenticated', reason: 'job token does not match the grant' };
        break;
      case 'opaque':
        grant = await this.readGrantByJobToken(tokenDigest(this.secrets.tokenDigestKey, jobToken));
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
    return this.allowWithin(grant);
  }

  /** The grant whose opaque job token has this digest: straight from the job when the token was seen before. */
  private async readGrantByJobToken(jobTokenDigest: string): Promise<Grant | null> {
    const jobId = this.jobOfToken.get(jobTokenDigest);
    if (jobId !== undefined) {
      const grant = await this.store.findGrant(jobId);
      // The grant's own digest decides, as the store's index lookup does.
      if (grant?.jobTokenDigest === jobTokenDigest) return grant;
      this.jobOfToken.delete(jobTokenDigest);
    }
    const grant = await this.store.findGrantByJobTokenDigest(jobTokenDigest);
    if (grant !== null) this.jobOfToken.set(jobTokenDigest, grant.jobId, { ttl: Math.max(1, grant.expiresAt - Date.now()) });
    return grant;
  }

  /** What every credential shares once it names a grant: revocation, the runner's rate, the max-age. A refusal is never charged. */
  private async allowWithin(grant: Grant): Promise<AuthOutcome> {
    const now = Date.now();
    if (grant.revokedAt !== undefined && grant.revokedAt <= now) return { kind: 'forbidden', reason: 'grant revoked' };

    const charged = this.windows.charge(`runner:${grant.runnerId}`, this.config.rateLimit, this.config.rateWindowSeconds * 1000);
    const window = charged instanceof Promise ? await charged : charged;
    if (!window.allowed) {
      return { kind: 'rate_limited', reason: `runner ${grant.runnerId} over its rate limit`, retryAfterSeconds: retryAfterForWindow(window.resetInMs) };
    }

    // A decision reused for longer than the revocation grace would keep a job GitLab has just
    // ended writing past that grace on whichever replica (or nginx) remembered it (SPEC §5).
    const identity = jobIdentityOf(grant, controlPlaneSpanIdsOf(this.secrets.traceKey, this.jobPayload.traceIdScheme, grant));
    const maxAgeSeconds = Math.max(
      0,
      Math.min(this.config.decisionMaxAgeSeconds, this.config.grantRevokeGraceSeconds, Math.floor((identity.expiresAt - now) / 1000)),
    );
    return { kind: 'allowed', identity, maxAgeSeconds };
  }
}
