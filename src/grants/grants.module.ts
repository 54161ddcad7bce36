import { Global, Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { ReadinessChecks } from '../observability/readiness-checks';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { GrantStore } from './grant';
import { GRANT_STORE } from './grants.constants';
import { MemoryGrantStore } from './memory-grant-store';
import { RedisGrantStore } from './redis-grant-store';

@Global()
@Module({
  providers: [
    {
      provide: GRANT_STORE,
      inject: [APP_CONFIG],
      useFactory: async (config: AppConfig): Promise<GrantStore> =>
        config.REDIS_URL === undefined
          ? new MemoryGrantStore()
          : RedisGrantStore.open(config.REDIS_URL, config.STORE_TIMEOUT_MS),
    },
  ],
  exports: [GRANT_STORE],
})
export class GrantsModule implements OnModuleDestroy {
  constructor(
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    readiness: ReadinessChecks,
  ) {
    readiness.register('store', () => store.ping().then(() => true));
  }

  async onModuleDestroy(): Promise<void> {
    await this.store.close();
  }
}
