import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Per-job capability URLs (SPEC §4, §6). A stock GitLab Runner sends no credentials of its own to an
 * endpoint without `auth`, so the credential travels in the export URL instead: a keyed MAC of the
 * job id, which only the holder of the capability key can mint and which names exactly one job.
 */

/** 192 bits: well above the 128 the SPEC asks for, and 32 URL-safe characters without padding. */
const CAPABILITY_BYTES = 24;
const CAPABILITY_PATTERN = /^[A-Za-z0-9_-]{32}$/;

const CAPABILITY_MESSAGE = 'ci-job-telemetry capability v1 job:';

/** Domain-separated from every other HMAC under a related key (trace ids, token digests). */
function macOf(key: Buffer, jobId: number): Buffer {
  return createHmac('sha256', key).update(`${CAPABILITY_MESSAGE}${jobId}`).digest().subarray(0, CAPABILITY_BYTES);
}

/** Base64url writes 3 bytes as 4 characters, so the first CAPABILITY_BYTES (a multiple of 3) are the first 32 characters. */
const CAPABILITY_CHARS = (CAPABILITY_BYTES / 3) * 4;

export function mintCapability(key: Buffer, jobId: number): string {
  // The digest as text, cut: the same characters as the MAC's first bytes written out, without a Buffer between.
  return createHmac('sha256', key).update(`${CAPABILITY_MESSAGE}${jobId}`).digest('base64url').slice(0, CAPABILITY_CHARS);
}

/**
 * Whether `capability` was minted for `jobId` under any of `keys` (the current key first, then the
 * previous one during a rotation). Constant-time per key, and every key is tried, so the answer's
 * timing says nothing about which key or how many bytes matched.
 */
export function capabilityMatches(keys: readonly Buffer[], jobId: number, capability: string): boolean {
  if (!CAPABILITY_PATTERN.test(capability)) return false;
  const presented = Buffer.from(capability, 'base64url');
  let matched = false;
  for (const key of keys) {
    if (timingSafeEqual(macOf(key, jobId), presented)) matched = true;
  }
  return matched;
}

/** `/jobs/<job id>/<capability>`: what a capability base URL adds to the gateway's public URL. */
export function capabilityPath(jobId: number, capability: string): string {
  return `/jobs/${jobId}/${capability}`;
}

const CAPABILITY_ROUTE = /^\/jobs\/(\d{1,15})\/([^/?#]+)\/v1\/(?:traces|metrics|logs)(?:[?#].*)?$/;

/**
 * The job id and capability of an export URL's path, e.g. nginx's `X-Original-URI`, or undefined
 * when the path is not a capability route.
 */
export function capabilityOfPath(path: string): { readonly jobId: number; readonly capability: string } | undefined {
  const match = CAPABILITY_ROUTE.exec(path);
  if (match === null) return undefined;
  return { jobId: Number(match[1]), capability: match[2] };
}
