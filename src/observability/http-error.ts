import type { FastifyReply, FastifyRequest } from 'fastify';

/** Every internal-API error body: `{ error, request_id }`, never echoing a token (SPEC §5, §8). */
export interface ErrorBody {
  readonly error: string;
  readonly request_id: string;
  readonly [detail: string]: unknown;
}

export interface ErrorOptions {
  /** Extra members beside `error` and `request_id` (a 400's `fields`). */
  readonly details?: Record<string, unknown>;
  /** For 429 and 503: integer seconds, from the one Retry-After policy (retry-after.ts). */
  readonly retryAfterSeconds?: number;
}

/** The one writer of internal-API errors: the exception filter and the plain Fastify routes call it. */
export function sendError(request: FastifyRequest, reply: FastifyReply, status: number, message: string, options: ErrorOptions = {}): void {
  const body: ErrorBody = { ...options.details, error: message, request_id: String(request.id) };
  if (options.retryAfterSeconds !== undefined) void reply.header('retry-after', String(options.retryAfterSeconds));
  void reply.status(status).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body));
}

/**
 * An HTTP answer a service decides, with what the internal API's error shape carries beside the message (a 400's
 * `fields`, a 503's Retry-After): thrown from a controller's service, written by AllExceptionsFilter like any other.
 */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly options: ErrorOptions = {},
  ) {
    super(message);
    this.name = 'HttpProblem';
  }
}
