import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { LogController } from 'fastify';
import type { Logger } from 'pino';
import { AppModule } from './app.module';
import { AppConfig } from './config/app-config';
import { Secrets } from './config/secrets';
import { AllExceptionsFilter } from './observability/all-exceptions.filter';
import { drainUnreadBodies } from './observability/body-drain';
import { frameworkLogger, PinoNestLogger } from './observability/logger';
import { addRequestHooks, requestIdOf, rootLoggerForRequests } from './observability/request-hooks';

/**
 * Builds the application: the internal API, ready to `listen` (or `inject` in tests), and, by role,
 * the gateway's own Fastify server (`app.get(GatewayServer)`).
 */
export async function createInternalApp(config: AppConfig, secrets: Secrets, logger: Logger): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({
    loggerInstance: frameworkLogger(logger),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.internalApi.bodyLimitBytes,
    genReqId: requestIdOf,
    childLoggerFactory: rootLoggerForRequests,
  });
  const app = await NestFactory.create<NestFastifyApplication>(AppModule.forRoot(config, secrets, logger), adapter, {
    logger: new PinoNestLogger(logger),
  });
  app.useGlobalFilters(new AllExceptionsFilter());

  // nginx asks the auth endpoint on every export: its successes are logged as the gateway's exports are
  // (the route is marked SAMPLED_ACCESS_LOG); every other internal route logs each request.
  addRequestHooks(app.getHttpAdapter().getInstance(), logger, {
    successLogIntervalMs: config.gateway.successLogIntervalMs,
    sampledRoutes: 'marked',
  });
  drainUnreadBodies(app.getHttpAdapter().getInstance(), config.internalApi.bodyLimitBytes);
  await app.init();
  return app;
}
