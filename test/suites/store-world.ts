import { GrantStore } from '../../src/grants/grant';
import { MemoryGrantStore } from '../../src/grants/memory-grant-store';
import { RedisGrantStore } from '../../src/grants/redis-grant-store';
import { LimitStore } from '../../src/limits/limit-store';
import { MemoryLimitStore } from '../../src/limits/memory-limit-store';
import { RedisLimitStore } from '../../src/limits/redis-limit-store';
import { MemoryParkingStore } from '../../src/outcome-sampling/parking/memory-parking-store';
import { ParkingStore } from '../../src/outcome-sampling/parking/parking';
import { RedisParkingStore } from '../../src/outcome-sampling/parking/redis-parking-store';
import { RedisStore } from '../../src/store/redis-store';
import { MemoryTracedWorkStore } from '../../src/traced-work/memory-traced-work-store';
import { RedisTracedWorkStore } from '../../src/traced-work/redis-traced-work-store';
import { TracedJob, TracedWorkStore } from '../../src/traced-work/traced-work';
import { MemoryOutboxStore } from '../../src/outbox/memory-outbox-store';
import { OutboxStore } from '../../src/outbox/outbox';
import { RedisOutboxStore } from '../../src/outbox/redis-outbox-store';

/*
 * The behavioural suites of the store's ports (test/suites/*.suite.ts) run against every store: the memory
 * stores in unit specs with a clock the test moves, each Redis topology in test/integration/. A world opens
 * fresh, empty stores and says what time it is; `elapse` lets time pass: the fake clock jumps, a real
 * Redis (whose keys expire by its own clock) is waited for.
 */

/** Every port, on one backend: a pickup writes the grant and its traced job in one step, so suites read across ports. */
export interface Stores {
  readonly grants: GrantStore;
  readonly limits: LimitStore;
  readonly tracedWork: TracedWorkStore;
  readonly parking: ParkingStore;
  readonly outbox: OutboxStore;
}

export interface StoreWorld {
  readonly name: string;
  /** Fresh, empty stores; closed after each test. */
  open(): Promise<Stores>;
  close(): Promise<void>;
  now(): number;
  elapse(ms: number): Promise<void>;
}

/** The memory stores on a clock that moves only when the test says. */
export function memoryWorld(): StoreWorld {
  let at = Date.now();
  const now = () => at;
  let opened:
    | { grants: MemoryGrantStore; limits: MemoryLimitStore; tracedWork: MemoryTracedWorkStore; parking: MemoryParkingStore; outbox: MemoryOutboxStore }
    | undefined;
  return {
    name: 'in-memory',
    async open() {
      at = Date.now();
      const tracedWork = new MemoryTracedWorkStore(now);
      opened = {
        grants: new MemoryGrantStore(now, tracedWork),
        limits: new MemoryLimitStore(now),
        tracedWork,
        parking: new MemoryParkingStore(now),
        outbox: new MemoryOutboxStore(now),
      };
      return opened;
    },
    async close() {
      opened?.grants.close();
      opened?.limits.close();
      opened?.tracedWork.close();
      opened?.parking.close();
      opened?.outbox.close();
    },
    now,
    async elapse(ms) {
      at += ms;
    },
  };
}

/** The Redis stores on one connection, as the service opens them; `open` empties the deployment first. */
export function redisWorld(name: string, connect: () => Promise<RedisStore>): StoreWorld {
  let redis: RedisStore | undefined;
  return {
    name,
    async open() {
      redis = await connect();
      return {
        grants: new RedisGrantStore(redis),
        limits: new RedisLimitStore(redis),
        tracedWork: new RedisTracedWorkStore(redis),
        parking: new RedisParkingStore(redis),
        outbox: new RedisOutboxStore(redis),
      };
    },
    async close() {
      await redis?.close();
    },
    now: () => Date.now(),
    elapse: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  };
}

export const testTracedJob = (overrides: Partial<TracedJob> = {}): TracedJob => ({
  jobId: 5001,
  pipelineId: 501,
  rootPipelineId: 500,
  projectId: 7,
  runnerId: 17,
  runnerType: 'group_type',
  traceId: 'a'.repeat(32),
  tracestate: 'ot=th:c',
  queuedAt: 1_700_000_000_000,
  pickedUpAt: 1_700_000_012_000,
  ...overrides,
});
