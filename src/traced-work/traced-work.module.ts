import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { StoreBackend } from '../store/store-backend';
import { STORE_BACKEND } from '../store/store.constants';
import { StoreModule } from '../store/store.module';
import { MemoryTracedWorkStore } from './memory-traced-work-store';
import { RedisTracedWorkStore } from './redis-traced-work-store';
import { TracedWorkStore } from './traced-work';
import { PICKUP_TRACED_WORK_STORE, TRACED_WORK_STORE } from './traced-work.constants';

@Module({
  imports: [StoreModule],
  providers: [
    {
      provide: TRACED_WORK_STORE,
      inject: [STORE_BACKEND],
      useFactory: (backend: StoreBackend): TracedWorkStore =>
        backend.kind === 'redis' ? new RedisTracedWorkStore(backend.redis) : new MemoryTracedWorkStore(),
    },
    {
      provide: PICKUP_TRACED_WORK_STORE,
      inject: [STORE_BACKEND, TRACED_WORK_STORE],
      useFactory: (backend: StoreBackend, store: TracedWorkStore): TracedWorkStore =>
        backend.kind === 'redis' ? new RedisTracedWorkStore(backend.pickups) : store,
    },
  ],
  exports: [TRACED_WORK_STORE, PICKUP_TRACED_WORK_STORE],
})
export class TracedWorkModule implements OnModuleDestroy {
  constructor(@Inject(TRACED_WORK_STORE) private readonly store: TracedWorkStore) {}

  onModuleDestroy(): void {
    if (this.store instanceof MemoryTracedWorkStore) this.store.close();
  }
}
