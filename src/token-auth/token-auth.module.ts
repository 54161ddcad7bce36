import { Global, Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { InternalApiGuard } from './internal-api.guard';
import { InternalApiTokenVerifier } from './internal-api-token';
import { INTERNAL_API_VERIFIER } from './token-auth.constants';

@Global()
@Module({
  providers: [
    {
      provide: INTERNAL_API_VERIFIER,
      inject: [APP_CONFIG, SECRETS],
      useFactory: (config: AppConfig, secrets: Secrets) =>
        new InternalApiTokenVerifier(secrets.internalApiSecret, config.INTERNAL_API_ISSUERS),
    },
    InternalApiGuard,
  ],
  exports: [INTERNAL_API_VERIFIER, InternalApiGuard],
})
export class TokenAuthModule {}
