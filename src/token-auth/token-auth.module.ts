import { Module } from '@nestjs/common';
import { Counter } from 'prom-client';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { MetricsService } from '../observability/metrics.service';
import { DecisionCache } from '../runner-auth/decision-cache';
import { RunnerAuthModule } from '../runner-auth/runner-auth.module';
import { RunnerAuthService } from '../runner-auth/runner-auth.service';
import { AUTH_DECISIONS } from './token-auth.constants';
import { TokenAuthController } from './token-auth.controller';
import { TokenAuthRoute } from './token-auth.route';

/** The auth endpoint and grant revocation (SPEC §5): the HTTP edge of the runner auth decision. */
@Module({
  imports: [InternalApiModule, RunnerAuthModule],
  controllers: [TokenAuthController],
  providers: [
    {
      provide: AUTH_DECISIONS,
      inject: [APP_CONFIG, RunnerAuthService, MetricsService],
      useFactory: (config: AppConfig, runnerAuth: RunnerAuthService, metrics: MetricsService) => {
        const cache = new Counter({
          name: 'ci_job_telemetry_auth_decision_cache_total',
          help: 'Auth endpoint decisions served from the cache (hit) or looked up in the store (miss)',
          labelNames: ['result'],
          registers: [metrics.registry],
        });
        const [hits, misses] = [cache.labels('hit'), cache.labels('miss')];
        return new DecisionCache((credential) => runnerAuth.authenticate(credential), config.AUTH_DECISION_CACHE_SIZE, {
          // Handles made once: inc({labels}) hashes and checks the labels on every answer nginx asks for.
          hit: () => hits.inc(),
          miss: () => misses.inc(),
        });
      },
    },
    TokenAuthRoute,
  ],
})
export class TokenAuthModule {}
