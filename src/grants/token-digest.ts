import { createHmac, timingSafeEqual } from 'node:crypto';

/** HMAC-SHA256 of a runner or job token, hex: what grants hold instead of the token (SPEC §4 "Grant"). */
export function tokenDigest(key: Buffer, token: string): string {
  return createHmac('sha256', key).update(token).digest('hex');
}

/** Constant-time comparison of two digests (SPEC §5). */
export function digestsMatch(expected: string | undefined, actual: string): boolean {
  if (expected === undefined || expected.length !== actual.length) return false;
  return timingSafeEqual(Buffer.from(expected, 'hex'), Buffer.from(actual, 'hex'));
}
