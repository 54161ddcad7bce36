import { DynamicModule, Global, Module, Provider } from '@nestjs/common';
import { AppConfig, SECTIONS, SectionName } from './app-config';
import { SECRETS } from './config.constants';
import { Secrets } from './secrets';

/**
 * Holds the configuration validated in main.ts (or built by a test); nothing else reads the environment. Each
 * section is provided by its class, so a service names the sections it reads in its constructor
 * (`private readonly reads: ReadsConfig`) and is handed those only.
 */
@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: AppConfig, secrets: Secrets): DynamicModule {
    const sections: Provider[] = (Object.keys(SECTIONS) as SectionName[]).map((name) => ({ provide: SECTIONS[name], useValue: config[name] }));
    return {
      module: ConfigModule,
      providers: [...sections, { provide: SECRETS, useValue: secrets }],
      exports: [...Object.values(SECTIONS), SECRETS],
    };
  }
}
