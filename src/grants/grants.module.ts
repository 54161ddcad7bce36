import { Inject, Logger, Module, OnModuleDestroy } from '@nestjs/common';
import { AppConfig, storeMode } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { MetricsService } from '../observability/metrics.service';
import { ReadinessChecks } from '../observability/readiness-checks';
import { GrantStore } from './grant';
import { GRANT_STORE } from './grants.constants';
import { MemoryGrantStore } from './memory-grant-store';
import { describeStore, redisSettingsFrom } from './redis-connection';
import { RedisGrantStore } from './redis-grant-store';
import { StoreMetrics } from './store.metrics';

@Module({
  providers: [
    {
      provide: GRANT_STORE,
      inject: [APP_CONFIG, SECRETS, MetricsService],
      useFactory: async (config: AppConfig, secrets: Secrets, metrics: MetricsService): Promise<GrantStore> => {
        const settings = redisSettingsFrom(config, secrets);
        if (settings === undefined) return new MemoryGrantStore();
        const mode = storeMode(config);
        const store = describeStore(config);
        const logger = new Logger('GrantStore');
        const storeMetrics = new StoreMetrics(metrics, mode);
        return RedisGrantStore.open(settings, {
          reconnecting: () => storeMetrics.reconnecting(),
          failedOver: () => storeMetrics.failedOver(),
          // One line when it goes, one when it is back: the reconnect attempts in between say nothing new.
          unreachable: (reason) =>
            logger.warn(`store: ${store} is unreachable (${reason}); pickups answer degraded, exports 503, and readiness fails until it is back`),
          reachableAgain: () => logger.log(`store: ${store} is reachable again`),
        });
      },
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
