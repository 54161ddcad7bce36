import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { OutboxConfig } from '../config/sections/outbox';
import { CollectorModule } from '../collector/collector.module';
import { ReadinessChecks } from '../observability/readiness-checks';
import { StoreBackend } from '../store/store-backend';
import { STORE_BACKEND } from '../store/store.constants';
import { StoreModule } from '../store/store.module';
import { MemoryOutboxStore } from './memory-outbox-store';
import { OutboxStore } from './outbox';
import { OUTBOX_STORE } from './outbox.constants';
import { OutboxDeliverer } from './outbox-deliverer';
import { OutboxMetrics } from './outbox.metrics';
import { RedisOutboxStore } from './redis-outbox-store';

/**
 * The outbox (SPEC §10 "Delivery"): its store port and the deliverer that sends it to the collector. Owners of
 * entries other than spans register their kind with the deliverer (see OutboxEntryKind).
 */
@Module({
  imports: [StoreModule, CollectorModule],
  providers: [
    {
      provide: OUTBOX_STORE,
      inject: [STORE_BACKEND],
      useFactory: (backend: StoreBackend): OutboxStore => (backend.kind === 'redis' ? new RedisOutboxStore(backend.redis) : new MemoryOutboxStore()),
    },
    OutboxMetrics,
    OutboxDeliverer,
  ],
  exports: [OUTBOX_STORE, OutboxDeliverer],
})
export class OutboxModule implements OnModuleDestroy {
  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    config: OutboxConfig,
    metrics: OutboxMetrics,
    deliverer: OutboxDeliverer,
    readiness: ReadinessChecks,
  ) {
    // A full outbox refuses new spans but must not take the replica out of rotation: pickups would fail.
    readiness.register('outbox', () => (metrics.lastDepth().spans >= config.maxSpans ? 'degraded' : true));
    // A collector that keeps answering 401, 404 or 5xx is a misconfiguration an operator must see, while the spans
    // wait in the outbox; it is no reason to stop job pickups either.
    readiness.register('outbox_delivery', () => (deliverer.deliveryFailing ? 'degraded' : true));
  }

  onModuleDestroy(): void {
    if (this.store instanceof MemoryOutboxStore) this.store.close();
  }
}
