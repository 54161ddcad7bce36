import { DynamicModule, Global, Module } from '@nestjs/common';
import { AppConfig } from './app-config';
import { APP_CONFIG, SECRETS } from './config.constants';
import { Secrets } from './secrets';

/** Holds the configuration validated in main.ts (or built by a test); nothing else reads the environment. */
@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: AppConfig, secrets: Secrets): DynamicModule {
    return {
      module: ConfigModule,
      providers: [
        { provide: APP_CONFIG, useValue: config },
        { provide: SECRETS, useValue: secrets },
      ],
      exports: [APP_CONFIG, SECRETS],
    };
  }
}
