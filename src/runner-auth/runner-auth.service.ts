import { Inject, Injectable, Logger } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { startDecisionSpan } from '../observability/tracing';
import { Grant, GrantStore, RateWindow, StoreUnavailableError } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { digestsMatch, tokenDigest } from '../grants/token-digest';
import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow } from '../observability/retry-after';
import { AuthOutcome, jobIdentityOf } from './auth-outcome';
import { capabilityMatches } from './job-capability';
import { JobTokenVerifier } from './job-token-verifier';
import { JOB_TOKEN_VERIFIER } from './runner-auth.constants';
import { RunnerCredential } from './runner-credential';

/** Jobs (and opaque job tokens) whose grant was read lately, remembered per process: about 2 MB when full. */
const REMEMBERED_JOBS = 10_000;

/** A grant as read for a decision, with the runner's rate window when it was hit in the same round trip. */
interface GrantRead {
  readonly grant: Grant | null;
  readonly early?: EarlyHit;
}

/** A hit on a runner's rate window made before the grant said it was due: given back on a refusal. */
interface EarlyHit {
  readonly runnerId: number;
  readonly window: RateWindow;
}

/**
 * Turns a runner credential (a runner token and a job token, or a job's capability) into the identity
 * of one job and the one trace it may write to (SPEC §5, §6). Used by the auth endpoint and,
 * in-process, by the gateway.
 */
