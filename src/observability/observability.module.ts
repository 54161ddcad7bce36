import { DynamicModule, Global, Module } from '@nestjs/common';
import type { Logger } from 'pino';
import { HealthController } from './health.controller';
import { APP_LOGGER } from './logger';
import { MetricsService } from './metrics.service';
import { ReadinessChecks } from './readiness-checks';

@Global()
@Module({})
export class ObservabilityModule {
  /** `logger` is the process's pino instance, for the parts that log outside Nest (the gateway's Fastify). */
  static forRoot(logger: Logger): DynamicModule {
    return {
      module: ObservabilityModule,
      controllers: [HealthController],
      providers: [MetricsService, ReadinessChecks, { provide: APP_LOGGER, useValue: logger }],
      exports: [MetricsService, ReadinessChecks, APP_LOGGER],
    };
  }
}
