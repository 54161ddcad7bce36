import type { FastifyReply, FastifyRequest } from 'fastify';

/** Every internal-API error body: `{ error, request_id }`, never echoing a token (SPEC §5, §8). */
export interface ErrorBody {
  readonly error: string;
  readonly request_id: string;
  readonly [detail: string]: unknown;
}

export function sendError(
  request: FastifyRequest,
  reply: FastifyReply,
  status: number,
  message: string,
  details: Record<string, unknown> = {},
): void {
  const body: ErrorBody = { ...details, error: message, request_id: String(request.id) };
  void reply.status(status).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body));
}
