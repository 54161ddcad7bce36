import { createSecretKey, hash, KeyObject } from 'node:crypto';
import { errors, JWTPayload, jwtVerify, SignJWT } from 'jose';
import { LRUCache } from 'lru-cache';

/** Header GitLab sends with every internal API call (SPEC §3). */
export const INTERNAL_API_HEADER = 'gitlab-ci-telemetry-api-request';
/** A signed request older than this is refused even if its `exp` is later: limits replay. */
export const INTERNAL_API_MAX_AGE_SECONDS = 60;
/** Distinct tokens remembered as verified; a caller signing once per second needs about 60. */
const VERIFIED_TOKENS = 1024;
const INVALID_TOKEN = `invalid ${INTERNAL_API_HEADER} token`;
const EXPIRED_TOKEN = `expired ${INTERNAL_API_HEADER} token`;

/** A refused internal-API caller: `error` is what the 401 says, `reason` what the log says. Neither holds the token. */
export interface CallerRefusal {
  readonly error: string;
  readonly reason: string;
}

/** The time claims of a token whose signature, issuer and claims have been verified once. */
interface VerifiedToken {
  readonly iat: number;
  readonly exp?: number;
  readonly nbf?: number;
}

export class InternalApiTokenVerifier {
  private readonly key: KeyObject;
  /**
   * The same token string verifies the same way under this process's one secret and issuer list, so a
   * token seen again skips the signature and only has its time claims checked again, as jose checks
   * them. Only accepted tokens are kept: a forged one costs a full verification every time, and needs
   * the secret to get in. The JWT verification was about a sixth of the auth endpoint's CPU on a reused
   * decision (bench/token-auth.bench.ts --cpu-prof). A caller that signs per request still repeats its
   * token within the second, since `iat` counts whole seconds. Keyed by the token's digest, like the
   * decision caches: the process keeps no caller credential past the request that brought it.
   */
  private readonly verified = new LRUCache<string, VerifiedToken>({ max: VERIFIED_TOKENS });

  constructor(
    secret: Buffer,
    private readonly issuers: readonly string[],
    private readonly clock: () => number = Date.now,
  ) {
    this.key = createSecretKey(secret);
  }

  /**
   * Why a request's header is refused (the 401 and the log line), or undefined when it is accepted. The
   * caller is told `invalid` or `expired`, nothing finer. `expired` is only ever said of a token whose
   * signature verified (jose checks the signature before any claim), so it tells nothing to whoever lacks
   * the secret, and it is the one refusal a caller fixes alone: sign each request, keep its clock right.
   * Which check failed goes to the log, for the operator. A token already verified is answered
   * synchronously, without a promise: the auth endpoint asks on every export nginx forwards, and a
   * caller repeats its token for up to a second.
   */
  refusal(header: string | string[] | undefined): CallerRefusal | undefined | Promise<CallerRefusal | undefined> {
    if (typeof header !== 'string' || header.length === 0) {
      const missing = `missing ${INTERNAL_API_HEADER} header`;
      return { error: missing, reason: missing };
    }
    const nowMs = this.clock();
    const digest = hash('sha256', header, 'base64');
    const known = this.verified.get(digest);
    if (known !== undefined) return untimely(known, Math.floor(nowMs / 1000));
    return this.verifySignature(header, digest, nowMs).then(
      () => undefined,
      (error: unknown) => this.refusalFor(error, Math.floor(nowMs / 1000)),
    );
  }

  /** The full check of a token not seen before; remembered once it passes. */
  private async verifySignature(token: string, digest: string, nowMs: number): Promise<void> {
    const { payload } = await jwtVerify(token, this.key, {
      algorithms: ['HS256'],
      issuer: [...this.issuers],
      maxTokenAge: INTERNAL_API_MAX_AGE_SECONDS,
      requiredClaims: ['iss', 'iat'],
      currentDate: new Date(nowMs),
    });
    const { iat, exp, nbf } = payload as { iat: number; exp?: number; nbf?: number };
    this.verified.set(digest, { iat, exp, nbf });
  }

  /** jose's failure in words an operator can act on. Only claims of a token whose signature verified are read. */
  private refusalFor(error: unknown, now: number): CallerRefusal {
    if (error instanceof errors.JWSSignatureVerificationFailed) {
      return { error: INVALID_TOKEN, reason: 'signature does not verify with the secret of INTERNAL_API_SECRET_FILE: GitLab must sign with the same secret' };
    }
    if (error instanceof errors.JWTExpired || error instanceof errors.JWTClaimValidationFailed) {
      const claims = error.payload as JWTPayload;
      if (error.claim === 'iss')
        return { error: INVALID_TOKEN, reason: `issuer ${JSON.stringify(claims.iss)} is not in INTERNAL_API_ISSUERS (${this.issuers.join(',')})` };
      const timing = typeof claims.iat === 'number' ? untimely({ iat: claims.iat, exp: claims.exp, nbf: claims.nbf }, now) : undefined;
      if (timing !== undefined) return timing;
    }
    if (error instanceof errors.JOSEAlgNotAllowed) return { error: INVALID_TOKEN, reason: 'not signed with HS256' };
    return { error: INVALID_TOKEN, reason: `not a JWT this service can read (${error instanceof Error ? error.message : String(error)})` };
  }
}

/**
 * jose's time checks (no clock tolerance) at `now`, in whole epoch seconds as jose counts them: why a
 * token is out of its time, or undefined while it is in it.
 */
function untimely(token: VerifiedToken, now: number): CallerRefusal | undefined {
  const age = now - token.iat;
  if (token.exp !== undefined && token.exp <= now) return { error: EXPIRED_TOKEN, reason: `expired ${now - token.exp} s ago (exp)` };
  if (age > INTERNAL_API_MAX_AGE_SECONDS) {
    return {
      error: EXPIRED_TOKEN,
      reason: `issued ${age} s ago, over the ${INTERNAL_API_MAX_AGE_SECONDS} s a token is accepted: the caller must sign each request, with a clock that agrees with this host's`,
    };
  }
  if (age < 0) return { error: INVALID_TOKEN, reason: `issued ${-age} s in the future (iat): the caller's clock is ahead of this host's` };
  if (token.nbf !== undefined && token.nbf > now) return { error: INVALID_TOKEN, reason: `not valid for another ${token.nbf - now} s (nbf)` };
  return undefined;
}

/** Signs a header value the way GitLab does, for local use and tests. */
export async function signInternalApiToken(secret: Buffer, issuer: string, expiresInSeconds = 60): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(issuer)
    .setIssuedAt()
    .setExpirationTime(`${expiresInSeconds}s`)
    .sign(createSecretKey(secret));
}
