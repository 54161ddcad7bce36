import { WireBody, wholeBody } from '../otlp/otlp-wire';
import { exportRequestType } from '../otlp/otlp-proto';
import { CoalescingCollectorClient, countTraceSpans } from './coalescing-collector-client';
import { CollectorClient, ExportResult } from './collector-client';

const TraceRequest = exportRequestType('traces');

/** An ExportTraceServiceRequest of `spans` spans named after `job`, encoded as an SDK encodes it. */
function traces(job: string, spans: number): Buffer {
  const spanList = Array.from({ length: spans }, (_, i) => ({
    traceId: Buffer.alloc(16, 1),
    spanId: Buffer.from(`${job}-${i}`.padEnd(8, '.').slice(0, 8)),
    name: `${job} span ${i}`,
  }));
  const message = TraceRequest.fromObject({
    resourceSpans: [{ resource: { attributes: [{ key: 'job', value: { stringValue: job } }] }, scopeSpans: [{ scope: { name: 'test' }, spans: spanList }] }],
  });
  return Buffer.from(TraceRequest.encode(message).finish());
}

/** Span names per request the collector received, decoded as a collector decodes them. */
function spanNames(body: Buffer): string[] {
  const request = TraceRequest.toObject(TraceRequest.decode(body)) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ name: string }> }> }> };
  return request.resourceSpans.flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans.map((span) => span.name)));
}

/** A collector that holds every request until the test answers it. */
class HeldCollector implements CollectorClient {
  readonly requests: Array<{ signal: string; encoding: string; body: Buffer; answer: (result: ExportResult) => void }> = [];
  /** `raw`: keeps the very bytes it was handed, as a socket still writing them does; by default a copy. */
  constructor(private readonly raw = false) {}
  export(signal: 'traces' | 'metrics' | 'logs', encoding: 'protobuf' | 'json', given: Buffer | WireBody): Promise<ExportResult> {
    const body = this.raw ? wholeBody(given) : Buffer.from(wholeBody(given));
    return new Promise((answer) => this.requests.push({ signal, encoding, body, answer }));
  }
  async reachable(): Promise<boolean> {
    return true;
  }
  async close(): Promise<void> {}
}

