import { IsOptional } from 'class-validator';
import { Integer, IsHttpUrl, OptionalText, Variable } from '../variable';

/** Runner authentication (SPEC §5): job tokens, the auth decision, its cache and rate limit. */
export class RunnerAuthConfig {
  /** GitLab's public keys for JWT job tokens (`glcbt-` + RS256 JWT): a JWKS file or URL (SPEC §5). */
  @Variable('JOB_TOKEN_JWKS_FILE') @OptionalText() readonly jobTokenJwksFile?: string;

  @Variable('JOB_TOKEN_JWKS_URL') @IsOptional() @IsHttpUrl() readonly jobTokenJwksUrl?: string;

  /** When set, JWT job tokens must carry this `iss` (the GitLab instance URL). */
  @Variable('JOB_TOKEN_ISSUER') @OptionalText() readonly jobTokenIssuer?: string;

  /** Upper bound of the auth decision's `Cache-Control: max-age`. */
  @Variable('AUTH_DECISION_MAX_AGE_SECONDS') @Integer({ min: 0 }) readonly decisionMaxAgeSeconds: number = 60;

  /**
   * Auth decisions the endpoint keeps per process, for their max-age (refusals 5 s), so a gateway
   * that asks on every export (nginx) costs a store lookup once per window. 0 turns it off.
   */
  @Variable('AUTH_DECISION_CACHE_SIZE') @Integer({ min: 0 }) readonly decisionCacheSize: number = 10_000;

  /** Auth requests one runner may make per window, counted in the store across replicas. */
  @Variable('RUNNER_RATE_LIMIT') @Integer({ min: 1 }) readonly rateLimit: number = 1200;

  @Variable('RUNNER_RATE_WINDOW_SECONDS') @Integer({ min: 1 }) readonly rateWindowSeconds: number = 60;

  /** After a job finishes or is canceled, its runner may still flush telemetry this long. */
  @Variable('GRANT_REVOKE_GRACE_SECONDS') @Integer({ min: 0 }) readonly grantRevokeGraceSeconds: number = 60;
}
