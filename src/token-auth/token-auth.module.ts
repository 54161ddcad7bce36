import { Module } from '@nestjs/common';
import { RunnerAuthConfig } from '../config/sections/runner-auth';
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
      inject: [RunnerAuthConfig, RunnerAuthService, TokenAuthMetrics],
      useFactory: (config: RunnerAuthConfig, runnerAuth: RunnerAuthService, metrics: TokenAuthMetrics) =>
        new DecisionCache((credential) => runnerAuth.authenticate(credential), config.decisionCacheSize, metrics),
    },
    TokenAuthRoute,
  ],
})
export class TokenAuthModule {}