const accepted = (rejectedItems?: number): ExportResult => ({
  kind: 'accepted',
  status: 200,
  partialSuccess: rejectedItems === undefined ? undefined : { rejectedItems, errorMessage: 'over the collector limit' },
});
const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('CoalescingCollectorClient (issue 29)', () => {
  let collector: HeldCollector;
  let client: CoalescingCollectorClient;
  const observed = { requests: [] as number[], lingers: [] as number[], splits: [] as number[], warnings: [] as string[] };

  beforeEach(() => {
    collector = new HeldCollector();
    observed.requests = [];
    observed.lingers = [];
    observed.splits = [];
    observed.warnings = [];
    client = new CoalescingCollectorClient(
      collector,
      { lingerMs: 60_000, maxBytes: 64 * 1024 },
      {
        requestSent: (_signal, exports) => void observed.requests.push(exports),
        lingered: (_signal, seconds) => void observed.lingers.push(seconds),
        splitAfterRefusal: (_signal, exports) => void observed.splits.push(exports),
      },
      { warn: (_fields, message) => void observed.warnings.push(message) },
    );
  });

  it('sends a lone export at once, and joins the exports that arrive while a request is out into one valid request', async () => {
    const first = client.export('traces', 'protobuf', traces('a', 2));
    await turn();
    expect(collector.requests).toHaveLength(1);
    const joined = ['b', 'c', 'd'].map((job) => client.export('traces', 'protobuf', traces(job, 3)));
    await turn();
    // Held: a request is out, and the linger (a minute here) has not run out.
    expect(collector.requests).toHaveLength(1);
    collector.requests[0].answer(accepted());
    await expect(first).resolves.toEqual(accepted());
    await turn();
    expect(collector.requests).toHaveLength(2);
    expect(spanNames(collector.requests[1].body)).toEqual(['b', 'c', 'd'].flatMap((job) => [0, 1, 2].map((i) => `${job} span ${i}`)));
    collector.requests[1].answer(accepted());
    await expect(Promise.all(joined)).resolves.toEqual([accepted(), accepted(), accepted()]);
    expect(observed.requests).toEqual([1, 3]);
    expect(observed.lingers).toHaveLength(4);
  });

  it('never writes a request over one the collector has not answered 2xx: its bytes may still be on their way', async () => {
    const raw = new HeldCollector(true);
    const reusing = new CoalescingCollectorClient(raw, { lingerMs: 60_000, maxBytes: 64 * 1024 });
    const names = (i: number) => spanNames(raw.requests[i].body);
    void reusing.export('traces', 'protobuf', traces('hold', 1));
    await turn();
    const first = ['a', 'b'].map((job) => reusing.export('traces', 'protobuf', traces(job, 2)));
    raw.requests[0].answer(accepted());
    await turn();
    // a and b are out; c and d gather meanwhile, and leave in a request of their own once the collector answers.
    const second = ['c', 'd'].map((job) => reusing.export('traces', 'protobuf', traces(job, 2)));
    raw.requests[1].answer({ kind: 'retry', happened: 503 });
    await Promise.all(first);
    await turn();
    expect(names(2)).toEqual(['c span 0', 'c span 1', 'd span 0', 'd span 1']);
    raw.requests[2].answer(accepted());
    await Promise.all(second);
    // Answered 2xx: its buffer may carry the next request, as e and f's now do. The 503's buffer is left alone.
    const third = ['e', 'f'].map((job) => reusing.export('traces', 'protobuf', traces(job, 1)));
    await turn();
    expect(names(3)).toEqual(['e span 0', 'f span 0']);
    expect(names(1)).toEqual(['a span 0', 'a span 1', 'b span 0', 'b span 1']);
    raw.requests[3].answer(accepted());
    await Promise.all(third);
  });

  it('answers every export of a request the collector asked to retry, or refused for no fault of what it carried, exactly as the collector answered', async () => {
    const retry: ExportResult = { kind: 'retry', happened: 503, retryAfterSeconds: 2 };
    const tooMany: ExportResult = { kind: 'retry', happened: 429, retryAfterSeconds: 1 };
    const refused: ExportResult = { kind: 'refused', status: 501, contentType: undefined, body: Buffer.from('not implemented') };
    for (const answer of [retry, tooMany, refused, { kind: 'retry', happened: 'unreachable' } as ExportResult]) {
      collector.requests.length = 0;
      const holder = client.export('traces', 'protobuf', traces('hold', 1));
      await turn();
      const batch = ['a', 'b'].map((job) => client.export('traces', 'protobuf', traces(job, 1)));
      collector.requests[0].answer(accepted());
      await holder;
      await turn();
      collector.requests[1].answer(answer);
      await expect(Promise.all(batch)).resolves.toEqual([answer, answer]);
    }
  });

  it('sends each export of a joined request the collector refused whole (4xx) again alone, and answers each from its own request', async () => {
    const badRequest = (why: string): ExportResult => ({ kind: 'bad_data', status: 400, contentType: 'application/x-protobuf', body: Buffer.from(why) });
    const holder = client.export('traces', 'protobuf', traces('hold', 1));
    await turn();
    const batch = ['good', 'bad', 'fine'].map((job) => client.export('traces', 'protobuf', traces(job, 2)));
    collector.requests[0].answer(accepted());
    await holder;
    await turn();
    expect(spanNames(collector.requests[1].body)).toHaveLength(6);
    // The collector could not decode one export of the three, and refuses the request carrying them all.
    collector.requests[1].answer(badRequest('joined'));
    await turn();
    const alone = collector.requests.slice(2);
    expect(alone.map((request) => spanNames(request.body))).toEqual(['good', 'bad', 'fine'].map((job) => [`${job} span 0`, `${job} span 1`]));
    alone[0].answer(accepted());
    alone[1].answer(badRequest('bad alone'));
    alone[2].answer(accepted(1));
    await expect(Promise.all(batch)).resolves.toEqual([accepted(), badRequest('bad alone'), accepted(1)]);
    expect(observed.splits).toEqual([3]);
    expect(observed.warnings).toEqual(['the collector refused a joined request of 3 exports with 400: sent again one export per request, 1 refused alone']);
  });

  it('passes a 4xx to an export that went alone, without sending it again', async () => {
    const refused: ExportResult = { kind: 'bad_data', status: 400, contentType: undefined, body: Buffer.from('bad') };
    const lone = client.export('traces', 'protobuf', traces('alone', 1));
    await turn();
    collector.requests[0].answer(refused);
    await expect(lone).resolves.toEqual(refused);
    await turn();
    expect(collector.requests).toHaveLength(1);
    expect(observed.splits).toEqual([]);
  });

  it("attributes the collector's partial success exactly when it can, and otherwise tells each export at most its own spans were rejected", async () => {
    const batchOf = async (answer: ExportResult, ...sizes: number[]) => {
      collector.requests.length = 0;
      const holder = client.export('traces', 'protobuf', traces('hold', 1));
      await turn();
      const batch = sizes.map((size, i) => client.export('traces', 'protobuf', traces(`job${i}`, size)));
      collector.requests[0].answer(accepted());
      await holder;
      await turn();
      collector.requests[1].answer(answer);
      return (await Promise.all(batch)).map((result) => (result.kind === 'accepted' ? (result.partialSuccess?.rejectedItems ?? 0) : result.kind));
    };
    // Every span rejected: exactly each export's own.
    expect(await batchOf(accepted(9), 2, 3, 4)).toEqual([2, 3, 4]);
    // Three of nine: whose is unknown, so none of them is told all of its spans arrived.
    expect(await batchOf(accepted(3), 2, 3, 4)).toEqual([2, 3, 3]);
    expect(await batchOf(accepted(0), 2, 3)).toEqual([0, 0]);
  });

  it('sends a batch when the byte budget would be passed, and sends an export over the budget alone', async () => {
    const small = new CoalescingCollectorClient(collector, { lingerMs: 60_000, maxBytes: traces('x', 10).length * 2 + 1 });
    const holder = small.export('traces', 'protobuf', traces('hold', 1));
    await turn();
    const exports = ['a', 'b', 'c'].map((job) => small.export('traces', 'protobuf', traces(job, 10)));
    const large = small.export('traces', 'protobuf', traces('large', 40));
    await turn();
    // a+b filled the budget and left when c came; the large one went alone; c waits for the collector.
    expect(collector.requests.map((request) => spanNames(request.body).length)).toEqual([1, 20, 40]);
    for (const request of collector.requests) request.answer(accepted());
    await Promise.all([holder, large, ...exports.slice(0, 2)]);
    await turn();
    expect(collector.requests.map((request) => spanNames(request.body).length)).toEqual([1, 20, 40, 10]);
    collector.requests[3].answer(accepted());
    await expect(exports[2]).resolves.toEqual(accepted());
  });

  it('sends JSON, metrics and logs alone, as they came', async () => {
    const json = Buffer.from('{"resourceSpans":[]}');
    const holder = client.export('traces', 'protobuf', traces('hold', 1));
    await turn();
    void client.export('traces', 'json', json);
    void client.export('metrics', 'protobuf', Buffer.alloc(3));
    void client.export('logs', 'protobuf', Buffer.alloc(4));
    expect(collector.requests.map(({ signal, encoding, body }) => [signal, encoding, body.length])).toEqual([
      ['traces', 'protobuf', traces('hold', 1).length],
      ['traces', 'json', json.length],
      ['metrics', 'protobuf', 3],
      ['logs', 'protobuf', 4],
    ]);
    for (const request of collector.requests) request.answer(accepted());
    await holder;
  });

  it('sends what waits when it closes, and answers it before the upstream closes', async () => {
    const holder = client.export('traces', 'protobuf', traces('hold', 1));
    await turn();
    const waiting = client.export('traces', 'protobuf', traces('a', 1));
    const closed = client.close();
    await turn();
    expect(collector.requests).toHaveLength(2);
    for (const request of collector.requests) request.answer(accepted());
    await closed;
    await expect(Promise.all([holder, waiting])).resolves.toEqual([accepted(), accepted()]);
  });

  it('counts the spans of an OTLP traces request', () => {
    expect(countTraceSpans(Buffer.concat([traces('a', 3), traces('b', 0), traces('c', 5)]))).toBe(8);
    expect(countTraceSpans(Buffer.alloc(0))).toBe(0);
  });
});
