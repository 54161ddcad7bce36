import { DynamicModule, Module } from '@nestjs/common';
import { AppConfig } from './config/app-config';
import { ConfigModule } from './config/config.module';
import { Secrets } from './config/secrets';
import { FlagsModule } from './flags/flags.module';
import { GrantsModule } from './grants/grants.module';
import { JobPayloadModule } from './job-payload/job-payload.module';
import { ObservabilityModule } from './observability/observability.module';
import { TokenAuthModule } from './token-auth/token-auth.module';

/** The internal API (port 8080): job payload, auth, health and metrics. */
@Module({})
export class InternalApiModule {
  static forRoot(config: AppConfig, secrets: Secrets): DynamicModule {
    return {
      module: InternalApiModule,
      imports: [
        ConfigModule.forRoot(config, secrets),
        ObservabilityModule,
        GrantsModule,
        FlagsModule,
        TokenAuthModule,
        JobPayloadModule,
      ],
    };
  }
}
