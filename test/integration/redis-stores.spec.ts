import Redis from 'ioredis';
import { randomBytes } from 'node:crypto';
import { exportRequestType } from '../../src/otlp/otlp-proto';
import { RedisGrantStore } from '../../src/grants/redis-grant-store';
import { RedisLimitStore } from '../../src/limits/redis-limit-store';
import { RedisConnectionSettings } from '../../src/store/redis-connection';
import { RedisStore } from '../../src/store/redis-store';
import { StoreUnavailableError } from '../../src/store/store-unavailable-error';
import { RedisTracedWorkStore } from '../../src/traced-work/redis-traced-work-store';
import { testGrant } from '../helpers/grants';
import { RedisServer, startRedis } from '../helpers/redis';
import { RedisDeployment, SentinelDeployment, startRedisCluster, startSentinelRedis, startSingleRedis } from '../helpers/redis-topologies';
import { behavesAsAGrantStore } from '../suites/grant-store.suite';
import { behavesAsALimitStore } from '../suites/limit-store.suite';
import { behavesAsAParkingStore } from '../suites/parking-store.suite';
import { StoreWorld, redisWorld, testTracedJob } from '../suites/store-world';
import { behavesAsATracedWorkStore } from '../suites/traced-work-store.suite';
import { behavesAsAnOutboxStore } from '../suites/outbox-store.suite';
import { keepsWhatTheOutboxWasGiven } from '../suites/outbox-delivery.suite';
import { RedisOutboxStore } from '../../src/outbox/redis-outbox-store';
import { RedisParkingStore } from '../../src/outcome-sampling/parking/redis-parking-store';

/*
 * The store's ports on real Redis (SPEC §7): every behavioural suite on one server, then on each deployment
 * operators scale out to. The memory stores run the same suites as unit specs, beside them in src/.
 */

const grant = testGrant;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * How long a test's store may take to become ready. `open` goes on without Redis after its default 2 s, as the
 * service must; a TLS cluster of six nodes, with other suites busy on both cores, took longer than that in CI,
 * and the test's first command then met "Cluster isn't ready". The suites are about a ready store, so they wait.
 */
const READY_WAIT_MS = 20_000;
const openReady = (settings: RedisConnectionSettings) => RedisStore.open(settings, undefined, READY_WAIT_MS);

function behavesAsAStore(world: StoreWorld) {
  behavesAsAGrantStore(world);
  behavesAsALimitStore(world);
  behavesAsATracedWorkStore(world);
  behavesAsAnOutboxStore(world);
  behavesAsAParkingStore(world);
}

let redis: RedisServer;
beforeAll(async () => (redis = await startRedis()));
afterAll(() => redis.stop());
const singleServer = (url: string): RedisConnectionSettings => ({ topology: { mode: 'single', url }, commandTimeoutMs: 500 });

const singleWorld = redisWorld('Redis', async () => {
  await redis.flush();
  return openReady(singleServer(redis.url));
});
behavesAsAStore(singleWorld);
// The deliverer on the Redis outbox, against a collector that refuses (issue 56 item 7).
keepsWhatTheOutboxWasGiven(singleWorld);

// The pickups' connection gathers each turn's writes into one (store.module.ts): what a pickup waits on, on it.
const pickupsWorld = redisWorld('Redis, writes gathered by turn', async () => {
  await redis.flush();
  return openReady({ ...singleServer(redis.url), gathersTurns: true });
});
behavesAsAGrantStore(pickupsWorld);
behavesAsATracedWorkStore(pickupsWorld);

/** Runs `act` while Redis' MONITOR hands every script it runs (EVAL or EVALSHA: its arguments) to `seen`. */
async function whileWatchingScripts(seen: (args: string[]) => unknown, act: () => Promise<void>): Promise<void> {
  const client = new Redis(redis.url);
  const monitor = await client.monitor();
  monitor.on('monitor', (_time: string, args: string[]) => ['eval', 'evalsha'].includes(args[0].toLowerCase()) && seen(args));
  try {
    await act();
    // MONITOR's lines arrive after the commands' answers.
    await sleep(100);
  } finally {
    monitor.disconnect();
    client.disconnect();
  }
}

