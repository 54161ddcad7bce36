import { Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyContextConfig, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { sendError } from './http-error';

/** Why a caller is refused: `error` is the 401's message; anything else is for the owner's log line. */
export interface RouteRefusal {
  readonly error: string;
}

export interface PlainPostRoute {
  readonly url: string;
  /** The caller check, before the body is read (`refusalHook`): a refused caller never gets a body parsed. */
  readonly onRequest: onRequestHookHandler;
  readonly handler: (request: FastifyRequest, reply: FastifyReply) => unknown;
  readonly config?: FastifyContextConfig;
  /**
   * This route's own content-type parsers: it then sits in a Fastify context of its own, so that they
   * apply to it alone.
   */
  readonly bodyParsers?: (scope: FastifyInstance) => void;
}

/**
 * Registers a `POST` on the internal API's Fastify instance as a plain Fastify route; call it from the
 * owner's `onModuleInit`. The routes GitLab and nginx call on every job pickup, export and webhook
 * (job payload, auth, GitLab webhooks) are plain Fastify routes: Nest's per-request machinery (router
 * proxy, guard, reflector, pipes, parameter resolution, class-validator) cost about 400 µs of CPU per
 * pickup, as much as the decorator itself, and most of an auth answer (measured with
 * bench/job-payload.bench.ts and bench/token-auth.bench.ts --cpu-prof). DI still wires each one; its
 * errors keep the internal API's one shape (`sendError`), and Fastify's own (malformed JSON, 413 over
 * BODY_LIMIT_BYTES) still go through AllExceptionsFilter.
 */
export function registerPlainPost(adapterHost: HttpAdapterHost, route: PlainPostRoute): void {
  const fastify = adapterHost.httpAdapter.getInstance<FastifyInstance>();
  const options = { method: 'POST' as const, url: route.url, config: route.config, onRequest: route.onRequest, handler: route.handler };
  if (route.bodyParsers === undefined) {
    fastify.route(options);
  } else {
    const bodyParsers = route.bodyParsers;
    void fastify.register(async (scope) => {
      bodyParsers(scope);
      scope.route(options);
    });
  }
  new Logger('RouterExplorer').debug(`Mapped {${route.url}, POST} route (plain Fastify)`);
}

/**
 * A caller check as a plain route's `onRequest` hook: an accepted caller goes on, any other gets the
 * internal API's 401 after `refused` has logged (and counted) it. Callback-style, so a check answered
 * synchronously (a caller key, a JWT already verified, a webhook secret) costs the request no promise:
 * nginx asks the auth endpoint on every export.
 */
export function refusalHook<Refusal extends RouteRefusal>(
  refusalOf: (request: FastifyRequest) => Refusal | undefined | Promise<Refusal | undefined>,
  refused: (request: FastifyRequest, refusal: Refusal) => void,
): onRequestHookHandler {
  const admit = (request: FastifyRequest, reply: FastifyReply, done: () => void, refusal: Refusal | undefined): void => {
    if (refusal === undefined) return done();
    refused(request, refusal);
    sendError(request, reply, 401, refusal.error);
  };
  return (request, reply, done) => {
    const refusal = refusalOf(request);
    if (refusal instanceof Promise) refusal.then((settled) => admit(request, reply, done, settled), done);
    else admit(request, reply, done, refusal);
  };
}
