import { encodeBytesField } from '../otlp/otlp-wire';
import { ParkedEntry } from '../parking/parking';
import { deliveryBatches } from './outcome-sampling.service';

const entry = (id: string, kind: ParkedEntry['kind'], body: string | Buffer, spans = 1): ParkedEntry => ({
  id,
  kind,
  body: Buffer.isBuffer(body) ? body : Buffer.from(body),
  spans,
});

describe("a kept pipeline's parked entries as upstream requests (SPEC §11)", () => {
  it('joins protobuf exports into one request, sends JSON exports alone, and the control plane’s spans together', () => {
    const batches = deliveryBatches([
      entry('1:protobuf:2', 'protobuf', Buffer.from([0x0a, 0x00])),
      entry('2:spans:1', 'spans', 'a1 {"span":"a"}'),
      entry('3:json:1', 'json', '{"resourceSpans":[]}'),
      entry('4:protobuf:1', 'protobuf', Buffer.from([0x0a, 0x02, 0x12, 0x00])),
    ]);
    expect(batches.map((batch) => [batch.encoding, batch.entries.map((one) => one.id)])).toEqual([
      ['json', ['3:json:1']],
      ['protobuf', ['1:protobuf:2', '4:protobuf:1']],
      ['json', ['2:spans:1']],
    ]);
    // Concatenated as stored: one ExportTraceServiceRequest with both ResourceSpans.
    expect([...batches[1].body('failed')]).toEqual([0x0a, 0x00, 0x0a, 0x02, 0x12, 0x00]);
    expect(batches[2].body('failed').toString()).toBe('{"resourceSpans":[{"span":"a"}]}');
  });

  it('sends each control-plane span once, the first parked of its key, as the outbox would', () => {
    const [batch] = deliveryBatches([entry('1:spans:2', 'spans', 'job1 {"v":1}\nqueue1 {"q":1}', 2), entry('2:spans:1', 'spans', 'job1 {"v":2}')]);
    expect(batch.body('failed').toString()).toBe('{"resourceSpans":[{"v":1},{"q":1}]}');
  });

  it('keeps each protobuf request within its size bound', () => {
    // A ResourceSpans of 3 MiB (its scope_spans skipped by length when the reason is settled).
    const big = encodeBytesField(1, encodeBytesField(2, Buffer.alloc(3 * 1024 * 1024)));
    const batches = deliveryBatches([entry('1:protobuf:1', 'protobuf', big), entry('2:protobuf:1', 'protobuf', Buffer.from(big))]);
    expect(batches.map((batch) => batch.entries.map((one) => one.id))).toEqual([['1:protobuf:1'], ['2:protobuf:1']]);
  });
});
