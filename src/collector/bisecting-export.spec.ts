import { wholeBody } from '../otlp/otlp-wire';
import fc from 'fast-check';
import { exportRequestType } from '../otlp/otlp-proto';
import { encodeRpcStatus } from '../otlp/otlp-response';
import { exportBisecting } from './bisecting-export';
import { CollectorClient, ExportResult, refusalReason } from './collector-client';
import { cutJsonResourceSpans, cutTraceRequest, joinTraceRequests } from './trace-pieces';

const TraceRequest = exportRequestType('traces');

/** An ExportTraceServiceRequest with these resources, each a list of scopes, each a list of span names. */
function protobufRequest(resources: string[][][]): Buffer {
  const message = TraceRequest.fromObject({
    resourceSpans: resources.map((scopes, r) => ({
      resource: { attributes: [{ key: 'resource', value: { intValue: r } }] },
      schemaUrl: `schema-${r}`,
      scopeSpans: scopes.map((names, s) => ({
        scope: { name: `scope-${r}-${s}` },
        spans: names.map((name) => ({ traceId: Buffer.alloc(16, 1), spanId: Buffer.alloc(8, 2), name })),
      })),
    })),
  });
  return Buffer.from(TraceRequest.encode(message).finish());
}

/** Each span of a request, with the resource and scope it sits in, as a collector decodes it. */
function spansOf(body: Buffer): string[] {
  const request = TraceRequest.toObject(TraceRequest.decode(body), { longs: Number }) as {
    resourceSpans?: Array<{
      schemaUrl: string;
      resource: { attributes: Array<{ value: { intValue: number } }> };
      scopeSpans?: Array<{ scope: { name: string }; spans?: Array<{ name: string }> }>;
    }>;
  };
  return (request.resourceSpans ?? []).flatMap((resource) =>
    (resource.scopeSpans ?? []).flatMap((scope) =>
      (scope.spans ?? []).map((span) => `${resource.schemaUrl}/${resource.resource.attributes[0].value.intValue}/${scope.scope.name}/${span.name}`),
    ),
  );
}

const accepted: ExportResult = { kind: 'accepted', status: 200, partialSuccess: undefined };
const answer = (status: number, message: string): ExportResult =>
  ({
    kind: status === 413 ? 'too_large' : status === 400 ? 'bad_data' : 'refused',
    status,
    contentType: 'application/x-protobuf',
    body: encodeRpcStatus('protobuf', { code: 3, message }),
  }) as ExportResult;

/** A collector deciding each request from the spans in it; it keeps what it answered 2xx. */
function collectorOf(decide: (spans: string[]) => ExportResult) {
  const delivered: string[] = [];
  let requests = 0;
  const collector: Pick<CollectorClient, 'export'> = {
    async export(_signal, _encoding, body) {
      requests += 1;
      const spans = spansOf(wholeBody(body));
      const result = decide(spans);
      if (result.kind === 'accepted') delivered.push(...spans);
      return result;
    },
  };
  return { collector, delivered, requests: () => requests };
}

const PROTOBUF = { join: (pieces: readonly Buffer[]) => joinTraceRequests('protobuf', pieces), cut: (piece: Buffer) => cutTraceRequest('protobuf', piece) };

describe('traces cut one span a piece', () => {
  it('keeps every span with its own resource and scope, and joins the pieces back into the same spans', () => {
    const request = protobufRequest([[['a', 'b'], ['c']], [['d']]]);
    const pieces = cutTraceRequest('protobuf', request);
    expect(pieces.map(spansOf)).toEqual([['schema-0/0/scope-0-0/a'], ['schema-0/0/scope-0-0/b'], ['schema-0/0/scope-0-1/c'], ['schema-1/1/scope-1-0/d']]);
    expect(spansOf(joinTraceRequests('protobuf', pieces))).toEqual(spansOf(request));
  });

  it('cannot cut one span, nor what does not decode', () => {
    expect(cutTraceRequest('protobuf', protobufRequest([[['alone']]]))).toEqual([]);
    expect(cutTraceRequest('protobuf', Buffer.from([0x0a, 0xff]))).toEqual([]);
    expect(cutTraceRequest('json', Buffer.from('{"resourceSpans":'))).toEqual([]);
    expect(cutJsonResourceSpans('{"resource":{},"scopeSpans":[{"spans":[{"name":"a"}]}]}')).toEqual([]);
  });

  it('cuts OTLP/JSON, requests and joined ResourceSpans alike', () => {
    const resource = (names: string[]) => ({ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans: names.map((name) => ({ name })) }] });
    const request = Buffer.from(JSON.stringify({ resourceSpans: [resource(['a', 'b']), resource(['c'])] }));
    const pieces = cutTraceRequest('json', request);
    expect(pieces.map((piece) => JSON.parse(piece.toString()))).toEqual([
      { resourceSpans: [resource(['a'])] },
      { resourceSpans: [resource(['b'])] },
      { resourceSpans: [resource(['c'])] },
    ]);
    expect(JSON.parse(joinTraceRequests('json', pieces).toString())).toEqual({ resourceSpans: [resource(['a']), resource(['b']), resource(['c'])] });
    expect(cutJsonResourceSpans([resource(['a', 'b']), resource(['c'])].map((one) => JSON.stringify(one)).join(',')).map((piece) => JSON.parse(piece))).toEqual(
      [resource(['a']), resource(['b']), resource(['c'])],
    );
  });
});

