import { Global, Logger, Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { Counter } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';
import { RunnerCredential } from '../runner-auth/runner-credential';
import { ReadinessChecks } from '../observability/readiness-checks';
import { CallerKeys } from './caller-keys';
import { DecisionCache } from './decision-cache';
import { InternalApiGuard } from './internal-api.guard';
import { InternalApiTokenVerifier } from './internal-api-token';
import { JobTokenKeys, jobTokenKeys, JobTokenVerifier } from './job-token-verifier';
import { AUTH_DECISIONS, CALLER_KEYS, INTERNAL_API_VERIFIER, JOB_TOKEN_VERIFIER } from './token-auth.constants';
import { TokenAuthController } from './token-auth.controller';
import { TokenAuthService } from './token-auth.service';

/**
 * Configured keys that cannot be read make the service unready, with one log line when that starts
 * and one when it ends (SPEC §5). Checked once at start too, so an unreachable JWKS URL is logged
 * before the first probe asks; an unreadable file has already stopped the start (main.ts).
 */
function watchJobTokenKeys(keys: JobTokenKeys, readiness: ReadinessChecks): void {
  const logger = new Logger('JobTokenKeys');
  let reported: string | undefined;
  const check = async () => {
    const problem = await keys.problem();
    if (problem !== reported) {
      if (problem === undefined) logger.log('job token keys readable again');
      else logger.error(`${problem}: JWT job tokens are answered 503 until this is fixed`);
      reported = problem;
    }
    return problem === undefined;
  };
  readiness.register('job_token_keys', check);
  void check();
}

@Global()
@Module({
  controllers: [TokenAuthController],
  providers: [
    {
      provide: INTERNAL_API_VERIFIER,
      inject: [APP_CONFIG, SECRETS],
      useFactory: (config: AppConfig, secrets: Secrets) =>
        new InternalApiTokenVerifier(secrets.internalApiSecret, config.INTERNAL_API_ISSUERS),
    },
    {
      provide: CALLER_KEYS,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => new CallerKeys(config.AUTH_CALLER_KEY_DIGESTS),
    },
    {
      provide: JOB_TOKEN_VERIFIER,
      inject: [APP_CONFIG, ReadinessChecks],
      useFactory: (config: AppConfig, readiness: ReadinessChecks) => {
        const keys = jobTokenKeys({ file: config.JOB_TOKEN_JWKS_FILE, url: config.JOB_TOKEN_JWKS_URL });
        if (keys !== undefined) watchJobTokenKeys(keys, readiness);
        return new JobTokenVerifier(keys?.getKey, config.JOB_TOKEN_ISSUER);
      },
    },
    {
      provide: AUTH_DECISIONS,
      inject: [APP_CONFIG, TokenAuthService, MetricsService],
      useFactory: (config: AppConfig, tokenAuth: TokenAuthService, metrics: MetricsService) => {
        const cache = new Counter({
          name: 'ci_job_telemetry_auth_decision_cache_total',
          help: 'Auth endpoint decisions served from the cache (hit) or looked up in the store (miss)',
          labelNames: ['result'],
          registers: [metrics.registry],
        });
        return new DecisionCache(
          (credential: RunnerCredential) => tokenAuth.authenticate(credential),
          config.AUTH_DECISION_CACHE_SIZE,
          { hit: () => cache.inc({ result: 'hit' }), miss: () => cache.inc({ result: 'miss' }) },
        );
      },
    },
    InternalApiGuard,
    TokenAuthService,
  ],
  exports: [INTERNAL_API_VERIFIER, CALLER_KEYS, InternalApiGuard, TokenAuthService],
})
export class TokenAuthModule {}
