import { Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { DecisionCache } from '../runner-auth/decision-cache';
import { RunnerAuthModule } from '../runner-auth/runner-auth.module';
import { RunnerAuthService } from '../runner-auth/runner-auth.service';
import { AUTH_DECISIONS } from './token-auth.constants';
import { TokenAuthController } from './token-auth.controller';
import { TokenAuthMetrics } from './token-auth.metrics';
import { TokenAuthRoute } from './token-auth.route';

/** The auth endpoint and grant revocation (SPEC §5): the HTTP edge of the runner auth decision. */
@Module({
  imports: [InternalApiModule, RunnerAuthModule],
  controllers: [TokenAuthController],
  providers: [
    TokenAuthMetrics,
    {
      provide: AUTH_DECISIONS,
      inject: [APP_CONFIG, RunnerAuthService, TokenAuthMetrics],
      useFactory: (config: AppConfig, runnerAuth: RunnerAuthService, metrics: TokenAuthMetrics) =>
        new DecisionCache((credential) => runnerAuth.authenticate(credential), config.AUTH_DECISION_CACHE_SIZE, metrics),
    },
    TokenAuthRoute,
  ],
})
export class TokenAuthModule {}
