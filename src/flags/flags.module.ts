import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { resolve } from 'node:path';
import { Unleash } from 'unleash-client';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { FileFlagRepository } from './file-flag-repository';
import { UNLEASH_CLIENT } from './flags.constants';
import { FlagsService } from './flags.service';
import { ReadinessChecks } from '../observability/readiness-checks';

export function createUnleashClient(config: AppConfig): Unleash {
  // Started by FlagsService once its listeners are attached, so no 'ready' or 'changed' is missed.
  const common = { appName: config.UNLEASH_APP_NAME, skipInstanceCountWarning: true, disableAutoStart: true };
  if (config.UNLEASH_URL !== undefined) {
    return new Unleash({
      ...common,
      url: config.UNLEASH_URL,
      refreshInterval: config.UNLEASH_REFRESH_INTERVAL_MS,
      customHeaders: config.UNLEASH_API_TOKEN === undefined ? undefined : { Authorization: config.UNLEASH_API_TOKEN },
    });
  }
  const path = resolve(config.FLAGS_FILE);
  // unleash-client insists on a url even when the repository is ours; it is never fetched.
  return new Unleash({ ...common, url: `file://${path}`, repository: new FileFlagRepository(path), disableMetrics: true });
}

@Module({
  providers: [{ provide: UNLEASH_CLIENT, inject: [APP_CONFIG], useFactory: createUnleashClient }, FlagsService],
  exports: [FlagsService],
})
export class FlagsModule implements OnModuleDestroy {
  constructor(
    @Inject(UNLEASH_CLIENT) private readonly unleash: Unleash,
    flags: FlagsService,
    readiness: ReadinessChecks,
  ) {
    readiness.register('flags', () => flags.definitionsLoaded());
  }

  onModuleDestroy(): void {
    this.unleash.destroy();
  }
}
