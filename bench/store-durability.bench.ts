/**
 * What REDIS_WAIT_REPLICAS=1 costs a grant write (SPEC §7, failover durability): the store's
 * `saveGrant` on a Sentinel-managed primary with one replica and on a 3+3 cluster, real
 * redis-server processes on loopback, alternating rounds without and with WAIT.
 *
 * Run (needs redis-server and redis-cli on PATH):
 *
 *   npm run bench -- store-durability      (--smoke: a few writes, to check it still works; no verdict)
 *
 * On loopback a replica answers WAIT within microseconds; on a network each write costs one more
 * primary-to-replica round trip. Only ratios within one run mean anything on a shared machine.
 */
import { Grant } from '../src/grants/grant';
import { RedisGrantStore } from '../src/grants/redis-grant-store';
import { RedisStore } from '../src/store/redis-store';
import { testGrant } from '../test/helpers/grants';
import { RedisDeployment, startRedisCluster, startSentinelRedis } from '../test/helpers/redis-topologies';
import { median } from './lib/percentiles';
import { runBench } from './lib/bench-env';

const SMOKE = process.argv.includes('--smoke');
const SEQUENTIAL_WRITES = SMOKE ? 100 : 2000;
const CONCURRENT_WRITES = SMOKE ? 200 : 4000;
const CONCURRENCY = 32;
const ROUNDS = SMOKE ? 1 : 2;

const grant = (jobId: number): Grant => testGrant({ jobId, jobTokenDigest: String(jobId).padStart(64, '0'), expiresAt: Date.now() + 600_000 });

async function round(deployment: RedisDeployment, waitReplicas: number) {
  // Up to 20 s for the cluster to be ready, not the service's 2 s: a write before that measures nothing. A command
  // timeout of 5 s, not the service's 150 ms: a write slowed by a busy host (the smoke run shares two cores with the
  // test suite) is a figure in p99 here, not the end of the run.
  const redis = await RedisStore.open({ ...deployment.settings(5_000), waitReplicas }, undefined, 20_000);
  const store = new RedisGrantStore(redis);
  try {
    for (let i = 0; i < 200; i++) await store.saveGrant(grant(900_000 + i));
    const milliseconds: number[] = [];
    for (let i = 0; i < SEQUENTIAL_WRITES; i++) {
      const started = process.hrtime.bigint();
      await store.saveGrant(grant(i + 1));
      milliseconds.push(Number(process.hrtime.bigint() - started) / 1e6);
    }
    milliseconds.sort((a, b) => a - b);
    let next = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < CONCURRENT_WRITES) await store.saveGrant(grant(100_000 + next++));
      }),
    );
    return {
      slowest: milliseconds[milliseconds.length - 1],
      p50: milliseconds[Math.floor(SEQUENTIAL_WRITES / 2)],
      p99: milliseconds[Math.floor(SEQUENTIAL_WRITES * 0.99)],
      perSecond: CONCURRENT_WRITES / ((Date.now() - started) / 1000),
    };
  } finally {
    await redis.close();
  }
}

async function main(): Promise<void> {
  for (const [name, start] of [
    ['Sentinel (primary + 1 replica)', () => startSentinelRedis()],
    ['Cluster (3 primaries + 3 replicas)', () => startRedisCluster()],
  ] as const) {
    const deployment = await start();
    try {
      const results: Record<number, Array<Awaited<ReturnType<typeof round>>>> = { 0: [], 1: [] };
      for (let i = 0; i < ROUNDS; i++) for (const waitReplicas of [0, 1]) results[waitReplicas].push(await round(deployment, waitReplicas));
      for (const waitReplicas of [0, 1]) {
        const rounds = results[waitReplicas];
        const line = [
          `p50 ${median(rounds.map((r) => r.p50)).toFixed(3)} ms`,
          `p99 ${median(rounds.map((r) => r.p99)).toFixed(3)} ms`,
          `slowest ${Math.max(...rounds.map((r) => r.slowest)).toFixed(1)} ms`,
          `${Math.round(median(rounds.map((r) => r.perSecond)))} writes/s at ${CONCURRENCY} concurrent`,
        ].join(', ');
        console.log(`${name}, REDIS_WAIT_REPLICAS=${waitReplicas}: ${line}`);
      }
    } finally {
      await deployment.stop();
    }
  }
}

runBench(main);