@Injectable()
export class RunnerAuthService {
  private readonly logger = new Logger(RunnerAuthService.name);
  /**
   * The runner of each job whose grant was read lately, and the job of each opaque job token: facts
   * that hold for the grant's life (a job is picked up by one runner, a job token names one job). With
   * them a lookup sends the grant read and the runner's rate-window hit together, one round trip
   * instead of two (three for an opaque token): the Redis commands' socket writes were the largest
   * share of the auth endpoint's store lookup (bench/token-auth.bench.ts --cpu-prof). The grant read
   * still decides everything; a hit it does not bear out is given back.
   */
  private readonly runnerOfJob = new LRUCache<number, number>({ max: REMEMBERED_JOBS });
  private readonly jobOfToken = new LRUCache<string, number>({ max: REMEMBERED_JOBS });

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    @Inject(JOB_TOKEN_VERIFIER) private readonly jobTokens: JobTokenVerifier,
  ) {}

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
    return this.store.revokeGrant(jobId, now + this.config.GRANT_REVOKE_GRACE_SECONDS * 1000);
  }

  /**
   * The capability is checked before any store access (SPEC §6), so guessing costs the store nothing;
   * from there the grant applies exactly as for header credentials.
   */
  private async decideCapability(jobId: number, capability: string): Promise<AuthOutcome> {
    if (!capabilityMatches(this.secrets.capabilityKeys, jobId, capability)) {
      return { kind: 'unauthenticated', reason: 'invalid capability for this job' };
    }
    const { grant, early } = await this.readGrant(jobId);
    if (grant === null) return this.refuse(early, { kind: 'forbidden', reason: 'telemetry is not enabled for this job' });
    return this.allowWithin(grant, early);
  }

  private async decideTokens(jobToken: string, runnerToken: string): Promise<AuthOutcome> {
    const check = await this.jobTokens.check(jobToken);
    let read: GrantRead;
    switch (check.kind) {
      case 'invalid':
        return { kind: 'unauthenticated', reason: 'invalid job token' };
      case 'unavailable':
        // GitLab's keys cannot be read: every JWT would look forged, so say outage, never 401 (SPEC §5).
        this.logger.warn(`auth lookup failed: ${check.reason}`);
        return { kind: 'unavailable', reason: 'job token keys unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
      case 'jwt':
        read = await this.readGrant(check.jobId);
        // A verified token for a job without a grant is a job telemetry was not enabled for.
        if (read.grant === null) return this.refuse(read.early, { kind: 'forbidden', reason: 'telemetry is not enabled for this job' });
        if (read.grant.jobId !== check.jobId) return this.refuse(read.early, { kind: 'unauthenticated', reason: 'job token does not match the grant' });
        break;
      case 'opaque':
        read = await this.readGrantByJobToken(tokenDigest(this.secrets.tokenDigestKey, jobToken));
        // An opaque token proves nothing by itself: unknown is indistinguishable from forged.
        if (read.grant === null) return this.refuse(read.early, { kind: 'unauthenticated', reason: 'unknown job token' });
        break;
      default: {
        const unreachable: never = check;
        throw new Error(`unhandled job token check ${JSON.stringify(unreachable)}`);
      }
    }

    if (!digestsMatch(read.grant.runnerTokenDigest, tokenDigest(this.secrets.tokenDigestKey, runnerToken))) {
      return this.refuse(read.early, { kind: 'unauthenticated', reason: 'job was not picked up by this runner' });
    }
    return this.allowWithin(read.grant, read.early);
  }

  /** The job's grant, and, when its runner is known from an earlier read, a hit on the runner's window sent with it. */
  private async readGrant(jobId: number): Promise<GrantRead> {
    const runnerId = this.runnerOfJob.get(jobId);
    if (runnerId === undefined) return { grant: await this.store.findGrant(jobId) };
    const [grant, window] = await Promise.allSettled([this.store.findGrant(jobId), this.hitRunnerWindow(runnerId)]);
    const early = window.status === 'fulfilled' ? { runnerId, window: window.value } : undefined;
    if (grant.status === 'rejected') {
      this.giveBack(early);
      throw grant.reason;
    }
    // A window that could not be hit early is hit again once the grant is through, as without the memo:
    // an outage of its node alone leaves refusals as they are.
    return { grant: grant.value, early };
  }

  /** The grant whose opaque job token has this digest: straight from the job when the token was seen before. */
  private async readGrantByJobToken(jobTokenDigest: string): Promise<GrantRead> {
    const jobId = this.jobOfToken.get(jobTokenDigest);
    if (jobId !== undefined) {
      const read = await this.readGrant(jobId);
      // The grant's own digest decides, as the store's index lookup does.
      if (read.grant?.jobTokenDigest === jobTokenDigest) return read;
      this.jobOfToken.delete(jobTokenDigest);
      this.giveBack(read.early);
    }
    const grant = await this.store.findGrantByJobTokenDigest(jobTokenDigest);
    if (grant !== null) this.jobOfToken.set(jobTokenDigest, grant.jobId, { ttl: Math.max(1, grant.expiresAt - Date.now()) });
    return { grant };
  }

  private hitRunnerWindow(runnerId: number): Promise<RateWindow> {
    return this.store.hitRateWindow(`runner:${runnerId}`, this.config.RUNNER_RATE_LIMIT, this.config.RUNNER_RATE_WINDOW_SECONDS * 1000);
  }

  /** A refusal is never charged to the runner's rate: an early hit is given back. */
  private refuse(early: EarlyHit | undefined, refusal: AuthOutcome): AuthOutcome {
    this.giveBack(early);
    return refusal;
  }

  /**
   * Not waited for: the answer does not depend on it, and a hit that cannot be given back in an
   * outage only ends with its window.
   */
  private giveBack(early: EarlyHit | undefined): void {
    if (early === undefined) return;
    this.store.releaseRateWindowHit(`runner:${early.runnerId}`).catch(() => undefined);
  }

  /** What every credential shares once it names a grant: revocation, the runner's rate, the max-age. */
  private async allowWithin(grant: Grant, early: EarlyHit | undefined): Promise<AuthOutcome> {
    const now = Date.now();
    if (grant.revokedAt !== undefined && grant.revokedAt <= now) {
      // Revoked for good: not worth an early hit on the next lookup either.
      this.runnerOfJob.delete(grant.jobId);
      return this.refuse(early, { kind: 'forbidden', reason: 'grant revoked' });
    }
    this.runnerOfJob.set(grant.jobId, grant.runnerId, { ttl: Math.max(1, grant.expiresAt - now) });

    let window: RateWindow;
    if (early?.runnerId === grant.runnerId) {
      window = early.window;
    } else {
      // Picked up again by another runner since the last read: its own window is the one to charge.
      this.giveBack(early);
      window = await this.hitRunnerWindow(grant.runnerId);
    }
    if (!window.allowed) {
      return { kind: 'rate_limited', reason: `runner ${grant.runnerId} over its rate limit`, retryAfterSeconds: retryAfterForWindow(window.resetInMs) };
    }

    // A decision reused for longer than the revocation grace would keep a job GitLab has just
    // ended writing past that grace on whichever replica (or nginx) remembered it (SPEC §5).
    const identity = jobIdentityOf(grant);
    const maxAgeSeconds = Math.max(
      0,
      Math.min(this.config.AUTH_DECISION_MAX_AGE_SECONDS, this.config.GRANT_REVOKE_GRACE_SECONDS, Math.floor((identity.expiresAt - now) / 1000)),
    );
    return { kind: 'allowed', identity, maxAgeSeconds };
  }
}
