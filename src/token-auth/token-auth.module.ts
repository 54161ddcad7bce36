import { Global, Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { CallerKeys } from './caller-keys';
import { InternalApiGuard } from './internal-api.guard';
import { InternalApiTokenVerifier } from './internal-api-token';
import { jobTokenKeys, JobTokenVerifier } from './job-token-verifier';
import { CALLER_KEYS, INTERNAL_API_VERIFIER, JOB_TOKEN_VERIFIER } from './token-auth.constants';
import { TokenAuthController } from './token-auth.controller';
import { TokenAuthService } from './token-auth.service';

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
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) =>
        new JobTokenVerifier(jobTokenKeys({ file: config.JOB_TOKEN_JWKS_FILE, url: config.JOB_TOKEN_JWKS_URL }), config.JOB_TOKEN_ISSUER),
    },
    InternalApiGuard,
    TokenAuthService,
  ],
  exports: [INTERNAL_API_VERIFIER, CALLER_KEYS, InternalApiGuard, TokenAuthService],
})
export class TokenAuthModule {}
