import { createSecretKey, randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import { INTERNAL_API_MAX_AGE_SECONDS, InternalApiTokenVerifier } from './internal-api-token';

const SECRET = randomBytes(32);
const ISSUER = 'gitlab';
const START_MS = 1_800_000_000_000;

/** A header value as GitLab signs it, at a chosen time. */
function signAt(issuedAtSeconds: number, options: { expiresInSeconds?: number; secret?: Buffer; issuer?: string } = {}): Promise<string> {
  const jwt = new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(options.issuer ?? ISSUER)
    .setIssuedAt(issuedAtSeconds);
  if (options.expiresInSeconds !== undefined) jwt.setExpirationTime(issuedAtSeconds + options.expiresInSeconds);
  return jwt.sign(createSecretKey(options.secret ?? SECRET));
}

/** The verifier on a clock the test moves by hand. */
function verifierAt(startMs: number) {
  let nowMs = startMs;
  const verifier = new InternalApiTokenVerifier(SECRET, [ISSUER], () => nowMs);
  return { verifier, advance: (ms: number) => (nowMs += ms) };
}

const INVALID = 'invalid gitlab-ci-telemetry-api-request token';
const EXPIRED = 'expired gitlab-ci-telemetry-api-request token';

describe('InternalApiTokenVerifier (SPEC §3): a token asked about again is judged as the first time', () => {
  const issuedAt = START_MS / 1000;

  it('accepts the same token again while it is fresh, and refuses it once older than 60 s', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const token = await signAt(issuedAt, { expiresInSeconds: 3600 });
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(INTERNAL_API_MAX_AGE_SECONDS * 1000);
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(1000);
    expect(await verifier.refusal(token)).toEqual({ error: EXPIRED, reason: expect.stringMatching(/^issued 61 s ago, over the 60 s a token is accepted/) });
  });

  it('refuses a token it accepted once its exp has passed', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const token = await signAt(issuedAt, { expiresInSeconds: 10 });
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(9_999);
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(1);
    expect(await verifier.refusal(token)).toEqual({ error: EXPIRED, reason: 'expired 0 s ago (exp)' });
  });

  it('refuses, every time, a token forged with another secret or from a foreign issuer, beside an accepted one', async () => {
    const { verifier } = verifierAt(START_MS);
    const genuine = await signAt(issuedAt);
    const forged = await signAt(issuedAt, { secret: randomBytes(32) });
    const foreign = await signAt(issuedAt, { issuer: 'someone-else' });
    for (let round = 0; round < 2; round++) {
      expect(await verifier.refusal(genuine)).toBeUndefined();
      expect(await verifier.refusal(forged)).toEqual({
        error: INVALID,
        reason: expect.stringMatching(/^signature does not verify with the secret of INTERNAL_API_SECRET_FILE/),
      });
      expect(await verifier.refusal(foreign)).toEqual({ error: INVALID, reason: 'issuer "someone-else" is not in INTERNAL_API_ISSUERS (gitlab)' });
    }
  });

  it('refuses a token issued in the future until its time has come', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const early = await signAt(issuedAt + 5);
    expect(await verifier.refusal(early)).toEqual({ error: INVALID, reason: "issued 5 s in the future (iat): the caller's clock is ahead of this host's" });
    advance(5000);
    expect(await verifier.refusal(early)).toBeUndefined();
  });

  it('says expired, in the answer and the log, of a token never seen before that is past its exp or too old', async () => {
    const { verifier } = verifierAt(START_MS);
    expect(await verifier.refusal(await signAt(issuedAt - 30, { expiresInSeconds: 10 }))).toEqual({ error: EXPIRED, reason: 'expired 20 s ago (exp)' });
    expect(await verifier.refusal(await signAt(issuedAt - 300))).toEqual({ error: EXPIRED, reason: expect.stringMatching(/^issued 300 s ago/) });
  });

  it('tells a missing header from a token that is no JWT, without echoing either', async () => {
    const { verifier } = verifierAt(START_MS);
    expect(verifier.refusal(undefined)).toEqual({
      error: 'missing gitlab-ci-telemetry-api-request header',
      reason: 'missing gitlab-ci-telemetry-api-request header',
    });
    const refusal = await verifier.refusal('not-a-jwt-secret-looking-value');
    expect(refusal?.error).toBe(INVALID);
    expect(JSON.stringify(refusal)).not.toContain('not-a-jwt');
  });
});
