import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { LogController } from 'fastify';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import { AppModule } from './app.module';
import { AppConfig } from './config/app-config';
import { Secrets } from './config/secrets';
import { AllExceptionsFilter } from './observability/all-exceptions.filter';
import { PinoNestLogger, requestScope } from './observability/logger';

const REQUEST_ID_HEADER = 'x-request-id';
/** A caller's request id is kept when it is plausible, so GitLab's correlation id follows the call. */
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

function requestIdOf(header: string | string[] | undefined): string {
  return typeof header === 'string' && ACCEPTABLE_REQUEST_ID.test(header) ? header : randomUUID();
}

/**
 * Builds the application: the internal API, ready to `listen` (or `inject` in tests), and, by role,
 * the gateway's own Fastify server (`app.get(GatewayServer)`).
 */
export async function createInternalApp(config: AppConfig, secrets: Secrets, logger: Logger): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.BODY_LIMIT_BYTES,
    genReqId: (request: IncomingMessage) => requestIdOf(request.headers[REQUEST_ID_HEADER]),
  });
  const app = await NestFactory.create<NestFastifyApplication>(AppModule.forRoot(config, secrets, logger), adapter, {
    logger: new PinoNestLogger(logger),
  });
  app.useGlobalFilters(new AllExceptionsFilter());

  const fastify = app.getHttpAdapter().getInstance();
  fastify.addHook('onRequest', (request, reply, done) => {
    requestScope.enterWith({ requestId: String(request.id) });
    void reply.header(REQUEST_ID_HEADER, request.id);
    done();
  });
  // One line per request, after it is answered: method, route, status, duration. Never headers or bodies.
  // The root logger's mixin adds the request id, so request.log's own binding would only repeat it.
  fastify.addHook('onResponse', (request, reply, done) => {
    logger.info(
      { method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 },
      'request completed',
    );
    done();
  });
  await app.init();
  return app;
}
