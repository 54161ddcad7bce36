import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Key of the token digests, derived from the trace key so deployments manage one key file. The
 * label keeps it apart from the trace and span id HMACs ("pipeline:…", "job:…"), and a digest is
 * useless without the token it came from.
 */
export function deriveTokenDigestKey(traceKey: Buffer): Buffer {
  return createHmac('sha256', traceKey).update('ci-job-telemetry token digest v1').digest();
}

/** HMAC-SHA256 of a runner or job token, hex: what grants hold instead of the token (SPEC §4 "Grant"). */
export function tokenDigest(key: Buffer, token: string): string {
  return createHmac('sha256', key).update(token).digest('hex');
}

/** Constant-time comparison of two digests (SPEC §5). */
export function digestsMatch(expected: string | undefined, actual: string): boolean {
  if (expected === undefined || expected.length !== actual.length) return false;
  return timingSafeEqual(Buffer.from(expected, 'hex'), Buffer.from(actual, 'hex'));
}