describe('Redis store key layout', () => {
  let store: RedisStore;
  beforeEach(async () => {
    await redis.flush();
    store = await openReady(singleServer(redis.url));
  });
  afterEach(() => store.close());

  it('writes the grants of pickups answered in one turn to Redis at once, each stored and answered as its own', async () => {
    // Each written alone, Redis read them in a dozen reads or more (14 of 20 here); how many depends on how busy it is.
    const gathering = await openReady({ ...singleServer(redis.url), gathersTurns: true });
    const grants = new RedisGrantStore(gathering);
    const client = new Redis(redis.url);
    const reads = async () => Number(/total_reads_processed:(\d+)/.exec(await client.info('stats'))![1]);
    try {
      const before = await reads();
      const jobIds = Array.from({ length: 20 }, (_, i) => 7000 + i);
      const saved = await Promise.all(jobIds.map((jobId) => grants.saveGrant(grant({ jobId }), testTracedJob({ jobId }))));
      expect(saved.map((each) => each.jobId)).toEqual(jobIds);
      for (const jobId of jobIds) expect((await grants.findGrant(jobId))?.jobId).toBe(jobId);
      // Counted after the writes, one read each: the 20 lookups (each awaited alone) and the second INFO.
      expect((await reads()) - before - jobIds.length - 1).toBeLessThanOrEqual(2);
    } finally {
      client.disconnect();
      await gathering.close();
    }
  });

  it("keeps a job's span counters and leases in one hash slot, so the script runs on Redis Cluster", async () => {
    await new RedisLimitStore(store).leaseSpans(4242, {
      leaseId: 'a',
      spent: 0,
      quotaWanted: 1,
      rateWanted: 1,
      limits: { perJob: 10, perSecond: 10 },
      quotaTtlMs: 60_000,
      leaseMs: 60_000,
    });
    const client = new Redis(redis.url);
    const keys = await client.keys('*').finally(() => client.disconnect());
    const tags = keys.filter((key) => key.includes('4242')).map((key) => /\{([^}]*)\}/.exec(key)?.[1]);
    expect(tags).toHaveLength(3);
    expect(new Set(tags)).toEqual(new Set(['job:4242']));
  });

  it("enqueues a large batch as scripts of a few dozen spans each, so pickups' writes are served between them", async () => {
    // A kept pipeline's parked spans are released at once; one script for all of them would hold Redis throughout.
    const outbox = new RedisOutboxStore(store);
    const spansPerScript: number[] = [];
    await whileWatchingScripts(
      (args) => args.slice(3).some((arg) => arg.startsWith('cjt:{outbox}:seen:')) && spansPerScript.push(Number(args[2]) - 5),
      async () => {
        const entries = Array.from({ length: 230 }, (_, i) => ({ key: `big${i}`, body: `{"span":${i}}`, enqueuedAt: Date.now() }));
        expect(await outbox.enqueue(entries, { maxSpans: 1000, rememberMs: 60_000 })).toEqual({ queued: 230, duplicates: 0, refused: 0 });
      },
    );
    expect(spansPerScript.reduce((sum, n) => sum + n, 0)).toBe(230);
    expect(Math.max(...spansPerScript)).toBeLessThanOrEqual(25);
  });

  it('parks exports that arrive together in one transaction, within its bounds, and answers each from its own entry', async () => {
    const parking = new RedisParkingStore(store);
    const entriesPerCommand: number[] = [];
    const limits = { maxTraceSpans: 10_000, maxTraceBytes: 64 << 20, maxTotalBytes: 64 << 20, holdMs: 60_000, rememberMs: 60_000 };
    // 40 exports of 10 KiB, each different, parked at once: more than one transaction may carry, by entries and by bytes
    // (random bytes, which the store keeps as they are: packed, they would be a few dozen bytes each).
    const exports = Array.from({ length: 40 }, (_, i) => Buffer.concat([Buffer.from([i]), randomBytes(10 * 1024 - 1)]));
    await whileWatchingScripts(
      (args) => args[3] === 'cjt:{parking}:total' && entriesPerCommand.push((Number(args[2]) - 3) / 3),
      async () => {
        const outcomes = await Promise.all(exports.map((body) => parking.park('d'.repeat(32), { kind: 'protobuf', body, spans: 5 }, limits)));
        expect(outcomes.every((outcome) => outcome.kind === 'parked')).toBe(true);
      },
    );
    expect(entriesPerCommand.reduce((sum, n) => sum + n, 0)).toBe(40);
    expect(entriesPerCommand.length).toBeLessThan(10);
    expect(Math.max(...entriesPerCommand)).toBeLessThanOrEqual(13);
    const parked = await parking.parkedEntries('d'.repeat(32), await parking.parkedIds('d'.repeat(32)));
    expect(parked.map((entry) => entry.body[0]).sort((a, b) => a - b)).toEqual(exports.map((_, i) => i));
    expect(await parking.usage()).toMatchObject({ spans: 200, bytes: 40 * 10 * 1024 });
  });

  it("keeps a runner's export packed, a fraction of its bytes in Redis, and gives it back byte for byte; random bytes and the control plane's spans as they are", async () => {
    const parking = new RedisParkingStore(store);
    const limits = { maxTraceSpans: 10_000, maxTraceBytes: 64 << 20, maxTotalBytes: 64 << 20, holdMs: 60_000, rememberMs: 60_000 };
    const traceId = randomBytes(16);
    // 100 spans as an SDK exports a job's: ids and times of their own, the same attribute keys and many of the same values.
    const spans = Array.from({ length: 100 }, (_, i) => ({
      traceId,
      spanId: randomBytes(8),
      parentSpanId: randomBytes(8),
      name: `step_script ${i}`,
      kind: 1,
      startTimeUnixNano: String(1_764_000_000_000_000_000n + BigInt(i) * 1_234_567n),
      endTimeUnixNano: String(1_764_000_000_000_000_000n + BigInt(i) * 1_234_567n + 987_654n),
      attributes: ['ci.job.id', 'ci.job.name', 'ci.pipeline.id', 'ci.stage', 'ci.runner.id'].map((key, k) => ({
        key,
        value: { stringValue: k === 1 ? `rspec ${i % 7}/7` : `${1000 + k}` },
      })),
    }));
    const type = exportRequestType('traces');
    const runnerExport = Buffer.from(type.encode(type.fromObject({ resourceSpans: [{ scopeSpans: [{ spans }] }] })).finish());
    const random = Buffer.concat([Buffer.from([0x0a]), randomBytes(8 * 1024)]);
    // A version before packing reads the control plane's parked spans line by line during an upgrade: they stay plain.
    const controlPlane = Buffer.from(
      Array.from({ length: 4 }, (_, i) => `job-${i} {"resource":{"attributes":[]},"scopeSpans":[]}`.padEnd(400, ' ')).join('\n'),
    );
    const trace = 'a1'.repeat(16);
    expect(await parking.park(trace, { kind: 'protobuf', body: runnerExport, spans: 100 }, limits)).toEqual({ kind: 'parked' });
    expect(await parking.park(trace, { kind: 'protobuf', body: random, spans: 1 }, limits)).toEqual({ kind: 'parked' });
    expect(await parking.park(trace, { kind: 'spans', body: controlPlane, spans: 4, exempt: true }, limits)).toEqual({ kind: 'parked' });
    const client = new Redis(redis.url);
    try {
      const stored = new Map(
        await Promise.all((await parking.parkedIds(trace)).map(async (id) => [id.bytes, await client.hstrlen(`cjt:{trace:${trace}}:parked`, id.id)] as const)),
      );
      expect(stored.get(runnerExport.length)).toBeLessThan(runnerExport.length / 3);
      expect(stored.get(random.length)).toBe(random.length);
      expect(stored.get(controlPlane.length)).toBe(controlPlane.length);
    } finally {
      client.disconnect();
    }
    const all = [runnerExport, random, controlPlane];
    expect(await parking.usage()).toMatchObject({ spans: 105, bytes: all.reduce((sum, body) => sum + body.length, 0) });
    const parked = await parking.parkedEntries(trace, await parking.parkedIds(trace));
    expect(parked.map((entry) => entry.body.toString('hex')).sort()).toEqual(all.map((body) => body.toString('hex')).sort());
  });

  it('leaves no body behind for an entry refused or of a pipeline decided, and every parked hash with a time limit', async () => {
    // The bodies are written after the script decides (in one transaction), so the transaction must take back the rest.
    const parking = new RedisParkingStore(store);
    const limits = { maxTraceSpans: 10, maxTraceBytes: 1000, maxTotalBytes: 10_000, holdMs: 60_000, rememberMs: 60_000 };
    const [open, decided] = ['e'.repeat(32), 'f'.repeat(32)];
    await parking.decide(decided, { keep: false, reason: 'outcome' }, 60_000);
    const outcomes = await Promise.all([
      parking.park(open, { kind: 'protobuf', body: Buffer.alloc(500, 1), spans: 5 }, limits),
      parking.park(open, { kind: 'protobuf', body: Buffer.alloc(600, 2), spans: 1 }, limits),
      parking.park(open, { kind: 'protobuf', body: Buffer.alloc(100, 3), spans: 9 }, limits),
      parking.park(decided, { kind: 'protobuf', body: Buffer.alloc(100, 4), spans: 1 }, limits),
      parking.park(open, { kind: 'protobuf', body: Buffer.alloc(500, 1), spans: 5 }, limits),
    ]);
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(['parked', 'full', 'full', 'decided', 'parked']);
    const client = new Redis(redis.url);
    try {
      const parked = (await client.keys('cjt:{trace:*}:parked')).sort();
      expect(parked).toEqual([`cjt:{trace:${open}}:parked`]);
      expect(await client.hlen(parked[0])).toBe(1);
      expect((await client.hgetBuffer(parked[0], (await client.hkeys(parked[0]))[0]))?.equals(Buffer.alloc(500, 1))).toBe(true);
      expect(await client.pttl(parked[0])).toBeGreaterThan(60_000);
      expect(await client.exists('cjt:{parking}:take-back')).toBe(0);
    } finally {
      client.disconnect();
    }
    expect(await parking.usage()).toMatchObject({ spans: 5, bytes: 500 });
  });

  it('answers a claim with the bodies still there, and removes an entry whose body is gone instead of sending it', async () => {
    const outbox = new RedisOutboxStore(store);
    const entries = ['kept-a', 'lost', 'kept-b'].map((key) => ({ key, body: `{"span":"${key}"}`, enqueuedAt: Date.now() }));
    await outbox.enqueue(entries, { maxSpans: 10, rememberMs: 60_000 });
    const client = new Redis(redis.url);
    await client.hdel('cjt:{outbox}:spans', 'lost').finally(() => client.disconnect());
    const claimed = await outbox.claim(10, 60_000);
    expect(claimed.map((entry) => [entry.key, entry.body.toString()])).toEqual([
      ['kept-a', '{"span":"kept-a"}'],
      ['kept-b', '{"span":"kept-b"}'],
    ]);
    expect((await outbox.depth()).spans).toBe(2);
    await outbox.acknowledge(claimed.map((entry) => entry.key));
    expect(await outbox.depth()).toEqual({ spans: 0 });
  });

  it('keeps a body only for a span it queued or holds queued already: none is left behind by a refusal or a duplicate', async () => {
    // The bodies are written before the script decides (in one transaction), so the script must take back the rest.
    const outbox = new RedisOutboxStore(store);
    const limits = { maxSpans: 4, rememberMs: 60_000 };
    const span = (key: string) => ({ key, body: `{"span":"${key}"}`, enqueuedAt: Date.now() });
    await outbox.enqueue(['a', 'b', 'c'].map(span), limits);
    await outbox.acknowledge((await outbox.claim(1, 60_000)).map((entry) => entry.key));
    // a: delivered, so a duplicate with nothing queued; b: a duplicate still queued; d, e: new; f: over the bound.
    expect(await outbox.enqueue(['a', 'b', 'd', 'e', 'f'].map(span), limits)).toEqual({ queued: 2, duplicates: 2, refused: 1 });
    const client = new Redis(redis.url);
    const stored = await client.hkeys('cjt:{outbox}:spans').finally(() => client.disconnect());
    expect(stored.sort()).toEqual(['b', 'c', 'd', 'e']);
    const claimed = await outbox.claim(10, 60_000);
    expect(claimed.map((entry) => [entry.key, entry.body.toString()]).sort()).toEqual(['b', 'c', 'd', 'e'].map((key) => [key, `{"span":"${key}"}`]));
  });

  it('tells a lease that ran out from a retry or a put-back, on whatever millisecond each falls', async () => {
    // The due time carries the lease (its parity): retries, put-backs and leases each over ten milliseconds.
    const outbox = new RedisOutboxStore(store);
    const keys = Array.from({ length: 30 }, (_, i) => `p${String(i).padStart(2, '0')}`);
    await outbox.enqueue(
      keys.map((key) => ({ key, body: '{}', enqueuedAt: Date.now() })),
      { maxSpans: 100, rememberMs: 60_000 },
    );
    expect(await outbox.claim(30, 60_000)).toHaveLength(30);
    for (let i = 0; i < 10; i++) {
      await outbox.retry([keys[i]], i);
      await outbox.putBack([keys[10 + i]]);
      await sleep(1);
    }
    await sleep(20);
    const again = await outbox.claim(30, 60_000);
    expect(again.filter((entry) => entry.leaseRanOut).map((entry) => entry.key)).toEqual([]);
    expect(again.map((entry) => entry.key).sort()).toEqual(keys.slice(0, 20));
    for (let i = 0; i < 10; i++) {
      await outbox.retry([keys[20 + i]], 0);
      await sleep(2);
      expect((await outbox.claim(1, 200 + i)).map((entry) => entry.key)).toEqual([keys[20 + i]]);
    }
    await sleep(250);
    const ranOut = await outbox.claim(30, 60_000);
    expect(
      ranOut
        .filter((entry) => entry.leaseRanOut)
        .map((entry) => entry.key)
        .sort(),
    ).toEqual(keys.slice(20));
  });

  it('reads the records a running install already holds, under the key names it wrote them with', async () => {
    const { expiresAt, ...fields } = grant({ jobId: 4343, jobTokenDigest: '9'.repeat(64) });
    const client = new Redis(redis.url);
    try {
      await client.set('cjt:{job:4343}:grant', JSON.stringify({ ...fields, expiresAt }), 'PX', 60_000);
      await client.set('cjt:{job:4343}:revoked', String(expiresAt - 1000), 'PX', 60_000);
      await client.set(`cjt:{jobtoken:${'9'.repeat(64)}}`, '4343', 'PX', 60_000);
      await client.set('cjt:{job:4343}:traced', JSON.stringify(testTracedJob({ jobId: 4343 })), 'PX', 60_000);
      await client.set('cjt:{rate:runner:43}', '5', 'PX', 60_000);
      await client.set('cjt:{job:4343}:spans', '7', 'PX', 60_000);
    } finally {
      client.disconnect();
    }
    const grants = new RedisGrantStore(store);
    expect(await grants.findGrant(4343)).toEqual({ ...fields, expiresAt, revokedAt: expiresAt - 1000 });
    expect((await grants.findGrantByJobTokenDigest('9'.repeat(64)))?.jobId).toBe(4343);
    expect(await new RedisTracedWorkStore(store).findTracedJob(4343)).toEqual(testTracedJob({ jobId: 4343 }));
    const limits = new RedisLimitStore(store);
    expect((await limits.takeWindowBlock('runner:43', 10, 10, 60_000)).granted).toBe(5);
    const lease = { leaseId: 'a', spent: 0, quotaWanted: 10, rateWanted: 0, limits: { perJob: 10, perSecond: 10 }, quotaTtlMs: 60_000, leaseMs: 60_000 };
    expect((await limits.leaseSpans(4343, lease)).quotaGranted).toBe(3);
  });
});

