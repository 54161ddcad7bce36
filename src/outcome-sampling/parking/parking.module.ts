import { Inject, Module, OnModuleDestroy } from '@nestjs/common';
import { StoreBackend } from '../../store/store-backend';
import { STORE_BACKEND } from '../../store/store.constants';
import { StoreModule } from '../../store/store.module';
import { MemoryParkingStore } from './memory-parking-store';
import { ParkingStore } from './parking';
import { PARKING_STORE } from './parking.constants';
import { RedisParkingStore } from './redis-parking-store';

@Module({
  imports: [StoreModule],
  providers: [
    {
      provide: PARKING_STORE,
      inject: [STORE_BACKEND],
      useFactory: (backend: StoreBackend): ParkingStore => (backend.kind === 'redis' ? new RedisParkingStore(backend.redis) : new MemoryParkingStore()),
    },
  ],
  exports: [PARKING_STORE],
})
export class ParkingModule implements OnModuleDestroy {
  constructor(@Inject(PARKING_STORE) private readonly store: ParkingStore) {}

  onModuleDestroy(): void {
    if (this.store instanceof MemoryParkingStore) this.store.close();
  }
}
