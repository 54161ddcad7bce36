import Redis from 'ioredis';
import { testGrant } from '../../test/helpers/grants';
import { RedisServer, startRedis } from '../../test/helpers/redis';
import { RedisDeployment, SentinelDeployment, startRedisCluster, startSentinelRedis, startSingleRedis } from '../../test/helpers/redis-topologies';
import { GrantStore, SpanLeaseRequest, StoreUnavailableError } from './grant';
import { MemoryGrantStore } from './memory-grant-store';
import { OutboxSpan, TracedJob, tracedPipelineOf } from './traced-work';
import { RedisGrantStore } from './redis-grant-store';

const grant = testGrant;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * How long a test's store may take to become ready. `open` goes on without Redis after its default 2 s, as the
 * service must; a TLS cluster of six nodes, with other suites busy on both cores, took longer than that in CI,
 * and the test's first command then met "Cluster isn't ready". The suite is about a ready store, so it waits.
 */
const READY_WAIT_MS = 20_000;
const openReady = (settings: Parameters<typeof RedisGrantStore.open>[0]) => RedisGrantStore.open(settings, undefined, READY_WAIT_MS);

/** One behaviour, every store (SPEC §7): whatever passes here holds for each deployment. */
function behavesAsAGrantStore(name: string, open: () => Promise<GrantStore>) {
  describe(`${name} grant store`, () => {
    let store: GrantStore;
    beforeEach(async () => (store = await open()));
    afterEach(() => store.close());

    it('gives back the grant it was given', async () => {
      expect(await store.saveGrant(grant())).toEqual(grant({ expiresAt: expect.any(Number) as unknown as number }));
      expect(await store.findGrant(1001)).toEqual(grant({ expiresAt: expect.any(Number) as unknown as number }));
    });

    it('knows nothing of a job it never saw', async () => {
      expect(await store.findGrant(424242)).toBeNull();
    });

    it('replaces the grant of a job picked up again, never keeping two', async () => {
      await store.saveGrant(grant({ runnerId: 17 }));
      await store.saveGrant(grant({ runnerId: 18 }));
      expect((await store.findGrant(1001))?.runnerId).toBe(18);
    });

    it('keeps grants of different jobs apart', async () => {
      await store.saveGrant(grant({ jobId: 1, traceId: '1'.repeat(32) }));
      await store.saveGrant(grant({ jobId: 2, traceId: '2'.repeat(32) }));
      expect((await store.findGrant(1))?.traceId).toBe('1'.repeat(32));
      expect((await store.findGrant(2))?.traceId).toBe('2'.repeat(32));
    });

    it('forgets a grant at its expiry', async () => {
      await store.saveGrant(grant({ expiresAt: Date.now() + 300 }));
      expect(await store.findGrant(1001)).not.toBeNull();
      await sleep(450);
      expect(await store.findGrant(1001)).toBeNull();
    });

    it('does not store a grant that has already expired', async () => {
      await store.saveGrant(grant({ expiresAt: Date.now() - 1 }));
      expect(await store.findGrant(1001)).toBeNull();
    });

    it('keeps the expiry of the first pickup when a job is decorated again (SPEC §4)', async () => {
      const expiresAt = Date.now() + 60_000;
      await store.saveGrant(grant({ expiresAt }));
      const again = await store.saveGrant(grant({ expiresAt: expiresAt + 3_600_000, runnerId: 18 }));
      expect(again).toMatchObject({ expiresAt, runnerId: 18 });
      expect(await store.findGrant(1001)).toMatchObject({ expiresAt, runnerId: 18 });
      // The record itself still goes at the first expiry, not an hour later.
      await store.saveGrant(grant({ jobId: 1002, expiresAt: Date.now() + 300 }));
      await store.saveGrant(grant({ jobId: 1002, expiresAt: Date.now() + 60_000 }));
      await sleep(450);
      expect(await store.findGrant(1002)).toBeNull();
    });

    it('starts a new grant for a job picked up again after its first grant ended', async () => {
      await store.saveGrant(grant({ expiresAt: Date.now() + 300 }));
      await sleep(450);
      const expiresAt = Date.now() + 60_000;
      expect(await store.saveGrant(grant({ expiresAt, runnerId: 18 }))).toMatchObject({ expiresAt, runnerId: 18 });
      expect(await store.findGrant(1001)).toMatchObject({ expiresAt, runnerId: 18 });
    });

    it('keeps ids beyond 10^14 exact when a job is decorated again', async () => {
      const big = {
        jobId: 2 ** 53 - 1,
        projectId: 2 ** 53 - 3,
        pipelineId: 123_456_789_012_345,
        rootPipelineId: 123_456_789_012_344,
        runnerId: 987_654_321_098_765,
      };
      const first = await store.saveGrant(grant(big));
      const again = await store.saveGrant(grant({ ...big, expiresAt: first.expiresAt + 60_000 }));
      expect(again).toEqual(first);
      expect(await store.findGrant(big.jobId)).toEqual(first);
    });

    it('never lifts a revocation when a revoked job is decorated again (SPEC §4)', async () => {
      await store.saveGrant(grant());
      const revokedAt = Date.now() + 1000;
      await store.revokeGrant(1001, revokedAt);
      expect((await store.saveGrant(grant()))?.revokedAt).toBe(revokedAt);
      expect((await store.findGrant(1001))?.revokedAt).toBe(revokedAt);
      expect((await store.findGrantByJobTokenDigest('b'.repeat(64)))?.revokedAt).toBe(revokedAt);
    });

    it('finds a grant by its job token digest, and forgets the old digest when the job is picked up again', async () => {
      await store.saveGrant(grant({ jobTokenDigest: 'c'.repeat(64) }));
      expect((await store.findGrantByJobTokenDigest('c'.repeat(64)))?.jobId).toBe(1001);
      await store.saveGrant(grant({ jobTokenDigest: 'd'.repeat(64) }));
      expect(await store.findGrantByJobTokenDigest('c'.repeat(64))).toBeNull();
      expect((await store.findGrantByJobTokenDigest('d'.repeat(64)))?.jobId).toBe(1001);
      expect(await store.findGrantByJobTokenDigest('e'.repeat(64))).toBeNull();
    });

    it('keeps a grant saved without its job token indexed out of the token lookup, and finds it by its job', async () => {
      await store.saveGrant(grant({ jobTokenDigest: 'a'.repeat(64) }), undefined, { indexJobToken: false });
      expect(await store.findGrantByJobTokenDigest('a'.repeat(64))).toBeNull();
      expect(await store.findGrant(1001)).toMatchObject({ jobId: 1001, jobTokenDigest: 'a'.repeat(64) });
    });

    it('answers a job token asked about again from its grant as it is now: revoked, then gone', async () => {
      await store.saveGrant(grant({ jobTokenDigest: 'f'.repeat(64), expiresAt: Date.now() + 400 }));
      expect(await store.findGrantByJobTokenDigest('f'.repeat(64))).toMatchObject({ jobId: 1001 });
      expect(await store.findGrantByJobTokenDigest('f'.repeat(64))).not.toHaveProperty('revokedAt');
      const revokedAt = Date.now();
      await store.revokeGrant(1001, revokedAt);
      expect((await store.findGrantByJobTokenDigest('f'.repeat(64)))?.revokedAt).toBe(revokedAt);
      await sleep(550);
      expect(await store.findGrantByJobTokenDigest('f'.repeat(64))).toBeNull();
      // Picked up again after its grant ended: found again, by the new grant.
      await store.saveGrant(grant({ jobTokenDigest: 'f'.repeat(64), projectId: 8 }));
      expect(await store.findGrantByJobTokenDigest('f'.repeat(64))).toMatchObject({ jobId: 1001, projectId: 8 });
    });

    it('marks a grant revoked without shortening its life, and never pushes a revocation later', async () => {
      const expiresAt = Date.now() + 60_000;
      await store.saveGrant(grant({ expiresAt }));
      const revokedAt = Date.now() + 1000;
      expect((await store.revokeGrant(1001, revokedAt))?.revokedAt).toBe(revokedAt);
      expect((await store.revokeGrant(1001, revokedAt + 5000))?.revokedAt).toBe(revokedAt);
      expect(await store.findGrant(1001)).toMatchObject({ revokedAt, expiresAt });
      expect(await store.revokeGrant(424242, revokedAt)).toBeNull();
    });

    it('counts hits in a fixed window per key, and starts over when the window ends', async () => {
      const blocks = [];
      for (let i = 0; i < 4; i++) blocks.push(await store.takeWindowBlock('runner:17', 1, 3, 400));
      expect(blocks.map((block) => block.granted)).toEqual([1, 1, 1, 0]);
      expect(blocks[3].resetInMs).toBeGreaterThan(0);
      expect(blocks[3].resetInMs).toBeLessThanOrEqual(400);
      expect((await store.takeWindowBlock('runner:18', 1, 3, 400)).granted).toBe(1);
      await sleep(450);
      expect((await store.takeWindowBlock('runner:17', 1, 3, 400)).granted).toBe(1);
    });

    it('takes hits back, never below zero, and leaves an ended window ended', async () => {
      await store.takeWindowBlock('runner:19', 3, 3, 400);
      await store.returnWindowBlock('runner:19', 6);
      expect((await store.takeWindowBlock('runner:19', 9, 3, 400)).granted).toBe(3);
      await store.returnWindowBlock('runner:20', 1);
      expect((await store.takeWindowBlock('runner:20', 1, 1, 400)).granted).toBe(1);
      await sleep(450);
      await store.returnWindowBlock('runner:19', 1);
      expect((await store.takeWindowBlock('runner:19', 1, 1, 400)).resetInMs).toBeGreaterThan(300);
    });

    const lease = (leaseId: string, quotaWanted: number, rateWanted: number, limits: { perJob: number; perSecond: number }, quotaTtlMs = 60_000) =>
      store.leaseSpans(1001, { leaseId, spent: 0, quotaWanted, rateWanted, limits, quotaTtlMs, leaseMs: 60_000 });

    it("leases a job's quota and its per-second rate at once, each only as far as it has room", async () => {
      const limits = { perJob: 10, perSecond: 4 };
      expect(await lease('a', 3, 3, limits)).toEqual({ quotaGranted: 3, rateGranted: 3, rateResetInMs: expect.any(Number) });
      expect(await lease('a', 3, 3, limits)).toMatchObject({ quotaGranted: 3, rateGranted: 1 });
      // Another job has its own counters.
      expect(
        (await store.leaseSpans(1002, { leaseId: 'a', spent: 0, quotaWanted: 4, rateWanted: 4, limits, quotaTtlMs: 60_000, leaseMs: 60_000 })).quotaGranted,
      ).toBe(4);
      await sleep(1100);
      // A new second: the rate has room again, the quota remembers what was taken.
      expect(await lease('a', 9, 9, limits)).toMatchObject({ quotaGranted: 4, rateGranted: 4 });
    });

    it('never hands out more of a job rate than it has, however many replicas ask at once', async () => {
      const leases = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          store.leaseSpans(1003, {
            leaseId: `r${i}`,
            spent: 0,
            quotaWanted: 7,
            rateWanted: 7,
            limits: { perJob: 1000, perSecond: 50 },
            quotaTtlMs: 60_000,
            leaseMs: 60_000,
          }),
        ),
      );
      expect(leases.reduce((sum, granted) => sum + granted.rateGranted, 0)).toBe(50);
    });

    it('takes back spans given back, never below zero, and only for the job they were taken from', async () => {
      const limits = { perJob: 100, perSecond: 1000 };
      expect((await lease('a', 60, 0, limits)).quotaGranted).toBe(60);
      await store.releaseSpans(1001, 60);
      expect((await lease('b', 100, 0, limits)).quotaGranted).toBe(100);
      await store.releaseSpans(1001, 30);
      await store.releaseSpans(1002, 30);
      expect((await lease('c', 100, 0, limits)).quotaGranted).toBe(30);
      await store.releaseSpans(1001, 1000);
      expect((await lease('d', 1000, 0, limits)).quotaGranted).toBe(100);
    });

    it('does not bring back or lengthen a span quota that has ended', async () => {
      const limits = { perJob: 100, perSecond: 1000 };
      expect((await lease('a', 100, 0, limits, 300)).quotaGranted).toBe(100);
      await sleep(150);
      await store.releaseSpans(1001, 50);
      await sleep(200);
      // The quota ended 300 ms after it was first taken: a fresh one, whole, not the 50 given back.
      expect((await lease('b', 1000, 0, limits, 300)).quotaGranted).toBe(100);
      await sleep(350);
      await store.releaseSpans(1001, 100);
      expect((await lease('c', 1000, 0, limits, 300)).quotaGranted).toBe(100);
    });

    it('answers a ping', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });

    // ── Issue 21: blocks and leases, spent locally by one replica ──

    it('hands out blocks of a window that never add up to more than its limit, and takes unspent hits back', async () => {
      expect(await store.takeWindowBlock('runner:30', 4, 10, 60_000)).toEqual({ granted: 4, resetInMs: expect.any(Number) });
      expect((await store.takeWindowBlock('runner:30', 4, 10, 60_000)).granted).toBe(4);
      expect((await store.takeWindowBlock('runner:30', 4, 10, 60_000)).granted).toBe(2);
      expect((await store.takeWindowBlock('runner:30', 4, 10, 60_000)).granted).toBe(0);
      await store.returnWindowBlock('runner:30', 3);
      expect((await store.takeWindowBlock('runner:30', 4, 10, 60_000)).granted).toBe(3);
    });

    it('starts a window over when it ends, blocks included', async () => {
      const block = await store.takeWindowBlock('runner:31', 5, 5, 300);
      expect(block.granted).toBe(5);
      expect(block.resetInMs).toBeLessThanOrEqual(300);
      await sleep(400);
      expect((await store.takeWindowBlock('runner:31', 5, 5, 300)).granted).toBe(5);
    });

    const spanLease = (leaseId: string, overrides: Partial<SpanLeaseRequest> = {}): SpanLeaseRequest => ({
      leaseId,
      spent: 0,
      quotaWanted: 40,
      rateWanted: 40,
      limits: { perJob: 100, perSecond: 1000 },
      quotaTtlMs: 60_000,
      leaseMs: 60_000,
      ...overrides,
    });

    it("leases a job's quota to replicas so that their leases never exceed it", async () => {
      expect(await store.leaseSpans(1001, spanLease('a'))).toEqual({ quotaGranted: 40, rateGranted: 40, rateResetInMs: expect.any(Number) });
      expect((await store.leaseSpans(1001, spanLease('b'))).quotaGranted).toBe(40);
      expect((await store.leaseSpans(1001, spanLease('c'))).quotaGranted).toBe(20);
      expect((await store.leaseSpans(1001, spanLease('a'))).quotaGranted).toBe(0);
    });

    it('takes back what a replica did not spend when it ends its lease, and keeps what it spent', async () => {
      await store.leaseSpans(1001, spanLease('a', { quotaWanted: 100 }));
      await store.leaseSpans(1001, spanLease('a', { spent: 30, quotaWanted: 0 }));
      await store.returnSpanLease(1001, 'a', 70);
      expect((await store.leaseSpans(1001, spanLease('b', { quotaWanted: 100 }))).quotaGranted).toBe(70);
      // Ending a lease twice gives nothing back twice.
      await store.returnSpanLease(1001, 'a', 70);
      expect((await store.leaseSpans(1001, spanLease('c', { quotaWanted: 100 }))).quotaGranted).toBe(0);
    });

    it('takes back the unspent part of a lease that ran out (its replica died), and only that', async () => {
      await store.leaseSpans(1001, spanLease('dead', { quotaWanted: 60, leaseMs: 200 }));
      // It reported 10 spent, then died holding 50.
      await store.leaseSpans(1001, spanLease('dead', { spent: 10, quotaWanted: 0, leaseMs: 200 }));
      expect((await store.leaseSpans(1001, spanLease('alive', { quotaWanted: 100 }))).quotaGranted).toBe(40);
      await sleep(300);
      expect((await store.leaseSpans(1001, spanLease('alive', { quotaWanted: 100 }))).quotaGranted).toBe(50);
    });

    it("grants a lease no more of a second's rate than it has left", async () => {
      const limits = { perJob: 10_000, perSecond: 50 };
      expect((await store.leaseSpans(1001, spanLease('a', { limits, rateWanted: 30 }))).rateGranted).toBe(30);
      const second = await store.leaseSpans(1001, spanLease('b', { limits, rateWanted: 30 }));
      expect(second.rateGranted).toBe(20);
      expect(second.rateResetInMs).toBeLessThanOrEqual(1000);
    });

    // ── SPEC §10: traced work and the span outbox ──

    const tracedJob = (overrides: Partial<TracedJob> = {}): TracedJob => ({
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
    /** A pickup's pipelines as the pipeline-spans service writes them: the job's own and its root. */
    const pipelinesOf = (job: TracedJob, ttlMs: number) =>
      [...new Set([job.pipelineId, job.rootPipelineId])].map((id) => ({ value: tracedPipelineOf(job, id), ttlMs }));
    const outboxSpan = (spanId: string): OutboxSpan => ({ spanId, resourceSpans: `{"span":"${spanId}"}`, enqueuedAt: Date.now() });
    const limits = { maxSpans: 3, rememberMs: 60_000 };

    it('remembers a traced job with its grant, in the same step, for at least a minute however short the grant', async () => {
      expect(await store.findTracedJob(5001)).toBeNull();
      await store.saveGrant(testGrant({ jobId: 5001, expiresAt: Date.now() + 300 }), tracedJob());
      expect(await store.findTracedJob(5001)).toEqual(tracedJob());
      await sleep(450);
      // The grant is gone; the job's end, told by a webhook later, still finds whose spans it is.
      expect(await store.findGrant(5001)).toBeNull();
      expect(await store.findTracedJob(5001)).toEqual(tracedJob());
    });

    it('remembers no traced job for a grant saved without one, and the newest pickup of a job decorated again', async () => {
      await store.saveGrant(testGrant({ jobId: 5002 }));
      expect(await store.findTracedJob(5002)).toBeNull();
      await store.saveGrant(testGrant({ jobId: 5002 }), tracedJob({ jobId: 5002, pickedUpAt: 1 }));
      await store.saveGrant(testGrant({ jobId: 5002 }), tracedJob({ jobId: 5002, pickedUpAt: 2 }));
      expect((await store.findTracedJob(5002))?.pickedUpAt).toBe(2);
    });

    it('remembers a traced pipeline and its root pipeline, and forgets them at the end', async () => {
      await store.recordTracedPipelines(pipelinesOf(tracedJob(), 300));
      const pipeline = { rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32), tracestate: 'ot=th:c' };
      expect(await store.findTracedPipeline(501)).toEqual({ pipelineId: 501, ...pipeline });
      expect(await store.findTracedPipeline(500)).toEqual({ pipelineId: 500, ...pipeline });
      expect(await store.findTracedPipeline(502)).toBeNull();
      await sleep(450);
      expect(await store.findTracedPipeline(500)).toBeNull();
    });

    it('remembers every pipeline of a batch of pickups written in one call', async () => {
      const jobs = [tracedJob({ jobId: 5001 }), tracedJob({ jobId: 5002, pipelineId: 502 }), tracedJob({ jobId: 5003, pipelineId: 503, rootPipelineId: 503 })];
      await store.recordTracedPipelines(jobs.flatMap((job) => pipelinesOf(job, 60_000)));
      for (const id of [500, 501, 502, 503]) expect((await store.findTracedPipeline(id))?.pipelineId).toBe(id);
      expect((await store.findTracedPipeline(503))?.rootPipelineId).toBe(503);
    });

    it('keeps a pipeline as long as its longest-lived job, whatever order the pickups come in', async () => {
      await store.recordTracedPipelines(pipelinesOf(tracedJob({ jobId: 5001 }), 60_000));
      await store.recordTracedPipelines(pipelinesOf(tracedJob({ jobId: 5002 }), 300));
      await sleep(450);
      expect(await store.findTracedPipeline(501)).not.toBeNull();
    });

    it("keeps a pipeline span's highest version whatever order versions come in, and says when one is stale", async () => {
      const [older, newer] = [(2 ** 40 + 5) * 1024, (2 ** 40 + 9) * 1024 + 130];
      expect(await store.raisePipelineSpanVersion(501, older, 60_000)).toBe(older);
      expect(await store.raisePipelineSpanVersion(501, newer, 60_000)).toBe(newer);
      expect(await store.raisePipelineSpanVersion(501, older, 60_000)).toBe(newer);
      expect(await store.raisePipelineSpanVersion(501, newer, 60_000)).toBe(newer);
      expect(await store.raisePipelineSpanVersion(502, older, 60_000)).toBe(older);
    });

    it("keeps each job's runner end once per pipeline and answers them all", async () => {
      const end = (jobId: number, finishedAt: number, status = 'success') => ({ jobId, queuedAt: 1_000 + jobId, finishedAt, status });
      expect(await store.recordRunnerJobEnd(501, end(1, 5_000), 60_000)).toEqual([end(1, 5_000)]);
      const both = await store.recordRunnerJobEnd(501, end(2, 9_000, 'failed'), 60_000);
      expect(both.sort((a, b) => a.jobId - b.jobId)).toEqual([end(1, 5_000), end(2, 9_000, 'failed')]);
      // Reported twice (two exports with its job_execution): still one job.
      expect(await store.recordRunnerJobEnd(501, end(2, 9_000, 'failed'), 60_000)).toHaveLength(2);
      expect(await store.recordRunnerJobEnd(500, end(3, 7_000), 60_000)).toEqual([end(3, 7_000)]);
    });

    it('enqueues each span id once, refuses what does not fit, and says which was which', async () => {
      expect(await store.enqueueSpans([outboxSpan('01'), outboxSpan('02'), outboxSpan('01')], limits)).toEqual({ queued: 2, duplicates: 1, refused: 0 });
      expect(await store.enqueueSpans([outboxSpan('02'), outboxSpan('03'), outboxSpan('04')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 1 });
      expect((await store.outboxDepth()).spans).toBe(3);
      // Refused is not remembered: once there is room, the same span is taken.
      const claimed = await store.claimSpans(10, 60_000);
      await store.acknowledgeSpans(claimed.map((span) => span.spanId));
      expect(await store.enqueueSpans([outboxSpan('04'), outboxSpan('01')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 0 });
    });

    it('hands each due span to one claimer only until its lease runs out, and forgets it once acknowledged', async () => {
      await store.enqueueSpans([outboxSpan('0a'), outboxSpan('0b')], limits);
      const first = await store.claimSpans(10, 300);
      expect(first.map((span) => [span.spanId, span.resourceSpans, span.attempts])).toEqual([
        ['0a', '{"span":"0a"}', 0],
        ['0b', '{"span":"0b"}', 0],
      ]);
      expect(await store.claimSpans(10, 300)).toEqual([]);
      await store.acknowledgeSpans(['0a']);
      await sleep(400);
      // The claimer of 0b died: its lease ran out and the span is due again.
      expect((await store.claimSpans(10, 300)).map((span) => span.spanId)).toEqual(['0b']);
      expect(await store.outboxDepth()).toEqual({ spans: 1, oldestEnqueuedAt: expect.any(Number) });
    });

    it('puts a span whose delivery failed back for later, counting the attempt', async () => {
      await store.enqueueSpans([outboxSpan('0c')], limits);
      const [claimed] = await store.claimSpans(10, 60_000);
      await store.retrySpans([claimed.spanId], 200);
      expect(await store.claimSpans(10, 60_000)).toEqual([]);
      await sleep(300);
      expect((await store.claimSpans(10, 60_000)).map((span) => [span.spanId, span.attempts])).toEqual([['0c', 1]]);
      // Acknowledged meanwhile by another replica: a late retry does not bring it back.
      await store.acknowledgeSpans(['0c']);
      await store.retrySpans(['0c'], 0);
      expect(await store.claimSpans(10, 60_000)).toEqual([]);
      expect(await store.outboxDepth()).toEqual({ spans: 0 });
    });
  });
}

