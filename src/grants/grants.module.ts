import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { StoreBackend } from '../store/store-backend';
import { STORE_BACKEND } from '../store/store.constants';
import { StoreModule } from '../store/store.module';
import { MemoryTracedWorkStore } from '../traced-work/memory-traced-work-store';
import { TracedWorkStore } from '../traced-work/traced-work';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { TracedWorkModule } from '../traced-work/traced-work.module';
import { GrantStore } from './grant';
import { GRANT_STORE } from './grants.constants';
import { MemoryGrantStore } from './memory-grant-store';
import { RedisGrantStore } from './redis-grant-store';

@Module({
  imports: [StoreModule, TracedWorkModule],
  providers: [
    {
      provide: GRANT_STORE,
      inject: [STORE_BACKEND, TRACED_WORK_STORE],
      useFactory: (backend: StoreBackend, tracedWork: TracedWorkStore): GrantStore => {
        // On the connection only pickups wait on (see StoreBackend).
        if (backend.kind === 'redis') return new RedisGrantStore(backend.pickups);
        // A pickup's traced job goes where the traced-work port reads it, as on Redis.
        if (!(tracedWork instanceof MemoryTracedWorkStore)) throw new Error('a memory grant store needs the memory traced-work store');
        return new MemoryGrantStore(Date.now, tracedWork);
      },
    },
  ],
  exports: [GRANT_STORE],
})
export class GrantsModule implements OnModuleDestroy {
  constructor(@Inject(GRANT_STORE) private readonly store: GrantStore) {}

  onModuleDestroy(): void {
    if (this.store instanceof MemoryGrantStore) this.store.close();
  }
}
