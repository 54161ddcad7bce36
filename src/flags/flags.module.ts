import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { resolve } from 'node:path';
import { Unleash } from 'unleash-client';
import { FlagsConfig } from '../config/sections/flags';
import { FileFlagRepository } from './file-flag-repository';
import { UNLEASH_CLIENT } from './flags.constants';
import { FlagsService } from './flags.service';
import { ReadinessChecks } from '../observability/readiness-checks';

export function createUnleashClient(config: FlagsConfig): Unleash {
  // Started by FlagsService once its listeners are attached, so no 'ready' or 'changed' is missed.
  const common = { appName: config.unleashAppName, skipInstanceCountWarning: true, disableAutoStart: true };
  if (config.unleashUrl !== undefined) {
    return new Unleash({
      ...common,
      url: config.unleashUrl,
      refreshInterval: config.unleashRefreshIntervalMs,
      customHeaders: config.unleashApiToken === undefined ? undefined : { Authorization: config.unleashApiToken },
    });
  }
  const path = resolve(config.file);
  // unleash-client insists on a url even when the repository is ours; it is never fetched.
  return new Unleash({ ...common, url: `file://${path}`, repository: new FileFlagRepository(path), disableMetrics: true });
}

@Module({
  providers: [{ provide: UNLEASH_CLIENT, inject: [FlagsConfig], useFactory: createUnleashClient }, FlagsService],
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
