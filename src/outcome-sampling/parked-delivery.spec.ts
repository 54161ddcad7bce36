import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { MAX_DELIVERY_BYTES, nextPage, parkedSpansAsEntries, sendPage } from './parked-delivery';
import { ParkedEntry, parkedEntryId, ParkedKind } from './parking/parking';

const entry = (digest: string, kind: ParkedKind, bytes: number, body = Buffer.alloc(bytes, 0x0a)): ParkedEntry => ({
  ...parkedEntryId(digest, kind, 1, bytes),
  body,
});

describe('a kept trace delivered a page at a time (SPEC §11)', () => {
  it('moves the control-plane spans first, then joins protobuf exports up to the request bound, then JSON one by one', () => {
    const ids = [entry('a', 'protobuf', 3 * 1024 * 1024), entry('b', 'json', 10), entry('c', 'protobuf', 2 * 1024 * 1024), entry('d', 'spans', 50)];
    expect(nextPage(ids).map((id) => id.id)).toEqual([ids[3].id]);
    const withoutSpans = ids.filter((id) => id.kind !== 'spans');
    const page = nextPage(withoutSpans);
    expect(page.map((id) => id.id)).toEqual([ids[0].id]);
    expect(page.reduce((sum, id) => sum + id.bytes, 0)).toBeLessThanOrEqual(MAX_DELIVERY_BYTES);
    expect(nextPage([ids[1]]).map((id) => id.id)).toEqual([ids[1].id]);
  });

  it("keeps each control-plane span once, a pipeline span's older version before its newer", () => {
    const lines = (text: string) => entry(text.slice(0, 4), 'spans', text.length, Buffer.from(text));
    const parked = [lines(`00aa@200 {"v":2}\n00bb {"job":1}`), lines(`00aa@100 {"v":1}\n00bb {"job":1}`)];
    expect(parkedSpansAsEntries(parked, 'failed', 1).map((span) => span.key)).toEqual(['00aa@100', '00aa@200', '00bb']);
  });

  it('bisects a joined page the collector refuses whole, so one bad export costs only itself', async () => {
    // Empty ResourceSpans (field 1, length 0): one, two, three of them.
    const empties = (n: number) => Buffer.concat(Array.from({ length: n }, () => Buffer.from([0x0a, 0x00])));
    const good = [entry('g1', 'protobuf', 2, empties(1)), entry('g2', 'protobuf', 4, empties(2))];
    const bad = entry('b1', 'protobuf', 6, empties(3));
    const sent: number[] = [];
    const collector: Pick<CollectorClient, 'export'> = {
      async export(_signal, _encoding, body): Promise<ExportResult> {
        sent.push(body.length);
        // As the Collector does: a body holding the export it cannot decode (here: the one of three) is refused whole.
        return body.length === 2 || body.length === 4
          ? { kind: 'accepted', status: 200, partialSuccess: undefined }
          : { kind: 'bad_data', status: 400, contentType: undefined, body: Buffer.alloc(0) };
      },
    };
    const result = await sendPage(collector, 'protobuf', [good[0], bad, good[1]], 'failed');
    expect(result.keptBy).toBeUndefined();
    expect(result.done.map((done) => done.id).sort()).toEqual([good[0].id, bad.id, good[1].id].sort());
    expect(result.dropped.map((dropped) => [dropped.part, dropped.status])).toEqual([[1, 400]]);
    // The joined request, then halves: [g1, b1] refused, g1 alone taken, b1 alone refused, g2 alone taken.
    expect(sent).toEqual([12, 8, 2, 6, 4]);
  });
});
