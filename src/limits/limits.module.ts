import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { StoreBackend } from '../store/store-backend';
import { STORE_BACKEND } from '../store/store.constants';
import { StoreModule } from '../store/store.module';
import { LimitStore } from './limit-store';
import { LIMIT_STORE } from './limits.constants';
import { MemoryLimitStore } from './memory-limit-store';
import { RedisLimitStore } from './redis-limit-store';

@Module({
  imports: [StoreModule],
  providers: [
    {
      provide: LIMIT_STORE,
      inject: [STORE_BACKEND],
      useFactory: (backend: StoreBackend): LimitStore => (backend.kind === 'redis' ? new RedisLimitStore(backend.redis) : new MemoryLimitStore()),
    },
  ],
  exports: [LIMIT_STORE],
})
export class LimitsModule implements OnModuleDestroy {
  constructor(@Inject(LIMIT_STORE) private readonly store: LimitStore) {}

  onModuleDestroy(): void {
    if (this.store instanceof MemoryLimitStore) this.store.close();
  }
}
