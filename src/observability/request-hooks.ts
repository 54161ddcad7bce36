import type { FastifyInstance, FastifyRequest } from 'fastify';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import { requestScope } from './logger';

export const REQUEST_ID_HEADER = 'x-request-id';
/** A caller's request id is kept when it is plausible, so GitLab's correlation id follows the call. */
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Fastify's `childLoggerFactory` for both ports: requests log through the root logger, whose mixin adds the
 * request id. Fastify's default makes a pino child logger per request (bindings, level and redaction set
 * up each time) that nothing here reads.
 */
export function rootLoggerForRequests<L>(logger: L): L {
  return logger;
}

/** Fastify's `genReqId` for both ports. */
export function requestIdOf(request: IncomingMessage): string {
  const header = request.headers[REQUEST_ID_HEADER];
  return typeof header === 'string' && ACCEPTABLE_REQUEST_ID.test(header) ? header : randomUUID();
}

/**
 * What the access log says of a request's path: its route template when it matched one, so a
 * capability in the path (SPEC §6) never reaches a log; otherwise the path with anything under
 * `/jobs/<id>/` and the query string cut, since an unmatched URL may still carry a credential.
 */
function loggedRoute(request: FastifyRequest): string {
  const template = request.routeOptions.url;
  if (template !== undefined) return template;
  const path = request.url.split('?')[0];
  return path.replace(/^(\/jobs\/[^/]*\/).*$/, '$1…');
}

/**
 * Puts the request id on the response and on every log line written while serving the request, and
 * writes one line per request after it is answered: method, route, status, duration; never headers,
 * bodies or credentials in paths (SPEC §8). The root logger's mixin adds the request id, so
 * request.log is not used.
 */
export interface AccessLogOptions {
  /** Answers below 400 are logged at most once per this many milliseconds (0: every one). */
  readonly successLogIntervalMs?: number;
  /** Which routes that applies to: every one (the gateway), or those whose config says SAMPLED_ACCESS_LOG. */
  readonly sampledRoutes: 'all' | 'marked';
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Successes logged at most once per EXPORT_SUCCESS_LOG_INTERVAL_MS, where the server samples marked routes. */
    sampledAccessLog?: boolean;
  }
}

/** Route config of a route called on every export (the auth endpoint nginx asks): its successes are sampled. */
export const SAMPLED_ACCESS_LOG = { sampledAccessLog: true } as const;

export function addRequestHooks(app: FastifyInstance, logger: Logger, options: AccessLogOptions): void {
  app.addHook('onRequest', (request, reply, done) => {
    requestScope.enterWith({ requestId: String(request.id) });
    void reply.header(REQUEST_ID_HEADER, request.id);
    done();
  });
  // Answers below 400 at most once per interval, saying how many went unlogged since (metrics count them
  // all): one line per export cost the gateway a fifth of its CPU (issue 21). Refusals and failures always.
  const interval = options.successLogIntervalMs ?? 0;
  // Each route its own interval, so a busy one (the pickups) never hides another's successes (the auth endpoint's).
  const sampling = new Map<string, { lastLineAt: number; unlogged: number }>();
  app.addHook('onResponse', (request, reply, done) => {
    const status = reply.statusCode;
    const sampled = status < 400 && interval > 0 && (options.sampledRoutes === 'all' || request.routeOptions.config?.sampledAccessLog === true);
    const route = loggedRoute(request);
    let unlogged = 0;
    if (sampled) {
      const now = performance.now();
      let seen = sampling.get(route);
      if (seen === undefined) sampling.set(route, (seen = { lastLineAt: -Infinity, unlogged: 0 }));
      if (now - seen.lastLineAt < interval) {
        seen.unlogged++;
        return done();
      }
      seen.lastLineAt = now;
      unlogged = seen.unlogged;
      seen.unlogged = 0;
    }
    const line = { method: request.method, route, status, ms: Math.round(reply.elapsedTime * 100) / 100 };
    if (sampled) logger.info({ ...line, successes_unlogged: unlogged }, 'request completed');
    else logger.info(line, 'request completed');
    done();
  });
}
