import { hash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { capabilityOfPath } from './job-capability';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * What a runner (or a program inside its job) proves itself with, on the gateway and on the auth
 * endpoint alike: header credentials (SPEC §5) or a per-job capability URL (SPEC §4, §6).
 */
export type RunnerCredential =
  | { readonly kind: 'tokens'; readonly jobToken: string; readonly runnerToken: string }
  | { readonly kind: 'capability'; readonly jobId: number; readonly capability: string }
  | { readonly kind: 'missing'; readonly reason: string };

/**
 * Header credentials as the runner sends them (SPEC §5): the job token as `Authorization: Bearer`,
 * the runner token as `Runner-Token`.
 */
export function headerCredential(headers: IncomingHttpHeaders): RunnerCredential {
  const authorization = headers.authorization;
  const runnerToken = headers['runner-token'];
  const jobToken = typeof authorization === 'string' ? BEARER.exec(authorization)?.[1] : undefined;
  if (jobToken === undefined) return { kind: 'missing', reason: 'missing job token (Authorization: Bearer)' };
  if (typeof runnerToken !== 'string' || runnerToken.length === 0) return { kind: 'missing', reason: 'missing runner token (Runner-Token)' };
  return { kind: 'tokens', jobToken, runnerToken };
}

/**
 * The credential of a request to the auth endpoint: the capability of the export URL when the
 * calling gateway passes it as `X-Original-URI` (nginx `auth_request` and our ROLE=gateway do),
 * otherwise the header credentials.
 */
export function forwardedCredential(headers: IncomingHttpHeaders): RunnerCredential {
  const originalUri = headers['x-original-uri'];
  const capability = typeof originalUri === 'string' ? capabilityOfPath(originalUri) : undefined;
  if (capability !== undefined) return { kind: 'capability', ...capability };
  return headerCredential(headers);
}

/**
 * A digest naming the credential, for decision caches: the cache never holds a token or capability.
 * Undefined for a missing credential, whose refusal is not worth a cache entry.
 */
export function credentialCacheKey(credential: RunnerCredential): string | undefined {
  switch (credential.kind) {
    case 'tokens':
      // One-shot hashing: a third of the cost of a Hash object, on every export and auth request.
      return hash('sha256', `tokens\0${credential.jobToken}\0${credential.runnerToken}`, 'base64');
    case 'capability':
      return hash('sha256', `capability\0${credential.jobId}\0${credential.capability}`, 'base64');
    case 'missing':
      return undefined;
    default: {
      const unreachable: never = credential;
      throw new Error(`unhandled credential ${JSON.stringify(unreachable)}`);
    }
  }
}
