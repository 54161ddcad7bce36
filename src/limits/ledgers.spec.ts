import { LedgerObserver } from './block-lease';
import { JobSpanLedger } from './job-span-ledger';
import { MemoryLimitStore } from './memory-limit-store';
import { WindowLedger } from './window-ledger';

/** A clock the test moves by hand: leases and windows run out exactly when the test says. */
class Clock {
  at = 1_700_000_000_000;
  now = () => this.at;
  advance(ms: number) {
    this.at += ms;
  }
}

class StoreCalls implements LedgerObserver {
  count = 0;
  storeCall() {
    this.count++;
  }
}

const settled = async <T>(value: T | Promise<T>) => value;
const LIMITS = { perJob: 1000, perSecond: 100_000 };
const HOUR = 3_600_000;

describe('the lease ledger (issue 21): limits shared by replicas, spent locally', () => {
  let clock: Clock;
  let store: MemoryLimitStore;
  const ledgers: Array<WindowLedger | JobSpanLedger> = [];
  const windowLedger = (calls?: StoreCalls) => {
    const ledger = new WindowLedger(store, { clock, observer: calls, idleMs: 10_000 });
    ledgers.push(ledger);
    return ledger;
  };
  const spanLedger = (calls?: StoreCalls) => {
    const ledger = new JobSpanLedger(store, { clock, observer: calls, idleMs: 10_000, leaseMs: 30_000 });
    ledgers.push(ledger);
    return ledger;
  };

  beforeEach(() => {
    clock = new Clock();
    store = new MemoryLimitStore(clock.now);
  });
  afterEach(async () => {
    for (const ledger of ledgers.splice(0)) await ledger.close();
    await store.close();
  });

  describe('window blocks (a runner’s exports)', () => {
    it('answers a steady runner from its block: one store call for dozens of exports', async () => {
      const calls = new StoreCalls();
      const ledger = windowLedger(calls);
      for (let i = 0; i < 640; i++) expect(await settled(ledger.charge('runner:17', 6000, 60_000))).toMatchObject({ allowed: true });
      // 640 exports, blocks of 64, the next block taken while half of the last is left.
      expect(calls.count).toBeLessThanOrEqual(11);
      expect(calls.count / 640).toBeLessThan(0.05);
    });

    it('never lets replicas together exceed the window, and hands idle blocks back for the others', async () => {
      const replicas = [windowLedger(), windowLedger(), windowLedger()];
      let allowed = 0;
      for (let round = 0; round < 60; round++) {
        for (const replica of replicas) if ((await settled(replica.charge('runner:17', 100, 60_000))).allowed) allowed++;
      }
      expect(allowed).toBeLessThanOrEqual(100);
      // At most one block per other replica is stranded: 100 / 8 = 12 each.
      expect(allowed).toBeGreaterThanOrEqual(100 - 2 * 12);
      clock.advance(11_000);
      await Promise.all(replicas.map((replica) => replica.handBackIdle()));
      while ((await settled(replicas[0].charge('runner:17', 100, 60_000))).allowed) allowed++;
      expect(allowed).toBe(100);
    });

    it('refuses with the time left in the window, and starts over when it ends', async () => {
      const ledger = windowLedger();
      for (let i = 0; i < 10; i++) expect((await settled(ledger.charge('runner:18', 10, 60_000))).allowed).toBe(true);
      clock.advance(15_000);
      expect(await settled(ledger.charge('runner:18', 10, 60_000))).toEqual({ allowed: false, resetInMs: 45_000 });
      clock.advance(45_000);
      expect((await settled(ledger.charge('runner:18', 10, 60_000))).allowed).toBe(true);
    });

    it('admits a burst of concurrent first charges beyond one block while the window has room, and refuses past it', async () => {
      const ledger = windowLedger();
      // 300 lookups at once on a cold ledger share the first refill (a block of 64); the rest ask again.
      const burst = await Promise.all(Array.from({ length: 300 }, () => settled(ledger.charge('runner:19', 1200, 60_000))));
      expect(burst.filter((charge) => charge.allowed)).toHaveLength(300);
      const past = await Promise.all(Array.from({ length: 1000 }, () => settled(ledger.charge('runner:19', 1200, 60_000))));
      expect(past.filter((charge) => charge.allowed)).toHaveLength(900);
    });

    it('takes a refunded hit back into the block', async () => {
      const ledger = windowLedger();
      const charges = [];
      for (let i = 0; i < 10; i++) charges.push(await settled(ledger.charge('runner:19', 10, 60_000)));
      expect((await settled(ledger.charge('runner:19', 10, 60_000))).allowed).toBe(false);
      const first = charges[0];
      if (first.allowed) first.receipt.refund();
      if (first.allowed) first.receipt.refund();
      expect((await settled(ledger.charge('runner:19', 10, 60_000))).allowed).toBe(true);
      expect((await settled(ledger.charge('runner:19', 10, 60_000))).allowed).toBe(false);
    });
  });

  describe("span leases (a job's quota and rate)", () => {
    it('with one replica admits exactly the quota, with a store call per many exports', async () => {
      const calls = new StoreCalls();
      const ledger = spanLedger(calls);
      let granted = 0;
      for (let i = 0; i < 30; i++) granted += (await settled(ledger.charge(1001, 100, LIMITS, HOUR))).granted;
      expect(granted).toBe(1000);
      const steady = new StoreCalls();
      const big = spanLedger(steady);
      for (let i = 0; i < 1000; i++) await settled(big.charge(2002, 100, { perJob: 2_000_000_000, perSecond: 2_000_000_000 }, HOUR));
      expect(steady.count / 1000).toBeLessThan(0.05);
    });

    it('never lets replicas together exceed the quota, and every span is reachable once idle leases are handed back', async () => {
      const replicas = [spanLedger(), spanLedger(), spanLedger()];
      let granted = 0;
      for (let round = 0; round < 20; round++) for (const replica of replicas) granted += (await settled(replica.charge(1001, 30, LIMITS, HOUR))).granted;
      expect(granted).toBeLessThanOrEqual(1000);
      clock.advance(11_000);
      await Promise.all(replicas.map((replica) => replica.handBackIdle()));
      for (let i = 0; i < 50; i++) granted += (await settled(replicas[1].charge(1001, 30, LIMITS, HOUR))).granted;
      expect(granted).toBe(1000);
    });

    it('grants concurrent exports of one job in full beyond one lease while the quota has room, and only the rest past it', async () => {
      const ledger = spanLedger();
      // Eight 100-span exports at once on a cold ledger: the first lease (an eighth of the quota) covers one.
      const burst = await Promise.all(Array.from({ length: 8 }, () => settled(ledger.charge(2001, 100, LIMITS, HOUR))));
      expect(burst.map((charge) => charge.granted)).toEqual(Array(8).fill(100));
      const past = await Promise.all(Array.from({ length: 3 }, () => settled(ledger.charge(2001, 100, LIMITS, HOUR))));
      expect(past.reduce((sum, charge) => sum + charge.granted, 0)).toBe(200);
    });

    it('gives spans the collector did not accept back to the lease: a retry is not charged twice', async () => {
      const ledger = spanLedger();
      const limits = { perJob: 200, perSecond: 100_000 };
      const first = await settled(ledger.charge(1001, 200, limits, HOUR));
      expect(first.granted).toBe(200);
      first.receipt.refund();
      first.receipt.refund();
      // Answered from the lease, without waiting for the store.
      const retry = ledger.charge(1001, 200, limits, HOUR);
      expect(retry).not.toBeInstanceOf(Promise);
      expect((await settled(retry)).granted).toBe(200);
      expect((await settled(ledger.charge(1001, 1, limits, HOUR))).granted).toBe(0);
    });

    it('takes back the unspent lease of a replica that died, once its lease runs out', async () => {
      const dead = spanLedger();
      const alive = spanLedger();
      const limits = { perJob: 800, perSecond: 100_000 };
      // The dead replica took a block of 100 and spent 10 before it stopped answering.
      expect((await settled(dead.charge(1001, 10, limits, HOUR))).granted).toBe(10);
      let granted = 10;
      for (let i = 0; i < 100; i++) granted += (await settled(alive.charge(1001, 10, limits, HOUR))).granted;
      expect(granted).toBe(800 - 90);
      // The lease (30 s) runs out; the alive replica's next call takes back its unspent part.
      clock.advance(31_000);
      for (let i = 0; i < 100; i++) granted += (await settled(alive.charge(1001, 10, limits, HOUR))).granted;
      // The 10 spent but never reported are taken back too: the bound of a death is its block.
      expect(granted).toBe(800 + 10);
    });

    it("keeps to the per-second rate across replicas, and starts a new second's rate", async () => {
      const replicas = [spanLedger(), spanLedger()];
      const limits = { perJob: 1_000_000, perSecond: 160 };
      let granted = 0;
      for (let i = 0; i < 20; i++) for (const replica of replicas) granted += (await settled(replica.charge(1001, 10, limits, HOUR))).granted;
      expect(granted).toBeLessThanOrEqual(160);
      expect(granted).toBeGreaterThanOrEqual(160 - 20);
      clock.advance(1000);
      expect((await settled(replicas[0].charge(1001, 10, limits, HOUR))).granted).toBe(10);
    });

    it('says how much room the quota and the rate had when it grants less than asked', async () => {
      const ledger = spanLedger();
      const limits = { perJob: 150, perSecond: 100_000 };
      expect((await settled(ledger.charge(1001, 100, limits, HOUR))).granted).toBe(100);
      expect(await settled(ledger.charge(1001, 100, limits, HOUR))).toMatchObject({ granted: 50, quotaRoom: 50 });
    });
  });
});
