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

describe('InternalApiTokenVerifier (SPEC §3): a token asked about again is judged as the first time', () => {
  const issuedAt = START_MS / 1000;

  it('accepts the same token again while it is fresh, and refuses it once older than 60 s', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const token = await signAt(issuedAt, { expiresInSeconds: 3600 });
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(INTERNAL_API_MAX_AGE_SECONDS * 1000);
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(1000);
    expect(await verifier.refusal(token)).toBe('invalid gitlab-ci-telemetry-api-request token');
  });

  it('refuses a token it accepted once its exp has passed', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const token = await signAt(issuedAt, { expiresInSeconds: 10 });
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(9_999);
    expect(await verifier.refusal(token)).toBeUndefined();
    advance(1);
    expect(await verifier.refusal(token)).toBe('invalid gitlab-ci-telemetry-api-request token');
  });

  it('refuses, every time, a token forged with another secret or from a foreign issuer, beside an accepted one', async () => {
    const { verifier } = verifierAt(START_MS);
    const genuine = await signAt(issuedAt);
    const forged = await signAt(issuedAt, { secret: randomBytes(32) });
    const foreign = await signAt(issuedAt, { issuer: 'someone-else' });
    for (let round = 0; round < 2; round++) {
      expect(await verifier.refusal(genuine)).toBeUndefined();
      expect(await verifier.refusal(forged)).toBe('invalid gitlab-ci-telemetry-api-request token');
      expect(await verifier.refusal(foreign)).toBe('invalid gitlab-ci-telemetry-api-request token');
    }
  });

  it('refuses a token issued in the future until its time has come', async () => {
    const { verifier, advance } = verifierAt(START_MS);
    const early = await signAt(issuedAt + 5);
    expect(await verifier.refusal(early)).toBe('invalid gitlab-ci-telemetry-api-request token');
    advance(5000);
    expect(await verifier.refusal(early)).toBeUndefined();
  });
});
