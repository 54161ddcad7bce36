import { LimitStore, SpanLeaseRequest } from '../../src/limits/limit-store';
import { StoreWorld } from './store-world';

/** One behaviour, every limit store (SPEC §6, issue 21): windows, span quotas, rates and leases. */
export function behavesAsALimitStore(world: StoreWorld) {
  describe(`${world.name} limit store`, () => {
    let store: LimitStore;
    beforeEach(async () => ({ limits: store } = await world.open()));
    afterEach(() => world.close());

    it('counts hits in a fixed window per key, and starts over when the window ends', async () => {
      const blocks = [];
      for (let i = 0; i < 4; i++) blocks.push(await store.takeWindowBlock('runner:17', 1, 3, 400));
      expect(blocks.map((block) => block.granted)).toEqual([1, 1, 1, 0]);
      expect(blocks[3].resetInMs).toBeGreaterThan(0);
      expect(blocks[3].resetInMs).toBeLessThanOrEqual(400);
      expect((await store.takeWindowBlock('runner:18', 1, 3, 400)).granted).toBe(1);
      await world.elapse(450);
      expect((await store.takeWindowBlock('runner:17', 1, 3, 400)).granted).toBe(1);
    });

    it('takes hits back, never below zero, and leaves an ended window ended', async () => {
      await store.takeWindowBlock('runner:19', 3, 3, 400);
      await store.returnWindowBlock('runner:19', 6);
      expect((await store.takeWindowBlock('runner:19', 9, 3, 400)).granted).toBe(3);
      await store.returnWindowBlock('runner:20', 1);
      expect((await store.takeWindowBlock('runner:20', 1, 1, 400)).granted).toBe(1);
      await world.elapse(450);
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
      await world.elapse(1100);
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
      await world.elapse(150);
      await store.releaseSpans(1001, 50);
      await world.elapse(200);
      // The quota ended 300 ms after it was first taken: a fresh one, whole, not the 50 given back.
      expect((await lease('b', 1000, 0, limits, 300)).quotaGranted).toBe(100);
      await world.elapse(350);
      await store.releaseSpans(1001, 100);
      expect((await lease('c', 1000, 0, limits, 300)).quotaGranted).toBe(100);
    });

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
      await world.elapse(400);
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
      await world.elapse(300);
      expect((await store.leaseSpans(1001, spanLease('alive', { quotaWanted: 100 }))).quotaGranted).toBe(50);
    });

    it("grants a lease no more of a second's rate than it has left", async () => {
      const limits = { perJob: 10_000, perSecond: 50 };
      expect((await store.leaseSpans(1001, spanLease('a', { limits, rateWanted: 30 }))).rateGranted).toBe(30);
      const second = await store.leaseSpans(1001, spanLease('b', { limits, rateWanted: 30 }));
      expect(second.rateGranted).toBe(20);
      expect(second.rateResetInMs).toBeLessThanOrEqual(1000);
    });
  });
}
