import { ParkingLimits, ParkingStore, TraceDecision } from '../../src/parking/parking';
import { StoreWorld } from './store-world';

/** One behaviour, every parking store (SPEC §11): parking within bounds, the decision, release, the time limit. */
export function behavesAsAParkingStore(world: StoreWorld) {
  describe(`${world.name} parking store`, () => {
    let parking: ParkingStore;
    beforeEach(async () => ({ parking } = await world.open()));
    afterEach(() => world.close());

    const trace = 'b'.repeat(32);
    const other = 'c'.repeat(32);
    const limits: ParkingLimits = { maxTraceSpans: 10, maxTraceBytes: 1000, maxTotalBytes: 1500, holdMs: 300, rememberMs: 60_000 };
    // Bytes that are not text: parked bodies must come back exactly as they went in.
    const body = (size: number, fill = 0x0a) => Buffer.alloc(size, fill);

    it('keeps parked entries byte for byte, in parking order, and accounts for them', async () => {
      const binary = Buffer.from([0x0a, 0x00, 0xff, 0x80, 0x12, 0x00]);
      expect(await parking.park(trace, { kind: 'protobuf', body: binary, spans: 2 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'spans', body: Buffer.from('{"resource":{}}'), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      const entries = await parking.parked(trace);
      expect(entries.map(({ kind, spans }) => [kind, spans])).toEqual([
        ['protobuf', 2],
        ['spans', 1],
      ]);
      expect(entries[0].body.equals(binary)).toBe(true);
      expect(entries[1].body.toString()).toBe('{"resource":{}}');
      expect(await parking.usage()).toEqual({ traces: 1, spans: 3, bytes: binary.length + 15 });
    });

    it("refuses an entry over a trace's spans or bytes, or over the total, and evicts nothing", async () => {
      expect(await parking.park(trace, { kind: 'protobuf', body: body(600), spans: 8 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 3 }, limits)).toEqual({ kind: 'full', limit: 'trace_spans' });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(500), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'trace_bytes' });
      expect(await parking.park(other, { kind: 'protobuf', body: body(800), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(other, { kind: 'protobuf', body: body(200), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'total_bytes' });
      expect((await parking.parked(trace)).map((entry) => entry.body.length)).toEqual([600]);
      expect((await parking.parked(other)).map((entry) => entry.body.length)).toEqual([800]);
      expect((await parking.usage()).bytes).toBe(1400);
    });

    it('gives released bytes back to the budget', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(900), spans: 1 }, limits);
      expect(await parking.park(other, { kind: 'protobuf', body: body(900), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'total_bytes' });
      const [entry] = await parking.parked(trace);
      await parking.release(trace, [entry.id]);
      await parking.release(trace, [entry.id]);
      expect(await parking.parked(trace)).toEqual([]);
      expect(await parking.park(other, { kind: 'protobuf', body: body(900), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.usage()).toMatchObject({ spans: 1, bytes: 900 });
    });

    it('answers a decided trace with its decision instead of parking', async () => {
      expect(await parking.findDecision(trace)).toBeNull();
      expect(await parking.decide(trace, { keep: true, reason: 'failed' }, 60_000)).toEqual({ decision: { keep: true, reason: 'failed' }, changed: true });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits)).toEqual({
        kind: 'decided',
        decision: { keep: true, reason: 'failed' },
      });
      expect(await parking.parked(trace)).toEqual([]);
      expect((await parking.usage()).bytes).toBe(0);
    });

    it('keeps the first decision, except that a keep replaces a drop', async () => {
      const decided = async (decision: TraceDecision) => parking.decide(trace, decision, 60_000);
      expect(await decided({ keep: false, reason: 'outcome' })).toEqual({ decision: { keep: false, reason: 'outcome' }, changed: true });
      expect(await decided({ keep: false, reason: 'no_outcome' })).toEqual({ decision: { keep: false, reason: 'outcome' }, changed: false });
      expect(await decided({ keep: true, reason: 'failed' })).toEqual({ decision: { keep: true, reason: 'failed' }, changed: true });
      expect(await decided({ keep: true, reason: 'slow' })).toEqual({ decision: { keep: true, reason: 'failed' }, changed: false });
      expect(await decided({ keep: false, reason: 'outcome' })).toEqual({ decision: { keep: true, reason: 'failed' }, changed: false });
      expect(await parking.findDecision(trace)).toEqual({ keep: true, reason: 'failed' });
    });

    it('reopens a dropped trace, never a kept one', async () => {
      expect(await parking.reopen(trace)).toBe(false);
      await parking.decide(trace, { keep: false, reason: 'outcome' }, 60_000);
      expect(await parking.reopen(trace)).toBe(true);
      expect(await parking.findDecision(trace)).toBeNull();
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      await parking.decide(trace, { keep: true, reason: 'failed' }, 60_000);
      expect(await parking.reopen(trace)).toBe(false);
      expect(await parking.findDecision(trace)).toEqual({ keep: true, reason: 'failed' });
    });

    it('collects the facts a decision reads: statuses once each, the longest queue wait', async () => {
      expect(await parking.readFacts(trace)).toEqual({ statuses: [], longestQueueMs: 0 });
      await parking.noteFacts(trace, { longestQueueMs: 4000 }, 60_000);
      await parking.noteFacts(trace, { statuses: ['failed', 'success'], longestQueueMs: 1000 }, 60_000);
      await parking.noteFacts(trace, { statuses: ['failed'], whenNoOutcome: 'drop' }, 60_000);
      expect(await parking.readFacts(trace)).toEqual({ statuses: ['failed', 'success'], longestQueueMs: 4000, whenNoOutcome: 'drop' });
    });

    it('hands a trace past its time limit to one caller at a time, until it is settled', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
      await world.elapse(400);
      expect(await parking.claimOverdue(10, 1000)).toEqual([trace]);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
      await parking.settled(trace);
      expect((await parking.usage()).traces).toBe(0);
      await world.elapse(1100);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
    });
  });
}
