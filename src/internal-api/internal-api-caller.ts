import type { IncomingHttpHeaders } from 'node:http';
import { CALLER_KEY_HEADER, CallerKeys } from './caller-keys';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from './internal-api-token';

/**
 * Why an internal-API request's caller is refused (the 401's message), or undefined when it is
 * accepted (SPEC §3): the GitLab-signed JWT, or, on a route that passes `callerKeys`, a configured
 * caller key in its place. The Nest guard and the plain Fastify routes ask this one function, so
 * every route gives the same answers.
 */
export async function internalApiCallerRefusal(
  headers: IncomingHttpHeaders,
  verifier: InternalApiTokenVerifier,
  callerKeys?: CallerKeys,
): Promise<string | undefined> {
  const callerKey = headers[CALLER_KEY_HEADER];
  if (callerKeys !== undefined && typeof callerKey === 'string') return callerKeys.accepts(callerKey) ? undefined : `invalid ${CALLER_KEY_HEADER}`;
  return verifier.refusal(headers[INTERNAL_API_HEADER]);
}
