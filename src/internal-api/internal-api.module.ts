import { Module } from '@nestjs/common';
import { SECRETS } from '../config/config.constants';
import { InternalApiConfig } from '../config/sections/internal-api';
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
      inject: [InternalApiConfig, SECRETS],
      useFactory: (config: InternalApiConfig, secrets: Secrets) => new InternalApiTokenVerifier(secrets.internalApiSecret, config.issuers),
    },
    {
      provide: CALLER_KEYS,
      inject: [InternalApiConfig],
      useFactory: (config: InternalApiConfig) => new CallerKeys(config.callerKeyDigests),
    },
    InternalApiGuard,
  ],
  exports: [INTERNAL_API_VERIFIER, CALLER_KEYS, InternalApiGuard],
})
export class InternalApiModule {}