describe('exportBisecting (issue 56 item 7)', () => {
  const parts = (count: number, spansEach = 1) =>
    Array.from({ length: count }, (_, p) => protobufRequest([[Array.from({ length: spansEach }, (_, s) => `p${p}s${s}`)]]));
  const names = (bodies: Buffer[]) => bodies.flatMap(spansOf).sort();

  it('delivers every span of parts refused together for their size, halving down to requests that fit', async () => {
    const { collector, delivered } = collectorOf((spans) => (spans.length > 3 ? answer(413, 'request too large') : accepted));
    const sent = parts(5, 2).concat(parts(1, 7));
    const result = await exportBisecting(collector, 'traces', 'protobuf', sent, PROTOBUF);
    expect(delivered.sort()).toEqual(names(sent));
    expect(result.parts.every((part) => part.settled)).toBe(true);
    expect(result.dropped).toEqual([]);
    expect(result.stoppedBy).toBeUndefined();
  });

  it('gives up only the spans the collector cannot decode, each with its words, whichever parts they are in', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 4 }), fc.array(fc.nat(), { maxLength: 3 }), async (count, spansEach, bad) => {
        const sent = parts(count, spansEach);
        const badNames = new Set(bad.map((n) => `p${n % count}s${n % spansEach}`));
        const { collector, delivered } = collectorOf((spans) => {
          const undecodable = spans.filter((span) => badNames.has(span.split('/').pop()!));
          return undecodable.length > 0 ? answer(400, `cannot decode ${undecodable.join(' ')}`) : accepted;
        });
        const result = await exportBisecting(collector, 'traces', 'protobuf', sent, PROTOBUF);
        expect(delivered.sort()).toEqual(names(sent).filter((name) => !badNames.has(name.split('/').pop()!)));
        expect(result.dropped.map((dropped) => dropped.reason).sort()).toEqual(
          [...badNames].map((name) => `cannot decode schema-0/0/scope-0-0/${name}`).sort(),
        );
        expect(result.parts.every((part) => part.settled)).toBe(true);
      }),
      { numRuns: 50 },
    );
  });

  it.each([500, 401, 403, 404])('stops at a %i and settles nothing it did not deliver, so the caller keeps it', async (status) => {
    const { collector, delivered, requests } = collectorOf(() => answer(status, 'not now'));
    const result = await exportBisecting(collector, 'traces', 'protobuf', parts(4), PROTOBUF);
    expect(delivered).toEqual([]);
    expect(requests()).toBe(1);
    expect(result.stoppedBy).toMatchObject({ kind: 'refused', status });
    expect(result.parts.map((part) => [part.settled, part.touched])).toEqual(Array(4).fill([false, false]));
  });

  it('stops where the collector starts failing halfway, saying what of each part is left', async () => {
    let calls = 0;
    const { collector, delivered } = collectorOf((spans) =>
      ++calls === 4 ? { kind: 'retry', happened: 'timeout' } : spans.length > 2 ? answer(413, 'big') : accepted,
    );
    const sent = parts(1, 6);
    const result = await exportBisecting(collector, 'traces', 'protobuf', sent, PROTOBUF);
    // 6 refused, 3 refused, [0,1] taken, [2] timed out: four spans left of the one part.
    expect(delivered.length).toBe(2);
    expect(result.stoppedBy).toEqual({ kind: 'retry', happened: 'timeout' });
    expect(result.parts[0]).toMatchObject({ settled: false, touched: true });
    expect(names([...result.parts[0].rest])).toEqual(names(sent).filter((name) => !delivered.includes(name)));
  });

  it('starts no request after its deadline', async () => {
    const { collector, requests } = collectorOf(() => accepted);
    const result = await exportBisecting(collector, 'traces', 'protobuf', parts(2), PROTOBUF, { deadline: performance.now() - 1 });
    expect(requests()).toBe(0);
    expect(result.stoppedBy).toBe('deadline');
  });
});

describe('refusalReason', () => {
  it("reads the collector's Status message in either encoding, else its text, on one line and short", () => {
    expect(refusalReason({ status: 400, contentType: 'application/x-protobuf', body: encodeRpcStatus('protobuf', { code: 3, message: 'bad span' }) })).toBe(
      'bad span',
    );
    expect(refusalReason({ status: 400, contentType: 'application/json', body: Buffer.from('{"code":3,"message":"bad\\nline"}') })).toBe('bad line');
    expect(refusalReason({ status: 413, contentType: 'text/html', body: Buffer.from('<h1>413 Request Entity Too Large</h1>') })).toBe(
      '<h1>413 Request Entity Too Large</h1>',
    );
    expect(refusalReason({ status: 413, contentType: undefined, body: Buffer.alloc(0) })).toBe('HTTP 413');
    expect(refusalReason({ status: 400, contentType: undefined, body: Buffer.alloc(2000, 'x') })).toHaveLength(301);
  });
});
