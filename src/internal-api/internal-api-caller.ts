import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import type { IncomingHttpHeaders } from 'node:http';
import { sendError } from '../observability/http-error';
import { CALLER_KEY_HEADER, CallerKeys } from './caller-keys';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from './internal-api-token';

/**
 * Why an internal-API request's caller is refused (the 401's message), or undefined when it is
 * accepted (SPEC §3): the GitLab-signed JWT, or, on a route that passes `callerKeys`, a configured
 * caller key in its place. The Nest guard and the plain Fastify routes ask this one function, so
 * every route gives the same answers. Synchronous for a caller key and for a JWT already verified.
 */
export function internalApiCallerRefusal(
  headers: IncomingHttpHeaders,
  verifier: InternalApiTokenVerifier,
  callerKeys?: CallerKeys,
): string | undefined | Promise<string | undefined> {
  const callerKey = headers[CALLER_KEY_HEADER];
  if (callerKeys !== undefined && typeof callerKey === 'string') return callerKeys.accepts(callerKey) ? undefined : `invalid ${CALLER_KEY_HEADER}`;
  return verifier.refusal(headers[INTERNAL_API_HEADER]);
}

/**
 * A plain Fastify route's `onRequest` hook, before the body is read: an accepted caller goes on, any
 * other gets the internal API's 401. Callback-style, so a check answered synchronously (a caller key,
 * a JWT already verified) costs the request no promise: nginx asks the auth endpoint on every export.
 */
export function callerCheckHook(refusalOf: (headers: IncomingHttpHeaders) => string | undefined | Promise<string | undefined>): onRequestHookHandler {
  return (request, reply, done) => {
    const refusal = refusalOf(request.headers);
    if (refusal instanceof Promise) refusal.then((settled) => admit(request, reply, done, settled), done);
    else admit(request, reply, done, refusal);
  };
}

function admit(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, refusal: string | undefined): void {
  if (refusal === undefined) done();
  else sendError(request, reply, 401, refusal);
}
