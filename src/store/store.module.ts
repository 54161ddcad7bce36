import { Inject, Logger, Module, OnModuleDestroy } from '@nestjs/common';
import { SECRETS } from '../config/config.constants';
import { StoreConfig, storeMode } from '../config/sections/store';
import { Secrets } from '../config/secrets';
import { MetricsService } from '../observability/metrics.service';
import { ReadinessChecks } from '../observability/readiness-checks';
import { describeStore, redisSettingsFrom } from './redis-connection';
import { RedisStore } from './redis-store';
import { StoreMetrics } from './store.metrics';
import { StoreBackend } from './store-backend';
import { STORE_BACKEND } from './store.constants';

/** The connections' names in Redis' `CLIENT LIST` (docs/redis.md). */
export const STORE_CONNECTION_NAME = 'ci-job-telemetry';
export const PICKUPS_CONNECTION_NAME = 'ci-job-telemetry-pickups';

/** The store's connections (see StoreBackend): opened once, shared by every port's module, checked for readiness, closed last. */
@Module({
  providers: [
    {
      provide: STORE_BACKEND,
      inject: [StoreConfig, SECRETS, MetricsService],
      useFactory: async (config: StoreConfig, secrets: Secrets, metrics: MetricsService): Promise<StoreBackend> => {
        const settings = redisSettingsFrom(config, secrets);
        if (settings === undefined) return { kind: 'memory' };
        const mode = storeMode(config);
        const store = describeStore(config);
        // Operators filter the store's log lines by this context: it keeps the name it always had.
        const logger = new Logger('GrantStore');
        const storeMetrics = new StoreMetrics(metrics, mode);
        // Opened together. Only the first reports: both follow the same server, and one line or count per event is
        // what an operator reads (a connection of either that fails alone fails readiness).
        const [redis, pickups] = await Promise.all([
          RedisStore.open(
            { ...settings, connectionName: STORE_CONNECTION_NAME },
            {
              reconnecting: () => storeMetrics.reconnecting(),
              failedOver: () => storeMetrics.failedOver(),
              // One line when it goes, one when it is back: the reconnect attempts in between say nothing new.
              unreachable: (reason) =>
                logger.warn(`store: ${store} is unreachable (${reason}); pickups answer degraded, exports 503, and readiness fails until it is back`),
              reachableAgain: () => logger.log(`store: ${store} is reachable again`),
            },
          ),
          // Its writes gathered by turn: loaded, several pickups are answered in one turn, and their grants go in one write.
          RedisStore.open({ ...settings, connectionName: PICKUPS_CONNECTION_NAME, gathersTurns: true }),
        ]);
        return { kind: 'redis', redis, pickups };
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
    readiness.register('store', () => (backend.kind === 'memory' ? true : Promise.all([backend.redis.ping(), backend.pickups.ping()]).then(() => true)));
  }

  /** Nest stops the modules that use the store first, so their last writes (unspent leases handed back) go out before this. */
  async onModuleDestroy(): Promise<void> {
    if (this.backend.kind === 'redis') await Promise.all([this.backend.redis.close(), this.backend.pickups.close()]);
  }
}
