import { createSecretKey, KeyObject } from 'node:crypto';
import { jwtVerify, SignJWT } from 'jose';

/** Header GitLab sends with every internal API call (SPEC §3). */
export const INTERNAL_API_HEADER = 'gitlab-ci-telemetry-api-request';
/** A signed request older than this is refused even if its `exp` is later: limits replay. */
export const INTERNAL_API_MAX_AGE_SECONDS = 60;

export class InternalApiTokenVerifier {
  private readonly key: KeyObject;

  constructor(
    secret: Buffer,
    private readonly issuers: readonly string[],
  ) {
    this.key = createSecretKey(secret);
  }

  /**
   * Why a request's header is refused (for the 401), or undefined when it is accepted. Which check
   * failed is not the caller's business: one answer for forged, expired, stale and foreign tokens.
   */
  async refusal(header: string | string[] | undefined): Promise<string | undefined> {
    if (typeof header !== 'string' || header.length === 0) return `missing ${INTERNAL_API_HEADER} header`;
    try {
      await this.verify(header);
      return undefined;
    } catch {
      return `invalid ${INTERNAL_API_HEADER} token`;
    }
  }

  /** Resolves with the issuer; rejects for a missing, forged, expired, stale or foreign token. */
  async verify(token: string): Promise<string> {
    const { payload } = await jwtVerify(token, this.key, {
      algorithms: ['HS256'],
      issuer: [...this.issuers],
      maxTokenAge: INTERNAL_API_MAX_AGE_SECONDS,
      requiredClaims: ['iss', 'iat'],
    });
    return payload.iss as string;
  }
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