behavesAsAGrantStore('in-memory', async () => new MemoryGrantStore());

let redis: RedisServer;
beforeAll(async () => (redis = await startRedis()));
afterAll(() => redis.stop());
const singleServer = (url: string) => ({ topology: { mode: 'single' as const, url }, commandTimeoutMs: 500 });

behavesAsAGrantStore('Redis', async () => {
  await redis.flush();
  return openReady(singleServer(redis.url));
});

describe('Redis grant store key layout', () => {
  it("keeps a job's span counters and leases in one hash slot, so the script runs on Redis Cluster", async () => {
    await redis.flush();
    const store = await openReady(singleServer(redis.url));
    try {
      await store.leaseSpans(4242, {
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
    } finally {
      await store.close();
    }
  });
});

/**
 * The same suite on the deployments operators scale out to, each secured as in production (an ACL
 * user limited to the `cjt:` keys, its password from a file; TLS where it says so). On the cluster,
 * an operation whose keys span two slots fails with CROSSSLOT, so this is also the check that every
 * operation keeps its keys in one slot.
 */
function onDeployment<D extends RedisDeployment>(name: string, start: () => Promise<D>, waitReplicas: number, more?: (deployment: () => D) => void) {
  describe(name, () => {
    let deployment: D;
    beforeAll(async () => (deployment = await start()), 60_000);
    afterAll(() => deployment?.stop());

    // With replicas, every grant write here also waits for one (REDIS_WAIT_REPLICAS=1), so that
    // path, one pipeline to the slot's primary, is exercised in each mode that has replicas.
    behavesAsAGrantStore(`Redis (${name})`, async () => {
      await deployment.flush();
      return openReady({ ...deployment.settings(500), waitReplicas });
    });

    it('is refused without its credentials, reported as unavailable', async () => {
      const { password: _password, ...withoutPassword } = deployment.settings(500);
      const store = await RedisGrantStore.open(withoutPassword, undefined, 1000);
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
      const store = await openReady({ ...sentinel.settings(300), waitReplicas: 1 });
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
        await store.close();
      }
    });
  },
);
onDeployment('Cluster: 3 primaries, 3 replicas, TLS and ACL user', () => startRedisCluster({ tls: true }), 1);

describe('Redis grant store when Redis is gone', () => {
  it('fails at once with StoreUnavailableError instead of queueing, and recovers when Redis is back', async () => {
    const store = await openReady(singleServer(redis.url));
    try {
      await store.ping();
      await redis.stop();
      // A queued command would wait for the reconnect, forever here: the test would time out.
      await expect(store.saveGrant(grant())).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(store.findGrant(1001)).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);

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
      await store.close();
    }
  });
});
