import { bundled, OutboxEntry, OutboxStore } from '../../src/outbox/outbox';
import { StoreWorld } from './store-world';

/** One behaviour, every outbox store (SPEC §10 "Delivery"): each key once, bounded, claimed by one deliverer at a time. */
export function behavesAsAnOutboxStore(world: StoreWorld) {
  describe(`${world.name} outbox store`, () => {
    let outbox: OutboxStore;
    beforeEach(async () => ({ outbox } = await world.open()));
    afterEach(() => world.close());

    const outboxSpan = (key: string): OutboxEntry => ({ key, body: `{"span":"${key}"}`, enqueuedAt: world.now() });
    const limits = { maxSpans: 3, rememberMs: 60_000 };

    it('enqueues each span id once, refuses what does not fit, and says which was which', async () => {
      expect(await outbox.enqueue([outboxSpan('01'), outboxSpan('02'), outboxSpan('01')], limits)).toEqual({ queued: 2, duplicates: 1, refused: 0 });
      expect(await outbox.enqueue([outboxSpan('02'), outboxSpan('03'), outboxSpan('04')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 1 });
      expect((await outbox.depth()).spans).toBe(3);
      // Refused is not remembered: once there is room, the same span is taken.
      const claimed = await outbox.claim(10, 60_000);
      await outbox.acknowledge(claimed.map((span) => span.key));
      expect(await outbox.enqueue([outboxSpan('04'), outboxSpan('01')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 0 });
    });

    it("keeps each span once and the outbox's bound across a large batch (a kept pipeline's spans, released at once)", async () => {
      const many = (from: number, count: number) => Array.from({ length: count }, (_, i) => outboxSpan((from + i).toString(16).padStart(3, '0')));
      const bound = { maxSpans: 50, rememberMs: 60_000 };
      expect(await outbox.enqueue(many(0, 10), bound)).toEqual({ queued: 10, duplicates: 0, refused: 0 });
      // 10 seen already, then 60 new of which 40 fit: the bound holds however the batch is written.
      expect(await outbox.enqueue([...many(100, 30), ...many(0, 10), ...many(200, 30)], bound)).toEqual({ queued: 40, duplicates: 10, refused: 20 });
      expect((await outbox.depth()).spans).toBe(50);
      // Taken in the batch's order until the bound: what was refused is the end of it.
      const keys = (await outbox.claim(100, 60_000)).map((span) => span.key).sort();
      expect(keys).toEqual([...many(0, 10), ...many(100, 30), ...many(200, 10)].map((span) => span.key).sort());
    });

    it('hands a body back as the bytes it was enqueued as, whatever its characters', async () => {
      // A job named in any language, with an emoji and an escaped quote: the trace shows it as GitLab sent it.
      const body = '{"name":"déploiement 🚀 日本語 \\"prod\\""}';
      await outbox.enqueue([{ key: '0c', body, enqueuedAt: world.now() }], limits);
      const [claimed] = await outbox.claim(10, 300);
      expect(claimed.body.equals(Buffer.from(body))).toBe(true);
    });

    it('hands each due span to one claimer only until its lease runs out, and forgets it once acknowledged', async () => {
      await outbox.enqueue([outboxSpan('0a'), outboxSpan('0b')], limits);
      const first = await outbox.claim(10, 300);
      expect(first.map((span) => [span.key, span.body.toString(), span.attempts, span.leaseRanOut])).toEqual([
        ['0a', '{"span":"0a"}', 0, false],
        ['0b', '{"span":"0b"}', 0, false],
      ]);
      expect(await outbox.claim(10, 300)).toEqual([]);
      await outbox.acknowledge(['0a']);
      await world.elapse(400);
      // The claimer of 0b died: its lease ran out and the span is due again, said to be (it may have been sent).
      expect((await outbox.claim(10, 300)).map((span) => [span.key, span.leaseRanOut])).toEqual([['0b', true]]);
      expect(await outbox.depth()).toEqual({ spans: 1, oldestEnqueuedAt: expect.any(Number) });
    });

    it('says a lease ran out only when the claimer never answered: not after a retry or a put-back', async () => {
      await outbox.enqueue([outboxSpan('1a'), outboxSpan('1b')], limits);
      await outbox.claim(10, 300);
      await outbox.retry(['1a'], 0);
      await outbox.putBack(['1b']);
      const again = await outbox.claim(10, 300);
      expect(again.map((span) => [span.key, span.attempts, span.leaseRanOut]).sort()).toEqual([
        ['1a', 1, false],
        ['1b', 0, false],
      ]);
      await world.elapse(400);
      expect((await outbox.claim(10, 300)).map((span) => [span.key, span.leaseRanOut]).sort()).toEqual([
        ['1a', true],
        ['1b', true],
      ]);
      // Delivered and gone: enqueued again later (its key forgotten), it starts with no lease behind it.
      await outbox.acknowledge(['1a', '1b']);
      await outbox.enqueue([outboxSpan('1c')], limits);
      expect((await outbox.claim(10, 300)).map((span) => [span.key, span.leaseRanOut])).toEqual([['1c', false]]);
    });

    it('puts a span whose delivery failed back for later, counting the attempt', async () => {
      await outbox.enqueue([outboxSpan('0c')], limits);
      const [claimed] = await outbox.claim(10, 60_000);
      await outbox.retry([claimed.key], 200);
      expect(await outbox.claim(10, 60_000)).toEqual([]);
      await world.elapse(300);
      expect((await outbox.claim(10, 60_000)).map((span) => [span.key, span.attempts])).toEqual([['0c', 1]]);
      // Acknowledged meanwhile by another replica: a late retry does not bring it back.
      await outbox.acknowledge(['0c']);
      await outbox.retry(['0c'], 0);
      expect(await outbox.claim(10, 60_000)).toEqual([]);
      expect(await outbox.depth()).toEqual({ spans: 0 });
    });

    it('puts an entry back due at once without counting an attempt (a round that delivered part of it)', async () => {
      await outbox.enqueue([outboxSpan('parked:0d'), outboxSpan('0e')], limits);
      const claimed = await outbox.claim(10, 60_000);
      expect(claimed.map((entry) => entry.key).sort()).toEqual(['0e', 'parked:0d']);
      await outbox.putBack(['parked:0d']);
      expect((await outbox.claim(10, 60_000)).map((entry) => [entry.key, entry.attempts])).toEqual([['parked:0d', 0]]);
      // Acknowledged meanwhile: putting it back does not bring it back.
      await outbox.acknowledge(['parked:0d']);
      await outbox.putBack(['parked:0d']);
      expect(await outbox.claim(10, 60_000)).toEqual([]);
    });

    describe("a bundle of spans (a pickup batch's queue waits)", () => {
      const bundle = (...keys: string[]) => bundled(keys.map(outboxSpan))[0];
      const bound = { maxSpans: 6, rememberMs: 60_000 };

      it('is one entry whose spans count one by one in the bound, the depth and each claim', async () => {
        expect(await outbox.enqueue([bundle('21', '22', '23'), outboxSpan('24')], bound)).toEqual({ queued: 4, duplicates: 0, refused: 0 });
        expect((await outbox.depth()).spans).toBe(4);
        // Three more do not fit beside the four: the bundle is not queued whole, its spans go one by one until full.
        expect(await outbox.enqueue([bundle('25', '26', '27')], bound)).toEqual({ queued: 2, duplicates: 0, refused: 1 });
        expect((await outbox.depth()).spans).toBe(6);
        // A claim of three spans takes the bundle alone; its body is its spans' ResourceSpans, joined as an export joins them.
        const [first, ...none] = await outbox.claim(3, 60_000);
        expect(none).toEqual([]);
        expect(first.body.toString()).toBe('{"span":"21"},{"span":"22"},{"span":"23"}');
        expect((await outbox.claim(3, 60_000)).map((entry) => entry.key)).toEqual(['24', '25', '26']);
        // Delivered, its three spans leave the bound: three new ones fit again.
        await outbox.acknowledge([first.key]);
        expect((await outbox.depth()).spans).toBe(3);
        expect(await outbox.enqueue([bundle('31', '32', '33')], bound)).toEqual({ queued: 3, duplicates: 0, refused: 0 });
        expect((await outbox.depth()).spans).toBe(6);
      });

      it('keeps each of its spans once: a span seen before splits it, and the rest are queued on their own', async () => {
        await outbox.enqueue([outboxSpan('42')], bound);
        expect(await outbox.enqueue([bundle('41', '42', '43')], bound)).toEqual({ queued: 2, duplicates: 1, refused: 0 });
        // Its spans are remembered as any span is: sent again, alone or bundled, they are copies.
        expect(await outbox.enqueue([outboxSpan('41'), bundle('43', '44')], bound)).toEqual({ queued: 1, duplicates: 2, refused: 0 });
        const claimed = await outbox.claim(10, 60_000);
        expect(claimed.map((entry) => entry.body.toString()).sort()).toEqual(['{"span":"41"}', '{"span":"42"}', '{"span":"43"}', '{"span":"44"}']);
        // A bundle queued whole is remembered by its spans too.
        await outbox.acknowledge(claimed.map((entry) => entry.key));
        expect(await outbox.enqueue([bundle('45', '46')], bound)).toEqual({ queued: 2, duplicates: 0, refused: 0 });
        expect(await outbox.enqueue([outboxSpan('46'), bundle('45', '47')], bound)).toEqual({ queued: 1, duplicates: 2, refused: 0 });
      });

      it('is leased, retried and acknowledged as one entry, and leaves nothing counted once delivered', async () => {
        await outbox.enqueue([bundle('51', '52'), bundle('53', '54')], bound);
        const [one] = await outbox.claim(2, 300);
        await outbox.retry([one.key], 0);
        expect((await outbox.claim(10, 300)).map((entry) => [entry.body.toString().length > 0, entry.attempts]).sort()).toEqual([
          [true, 0],
          [true, 1],
        ]);
        await world.elapse(400);
        const again = await outbox.claim(10, 300);
        expect(again.map((entry) => entry.leaseRanOut)).toEqual([true, true]);
        // Acknowledged twice (a replica whose lease ran out, then the one that claimed it again): counted off once.
        await outbox.acknowledge(again.map((entry) => entry.key));
        await outbox.acknowledge(again.map((entry) => entry.key));
        expect(await outbox.depth()).toEqual({ spans: 0 });
        expect(await outbox.enqueue([bundle('55', '56', '57'), bundle('58', '59', '5a')], bound)).toEqual({ queued: 6, duplicates: 0, refused: 0 });
      });
    });
  });
}
