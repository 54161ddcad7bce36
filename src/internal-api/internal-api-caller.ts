import type { onRequestHookHandler } from 'fastify';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { refusalHook } from '../observability/plain-route';
import { CALLER_KEY_HEADER, CallerKeys } from './caller-keys';
import { CallerRefusal, INTERNAL_API_HEADER, InternalApiTokenVerifier } from './internal-api-token';

/**
 * Why an internal-API request's caller is refused (the 401's message and the log's reason), or undefined
 * when it is accepted (SPEC §3): the GitLab-signed JWT, or, on a route that passes `callerKeys`, a
 * configured caller key in its place. The Nest guard and the plain Fastify routes ask this one function,
 * so every route gives the same answers. Synchronous for a caller key and for a JWT already verified.
 */
export function internalApiCallerRefusal(
  headers: IncomingHttpHeaders,
  verifier: InternalApiTokenVerifier,
  callerKeys?: CallerKeys,
): CallerRefusal | undefined | Promise<CallerRefusal | undefined> {
  const callerKey = headers[CALLER_KEY_HEADER];
  if (callerKeys !== undefined && typeof callerKey === 'string') {
    return callerKeys.accepts(callerKey) ? undefined : { error: `invalid ${CALLER_KEY_HEADER}`, reason: 'caller key not among AUTH_CALLER_KEY_DIGESTS' };
  }
  return verifier.refusal(headers[INTERNAL_API_HEADER]);
}

/**
 * Every internal-API 401 is logged with its reason (the request id comes with the line), never a token:
 * a GitLab signing with another secret, or with a clock off, shows here rather than as telemetry that
 * silently never starts.
 */
export function logCallerRefusal(logger: Logger, refusal: CallerRefusal): void {
  logger.info({ refusal: 'unauthenticated', reason: refusal.reason }, 'internal API caller refused');
}

/**
 * A plain Fastify route's caller check (`onRequest`, before the body is read): an accepted caller goes on,
 * any other gets the internal API's 401, logged with its reason.
 */
export function callerCheckHook(
  refusalOf: (headers: IncomingHttpHeaders) => CallerRefusal | undefined | Promise<CallerRefusal | undefined>,
  logger: Logger,
): onRequestHookHandler {
  return refusalHook(
    (request) => refusalOf(request.headers),
    (_request, refusal) => logCallerRefusal(logger, refusal),
  );
}
