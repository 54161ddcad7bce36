import { Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { CallerKeys } from './caller-keys';
import { CALLER_KEYS, INTERNAL_API_VERIFIER } from './internal-api.constants';
import { InternalApiGuard } from './internal-api.guard';
import { InternalApiTokenVerifier } from './internal-api-token';

/** The checks every `/internal/*` route makes (SPEC §3): the GitLab-signed JWT, and caller keys where a route accepts them. */
@Module({
  providers: [
    {
      provide: INTERNAL_API_VERIFIER,
      inject: [APP_CONFIG, SECRETS],
      useFactory: (config: AppConfig, secrets: Secrets) => new InternalApiTokenVerifier(secrets.internalApiSecret, config.INTERNAL_API_ISSUERS),
    },
    {
      provide: CALLER_KEYS,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => new CallerKeys(config.AUTH_CALLER_KEY_DIGESTS),
    },
    InternalApiGuard,
  ],
  exports: [INTERNAL_API_VERIFIER, CALLER_KEYS, InternalApiGuard],
})
export class InternalApiModule {}
