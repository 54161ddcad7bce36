import { createSecretKey, hash, KeyObject } from 'node:crypto';
import { jwtVerify, SignJWT } from 'jose';
import { LRUCache } from 'lru-cache';

/** Header GitLab sends with every internal API call (SPEC §3). */
export const INTERNAL_API_HEADER = 'gitlab-ci-telemetry-api-request';
/** A signed request older than this is refused even if its `exp` is later: limits replay. */
export const INTERNAL_API_MAX_AGE_SECONDS = 60;
/** Distinct tokens remembered as verified; a caller signing once per second needs about 60. */
const VERIFIED_TOKENS = 1024;
const INVALID_TOKEN = `invalid ${INTERNAL_API_HEADER} token`;

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
   * Why a request's header is refused (for the 401), or undefined when it is accepted. Which check
   * failed is not the caller's business: one answer for forged, expired, stale and foreign tokens.
   * A token already verified is answered synchronously, without a promise: the auth endpoint asks on
   * every export nginx forwards, and a caller repeats its token for up to a second.
   */
  refusal(header: string | string[] | undefined): string | undefined | Promise<string | undefined> {
    if (typeof header !== 'string' || header.length === 0) return `missing ${INTERNAL_API_HEADER} header`;
    const nowMs = this.clock();
    const digest = hash('sha256', header, 'base64');
    const known = this.verified.get(digest);
    if (known !== undefined) return timely(known, Math.floor(nowMs / 1000)) ? undefined : INVALID_TOKEN;
    return this.verifySignature(header, digest, nowMs).then(
      () => undefined,
      () => INVALID_TOKEN,
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
}

/** jose's time checks (no clock tolerance) at `now`, in whole epoch seconds as jose counts them. */
function timely(token: VerifiedToken, now: number): boolean {
  const age = now - token.iat;
  return age >= 0 && age <= INTERNAL_API_MAX_AGE_SECONDS && (token.exp === undefined || token.exp > now) && (token.nbf === undefined || token.nbf <= now);
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
