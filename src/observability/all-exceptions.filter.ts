import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpProblem, sendError } from './http-error';

/**
 * The one place errors become HTTP answers on the internal port, replying on Fastify directly.
 * Nest routes Fastify's own errors (body parsing, size limits) here too.
 */
@Catch()
export class AllExceptionsFilter implements ExceptionFilter {
  private readonly logger = new Logger('HttpError');

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const request = http.getRequest<FastifyRequest>();
    const reply = http.getResponse<FastifyReply>();
    if (exception instanceof HttpProblem) {
      sendError(request, reply, exception.status, exception.message, exception.options);
      return;
    }
    if (exception instanceof HttpException) {
      sendError(request, reply, exception.getStatus(), exception.message);
      return;
    }
    // Fastify's own errors carry `statusCode`; anything else is ours: a 500 that shows no internals.
    const error = exception as Error & { statusCode?: number };
    const status = error.statusCode ?? 500;
    if (status >= 500) {
      this.logger.error(`request failed: ${error.stack ?? error.message}`);
      sendError(request, reply, status, 'internal error');
    } else {
      sendError(request, reply, status, error.message);
    }
  }
}