function onDeployment<D extends RedisDeployment>(name: string, start: () => Promise<D>, waitReplicas: number, more?: (deployment: () => D) => void) {
  describe(name, () => {
    let deployment: D;
    beforeAll(async () => (deployment = await start()), 60_000);
    afterAll(() => deployment?.stop());

    // With replicas, every grant write here also waits for one (REDIS_WAIT_REPLICAS=1), so that
    // path, one pipeline to the slot's primary, is exercised in each mode that has replicas.
    behavesAsAStore(
      redisWorld(`Redis (${name})`, async () => {
        await deployment.flush();
        return openReady({ ...deployment.settings(500), waitReplicas });
      }),
    );

    it('answers a ping', async () => {
      const store = await openReady(deployment.settings(500));
      try {
        await expect(store.ping()).resolves.toBeUndefined();
      } finally {
        await store.close();
      }
    });

    it('is refused without its credentials, reported as unavailable', async () => {
      const { password: _password, ...withoutPassword } = deployment.settings(500);
      const store = await RedisStore.open(withoutPassword, undefined, 1000);
      try {
        await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
      } finally {
        await store.close();
      }
    });

    more?.(() => deployment);
  });
}

onDeployment('one server, TLS and ACL user', () => startSingleRedis({ tls: true }), 0);
onDeployment(
  'Sentinel: primary, replica, three sentinels, TLS and ACL user',
  () => startSentinelRedis({ tls: true }),
  1,
  (deployment) => {
    it('with REDIS_WAIT_REPLICAS, counts a grant write as done only once the replica has it', async () => {
      const sentinel: SentinelDeployment = deployment();
      const redis = await openReady({ ...sentinel.settings(300), waitReplicas: 1 });
      const store = new RedisGrantStore(redis);
      const primary = await sentinel.primaryPort();
      const replica = sentinel.nodes.find((node) => node.port !== primary)!;
      try {
        await store.saveGrant(grant({ jobId: 7001 }));
        replica.pause();
        try {
          await expect(store.saveGrant(grant({ jobId: 7002 }))).rejects.toBeInstanceOf(StoreUnavailableError);
          await expect(store.revokeGrant(7001, Date.now())).rejects.toBeInstanceOf(StoreUnavailableError);
        } finally {
          replica.resume();
        }
        await store.saveGrant(grant({ jobId: 7003 }));
        expect((await store.findGrant(7003))?.jobId).toBe(7003);
      } finally {
        await redis.close();
      }
    });
  },
);
onDeployment('Cluster: 3 primaries, 3 replicas, TLS and ACL user', () => startRedisCluster({ tls: true }), 1);

describe('Redis store when Redis is gone', () => {
  it('fails at once with StoreUnavailableError instead of queueing, and recovers when Redis is back', async () => {
    const connection = await openReady(singleServer(redis.url));
    const store = new RedisGrantStore(connection);
    try {
      await connection.ping();
      await redis.stop();
      // A queued command would wait for the reconnect, forever here: the test would time out.
      await expect(store.saveGrant(grant())).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(store.findGrant(1001)).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(new RedisLimitStore(connection).takeWindowBlock('runner:17', 1, 1, 1000)).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(new RedisOutboxStore(connection).claim(1, 1000)).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(connection.ping()).rejects.toBeInstanceOf(StoreUnavailableError);

      await redis.start();
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        try {
          await store.saveGrant(grant());
          break;
        } catch {
          await sleep(100);
        }
      }
      expect((await store.findGrant(1001))?.jobId).toBe(1001);
    } finally {
      await connection.close();
    }
  });
});
