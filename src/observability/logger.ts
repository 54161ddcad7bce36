import { LoggerService } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import pino, { Logger } from 'pino';

/** Injection token of the process's pino logger. */
export const APP_LOGGER = Symbol('APP_LOGGER');

/** Carries the request id into every log line written while serving that request (SPEC §8). */
export const requestScope = new AsyncLocalStorage<{ readonly requestId: string }>();

/**
 * Paths redacted wherever they appear in a logged object. Request logging never includes headers
 * or bodies, so this is the second line of defence: tokens must never reach a log.
 */
const REDACTED_PATHS = ['req.headers.authorization', 'req.headers["runner-token"]', 'req.headers["gitlab-ci-telemetry-api-request"]', '*.token', '*.*.token'];

/**
 * Log lines are written in batches of at least this many bytes, or every LOG_FLUSH_INTERVAL_MS when fewer
 * come: a write system call per line cost the gateway more than its own enforcement of a 100-span export.
 */
const LOG_BATCH_BYTES = 4096;
const LOG_FLUSH_INTERVAL_MS = 100;

/**
 * The process's logger. Without a destination, stdout in batches: what is still buffered is written out
 * synchronously when the process exits (pino's exit hook), so a crash or a shutdown loses no line; only
 * SIGKILL loses at most the last LOG_FLUSH_INTERVAL_MS.
 */
export function createLogger(
  level: string,
  destination: pino.DestinationStream = pino.destination({ dest: 1, sync: false, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_INTERVAL_MS }),
): Logger {
  return pino(
    {
      level,
      base: { service: 'ci-job-telemetry' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
      mixin: () => {
        const scope = requestScope.getStore();
        return scope === undefined ? {} : { request_id: scope.requestId };
      },
    },
    destination,
  );
}

/**
 * The logger handed to Fastify: its one info line of its own is "Server listening at …", once per
 * address and port, which the start-up summary says better; request logging is off (requests are
 * logged by request-hooks.ts). So Fastify's info is debug here; its warnings and errors stay as they are.
 */
export function frameworkLogger(logger: Logger): Logger {
  const framework = logger.child({});
  framework.info = framework.debug;
  return framework;
}

/**
 * Nest's narration of its own start (modules initialized, routes mapped, "successfully started"): about
 * thirty lines that say nothing an operator acts on, so they are debug. The service's own start-up
 * summary says what matters in one line.
 */
const FRAMEWORK_CONTEXTS: ReadonlySet<string> = new Set(['NestFactory', 'InstanceLoader', 'RoutesResolver', 'RouterExplorer', 'NestApplication']);

/** Nest's own messages (startup, services' `new Logger(...)`) as JSON lines through the same pino. */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}

  log(message: unknown, context?: string): void {
    if (context !== undefined && FRAMEWORK_CONTEXTS.has(context)) this.logger.debug({ context }, String(message));
    else this.logger.info({ context }, String(message));
  }

  error(message: unknown, trace?: string, context?: string): void {
    this.logger.error({ context, trace }, String(message));
  }

  warn(message: unknown, context?: string): void {
    this.logger.warn({ context }, String(message));
  }

  debug(message: unknown, context?: string): void {
    this.logger.debug({ context }, String(message));
  }

  verbose(message: unknown, context?: string): void {
    this.logger.trace({ context }, String(message));
  }
}
