import { Inject, Logger, Module, OnModuleDestroy } from '@nestjs/common';
import { AppConfig, storeMode } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { MetricsService } from '../observability/metrics.service';
import { ReadinessChecks } from '../observability/readiness-checks';
import { describeStore, redisSettingsFrom } from './redis-connection';
import { RedisStore } from './redis-store';
import { StoreMetrics } from './store.metrics';
import { StoreBackend } from './store-backend';
import { STORE_BACKEND } from './store.constants';

/** The store's connection: opened once, shared by every port's module, checked for readiness, closed last. */
@Module({
  providers: [
    {
      provide: STORE_BACKEND,
      inject: [APP_CONFIG, SECRETS, MetricsService],
      useFactory: async (config: AppConfig, secrets: Secrets, metrics: MetricsService): Promise<StoreBackend> => {
        const settings = redisSettingsFrom(config, secrets);
        if (settings === undefined) return { kind: 'memory' };
        const mode = storeMode(config);
        const store = describeStore(config);
        // Operators filter the store's log lines by this context: it keeps the name it always had.
        const logger = new Logger('GrantStore');
        const storeMetrics = new StoreMetrics(metrics, mode);
        const redis = await RedisStore.open(settings, {
          reconnecting: () => storeMetrics.reconnecting(),
          failedOver: () => storeMetrics.failedOver(),
          // One line when it goes, one when it is back: the reconnect attempts in between say nothing new.
          unreachable: (reason) =>
            logger.warn(`store: ${store} is unreachable (${reason}); pickups answer degraded, exports 503, and readiness fails until it is back`),
          reachableAgain: () => logger.log(`store: ${store} is reachable again`),
        });
        return { kind: 'redis', redis };
      },
    },
  ],
  exports: [STORE_BACKEND],
})
export class StoreModule implements OnModuleDestroy {
  constructor(
    @Inject(STORE_BACKEND) private readonly backend: StoreBackend,
    readiness: ReadinessChecks,
  ) {
    readiness.register('store', () => (backend.kind === 'memory' ? true : backend.redis.ping().then(() => true)));
  }

  /** Nest stops the modules that use the store first, so their last writes (unspent leases handed back) go out before this. */
  async onModuleDestroy(): Promise<void> {
    if (this.backend.kind === 'redis') await this.backend.redis.close();
  }
}
