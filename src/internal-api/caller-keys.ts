import { createHash, hash, randomBytes, timingSafeEqual } from 'node:crypto';

/** Header a third-party gateway (nginx `auth_request`) sends instead of a signed JWT (SPEC §3). */
export const CALLER_KEY_HEADER = 'ci-telemetry-caller-key';
const CALLER_KEY_PREFIX = 'cjtck_';

export function callerKeyDigest(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** A new long-lived caller key: 32 random bytes, so a plain SHA-256 digest is safe to publish. */
export function generateCallerKey(): string {
  return CALLER_KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** Only digests are configured; the comparison is constant-time for each configured one. */
export class CallerKeys {
  private readonly digests: Buffer[];

  constructor(digests: readonly string[]) {
    this.digests = digests.map((digest) => Buffer.from(digest, 'hex'));
  }

  accepts(key: string): boolean {
    const presented = hash('sha256', key, 'buffer');
    let accepted = false;
    for (const digest of this.digests) accepted = timingSafeEqual(digest, presented) || accepted;
    return accepted;
  }
}
