import { ParkingLimits, ParkingStore, TraceDecision } from '../../src/outcome-sampling/parking/parking';
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

    const parkedOf = async (traceId: string) => parking.parkedEntries(traceId, await parking.parkedIds(traceId));

    it('keeps parked entries byte for byte and accounts for them', async () => {
      const binary = Buffer.from([0x0a, 0x00, 0xff, 0x80, 0x12, 0x00]);
      expect(await parking.park(trace, { kind: 'protobuf', body: binary, spans: 2 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'spans', body: Buffer.from('{"resource":{}}'), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      const entries = (await parkedOf(trace)).sort((a, b) => a.kind.localeCompare(b.kind));
      expect(entries.map(({ kind, spans, bytes }) => [kind, spans, bytes])).toEqual([
        ['protobuf', 2, 6],
        ['spans', 1, 15],
      ]);
      expect(entries[0].body.equals(binary)).toBe(true);
      expect(entries[1].body.toString()).toBe('{"resource":{}}');
      expect(await parking.usage()).toEqual({ traces: 1, spans: 3, bytes: binary.length + 15 });
    });

    it('parks the same bytes once: an export parked again after an answer that timed out', async () => {
      expect(await parking.park(trace, { kind: 'protobuf', body: body(100), spans: 2 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(100), spans: 2 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.parkedIds(trace)).toHaveLength(1);
      expect(await parking.usage()).toMatchObject({ spans: 2, bytes: 100 });
    });

    it("refuses an entry over a trace's spans or bytes, or over the total, and evicts nothing", async () => {
      expect(await parking.park(trace, { kind: 'protobuf', body: body(600), spans: 8 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 3 }, limits)).toEqual({ kind: 'full', limit: 'trace_spans' });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(500), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'trace_bytes' });
      expect(await parking.park(other, { kind: 'protobuf', body: body(800), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.park(other, { kind: 'protobuf', body: body(200), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'total_bytes' });
      expect((await parkedOf(trace)).map((entry) => entry.body.length)).toEqual([600]);
      expect((await parkedOf(other)).map((entry) => entry.body.length)).toEqual([800]);
      expect((await parking.usage()).bytes).toBe(1400);
    });

    it('answers entries parked at the same moment each as if parked one after another', async () => {
      // A busy service joins parks into one store transaction: each caller must still get its own entry's answer. Each
      // answer here is the same in any order (on a cluster parks are not joined, and concurrent ones keep no order): an
      // entry refused is over its trace's bound alone, the others fit the bound together (the exempt entry counts in
      // its trace's size too), and the total is not approached (there each park reserves before it checks).
      const roomy = { ...limits, maxTotalBytes: 10_000 };
      const outcomes = await Promise.all([
        parking.park(trace, { kind: 'protobuf', body: body(600), spans: 8 }, roomy),
        parking.park(trace, { kind: 'protobuf', body: body(600), spans: 8 }, roomy),
        parking.park(trace, { kind: 'protobuf', body: body(10), spans: 11 }, roomy),
        parking.park(other, { kind: 'protobuf', body: body(800), spans: 1 }, roomy),
        parking.park(other, { kind: 'protobuf', body: body(1100), spans: 1 }, roomy),
        parking.park(other, { kind: 'spans', body: body(150, 0x20), spans: 2, exempt: true }, roomy),
      ]);
      expect(outcomes).toEqual([
        { kind: 'parked' },
        { kind: 'parked' },
        { kind: 'full', limit: 'trace_spans' },
        { kind: 'parked' },
        { kind: 'full', limit: 'trace_bytes' },
        { kind: 'parked' },
      ]);
      expect((await parkedOf(trace)).map((entry) => entry.body.length)).toEqual([600]);
      expect((await parkedOf(other)).map((entry) => entry.body.length).sort((a, b) => a - b)).toEqual([150, 800]);
      expect(await parking.usage()).toEqual({ traces: 2, spans: 11, bytes: 1550 });
    });

    it("never refuses the control plane's own spans for a bound: a kept pipeline keeps its root", async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(900), spans: 10 }, limits);
      expect(await parking.park(trace, { kind: 'spans', body: body(700, 0x20), spans: 3, exempt: true }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.usage()).toMatchObject({ spans: 13, bytes: 1600 });
    });

    it('gives released bytes back to the budget', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(900), spans: 1 }, limits);
      expect(await parking.park(other, { kind: 'protobuf', body: body(900), spans: 1 }, limits)).toEqual({ kind: 'full', limit: 'total_bytes' });
      const [entry] = await parking.parkedIds(trace);
      await parking.release(trace, [entry.id]);
      await parking.release(trace, [entry.id]);
      expect(await parking.parkedIds(trace)).toEqual([]);
      expect(await parking.park(other, { kind: 'protobuf', body: body(900), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      expect(await parking.usage()).toMatchObject({ spans: 1, bytes: 900 });
    });

    it('counts a large export at its bytes as forwarded in every bound, however the store keeps it, and gives them back', async () => {
      // Bodies over a KiB that pack to a few dozen bytes (a store may keep them packed): the bounds count 2,000 each.
      const roomy: ParkingLimits = { ...limits, maxTraceBytes: 5000, maxTotalBytes: 7000 };
      const large = (fill: number) => body(2000, fill);
      expect(await parking.park(trace, { kind: 'protobuf', body: large(1), spans: 1 }, roomy)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'json', body: large(0x7b), spans: 1 }, roomy)).toEqual({ kind: 'parked' });
      expect(await parking.park(trace, { kind: 'protobuf', body: large(3), spans: 1 }, roomy)).toEqual({ kind: 'full', limit: 'trace_bytes' });
      expect(await parking.park(other, { kind: 'protobuf', body: large(4), spans: 1 }, roomy)).toEqual({ kind: 'parked' });
      expect(await parking.park(other, { kind: 'protobuf', body: large(5), spans: 1 }, roomy)).toEqual({ kind: 'full', limit: 'total_bytes' });
      expect(await parking.usage()).toMatchObject({ spans: 3, bytes: 6000 });
      const ids = await parking.parkedIds(trace);
      expect(ids.map((id) => id.bytes)).toEqual([2000, 2000]);
      expect(
        (await parking.parkedEntries(trace, ids)).map((entry) => [entry.bytes, entry.body.equals(entry.kind === 'json' ? large(0x7b) : large(1))]),
      ).toEqual([
        [2000, true],
        [2000, true],
      ]);
      await parking.release(trace, [ids[0].id]);
      expect(await parking.usage()).toMatchObject({ spans: 2, bytes: 4000 });
      expect(await parking.park(trace, { kind: 'protobuf', body: large(3), spans: 1 }, roomy)).toEqual({ kind: 'parked' });
    });

    it('releases and finishes an entry of no span (an export whose spans were all rejected) like any other', async () => {
      expect(await parking.park(trace, { kind: 'protobuf', body: body(40), spans: 0 }, limits)).toEqual({ kind: 'parked' });
      const ids = await parking.parkedIds(trace);
      await parking.release(
        trace,
        ids.map((id) => id.id),
      );
      await parking.finish(trace);
      expect(await parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
    });

    it('drops a trace without reading it and, once finished, has nothing left in the budget or the index', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(400), spans: 4 }, limits);
      await parking.park(trace, { kind: 'json', body: body(300, 0x7b), spans: 2 }, limits);
      await parking.drop(trace);
      await parking.finish(trace);
      expect(await parking.parkedIds(trace)).toEqual([]);
      expect(await parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
    });

    it('reads a page of entries by id, leaving out those gone meanwhile', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(10, 1), spans: 1 }, limits);
      await parking.park(trace, { kind: 'protobuf', body: body(20, 2), spans: 1 }, limits);
      const ids = await parking.parkedIds(trace);
      await parking.release(trace, [ids[0].id]);
      expect((await parking.parkedEntries(trace, ids)).map((entry) => entry.id)).toEqual([ids[1].id]);
    });

    it('answers a decided trace with its decision instead of parking, even when the total budget is full', async () => {
      expect(await parking.findDecision(trace)).toBeNull();
      expect(await parking.decide(trace, { keep: true, reason: 'failed' }, 60_000)).toEqual({ decision: { keep: true, reason: 'failed' }, changed: true });
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits)).toEqual({
        kind: 'decided',
        decision: { keep: true, reason: 'failed' },
      });
      await parking.park(other, { kind: 'protobuf', body: body(1000), spans: 1 }, limits);
      await parking.park(other, { kind: 'protobuf', body: body(490, 3), spans: 1 }, limits);
      expect(await parking.park(trace, { kind: 'protobuf', body: body(100), spans: 1 }, limits)).toEqual({
        kind: 'decided',
        decision: { keep: true, reason: 'failed' },
      });
      expect(await parking.parkedIds(trace)).toEqual([]);
    });

    it('keeps the first decision: a drop stays a drop, a keep stays a keep', async () => {
      const decided = async (decision: TraceDecision) => parking.decide(trace, decision, 60_000);
      expect(await decided({ keep: false, reason: 'outcome' })).toEqual({ decision: { keep: false, reason: 'outcome' }, changed: true });
      expect(await decided({ keep: false, reason: 'no_outcome' })).toEqual({ decision: { keep: false, reason: 'outcome' }, changed: false });
      expect(await decided({ keep: true, reason: 'no_outcome' })).toEqual({ decision: { keep: false, reason: 'outcome' }, changed: false });
      expect(await parking.decide(other, { keep: true, reason: 'failed' }, 60_000)).toMatchObject({ changed: true });
      expect(await parking.decide(other, { keep: false, reason: 'outcome' }, 60_000)).toEqual({ decision: { keep: true, reason: 'failed' }, changed: false });
    });

    it("reopens a dropped trace, never a kept one, and forgets the root's end", async () => {
      expect(await parking.reopen(trace, 300)).toBe(false);
      await parking.noteFacts(trace, { rootEnd: { status: 'success', createdAt: 1, finishedAt: 2 } }, 60_000);
      await parking.decide(trace, { keep: false, reason: 'outcome' }, 60_000);
      expect(await parking.reopen(trace, 300)).toBe(true);
      expect(await parking.findDecision(trace)).toBeNull();
      expect((await parking.readFacts(trace)).rootEnd).toBeUndefined();
      expect(await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits)).toEqual({ kind: 'parked' });
      await parking.decide(trace, { keep: true, reason: 'failed' }, 60_000);
      expect(await parking.reopen(trace, 300)).toBe(false);
      expect(await parking.findDecision(trace)).toEqual({ keep: true, reason: 'failed' });
    });

    it("collects the facts a decision reads: statuses once each, the longest queue wait, the root's end, running children", async () => {
      expect(await parking.readFacts(trace)).toEqual({ statuses: [], longestQueueMs: 0, runningChildren: [], finishedRootJobs: [] });
      await parking.noteFacts(trace, { longestQueueMs: 4000, childRunning: 502 }, 60_000);
      await parking.noteFacts(trace, { statuses: ['failed', 'success'], longestQueueMs: 1000, childRunning: 503 }, 60_000);
      await parking.noteFacts(trace, { statuses: ['failed'], whenNoOutcome: 'drop', childEnded: 502, finishedRootJobs: [7, 9] }, 60_000);
      await parking.noteFacts(trace, { rootEnd: { status: 'success', createdAt: 10, finishedAt: 20 } }, 60_000);
      expect(await parking.readFacts(trace)).toEqual({
        statuses: ['failed', 'success'],
        longestQueueMs: 4000,
        whenNoOutcome: 'drop',
        rootEnd: { status: 'success', createdAt: 10, finishedAt: 20 },
        runningChildren: [503],
        finishedRootJobs: [7, 9],
      });
      await parking.noteFacts(trace, { rootEnd: null }, 60_000);
      expect((await parking.readFacts(trace)).rootEnd).toBeUndefined();
    });

    it("keeps the statuses of a pipeline's untraced jobs under its id, each once, for as long as asked", async () => {
      expect(await parking.jobStatusesOf(700)).toEqual([]);
      await parking.notePipelineJobStatuses(700, ['failed'], 300);
      await parking.notePipelineJobStatuses(700, ['canceled', 'failed'], 300);
      await parking.notePipelineJobStatuses(701, [], 300);
      expect(await parking.jobStatusesOf(700)).toEqual(['canceled', 'failed']);
      expect(await parking.jobStatusesOf(701)).toEqual([]);
      await world.elapse(400);
      expect(await parking.jobStatusesOf(700)).toEqual([]);
    });

    it('hands a trace that is due to one caller at a time, until it is finished', async () => {
      await parking.park(trace, { kind: 'protobuf', body: body(10), spans: 1 }, limits);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
      await world.elapse(400);
      expect(await parking.claimOverdue(10, 1000)).toEqual([trace]);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
      await parking.schedule(trace, world.now() - 1);
      expect(await parking.claimOverdue(10, 1000)).toEqual([trace]);
      await parking.drop(trace);
      await parking.finish(trace);
      expect((await parking.usage()).traces).toBe(0);
      await world.elapse(1100);
      expect(await parking.claimOverdue(10, 1000)).toEqual([]);
    });
  });
}
