import { encodingOf, signalOfPath } from './otlp-encoding';
import { exportRequestType } from './otlp-proto';
import { decodeExportRequest, exportRequestLine, receiverResponse } from './otlp-receiver';
import { OtlpPayloadError } from './otlp-wire';

const TRACE_ID = '5b8efff798038103d269b633813fc60c';
const SPAN_ID = 'eee19b7ec3c1b174';

const span = {
  traceId: TRACE_ID,
  spanId: SPAN_ID,
  name: 'job_execution',
  kind: 1,
  startTimeUnixNano: '1700000000123456789',
  attributes: [{ key: 'payload', value: { bytesValue: Buffer.from('hi').toString('base64') } }],
  status: { code: 2 },
};
const request = { resourceSpans: [{ scopeSpans: [{ spans: [span] }] }] };

function protobufOf(json: typeof request): Buffer {
  const type = exportRequestType('traces');
  const bytes = (hex: string) => Buffer.from(hex, 'hex');
  const spans = json.resourceSpans[0].scopeSpans[0].spans.map((each) => ({
    ...each,
    traceId: bytes(each.traceId),
    spanId: bytes(each.spanId),
    attributes: [{ key: 'payload', value: { bytesValue: Buffer.from('hi') } }],
  }));
  return Buffer.from(type.encode(type.fromObject({ resourceSpans: [{ scopeSpans: [{ spans }] }] })).finish());
}

describe('the OTLP receiver', () => {
  it('decodes a protobuf export into the OTLP/JSON mapping: hex ids, int64 as strings, enums as numbers, other bytes base64', () => {
    expect(decodeExportRequest('traces', 'protobuf', protobufOf(request))).toEqual(request);
  });

  it('reads a JSON export as its client wrote it, and keeps its text on one line', () => {
    const text = JSON.stringify(request, null, 2);
    expect(decodeExportRequest('traces', 'json', Buffer.from(text))).toEqual(request);
    const line = exportRequestLine('traces', 'json', Buffer.from(text));
    expect(line).not.toContain('\n');
    expect(JSON.parse(line)).toEqual(request);
  });

  it.each([
    ['json', '{"resourceSpans":'],
    ['json', '[1]'],
    ['protobuf', Buffer.from([0x0a, 0xff])],
  ] as const)('refuses a %s body that is no export request', (encoding, body) => {
    expect(() => decodeExportRequest('traces', encoding, Buffer.from(body))).toThrow(OtlpPayloadError);
  });

  it('answers in the encoding of the request: an empty response, a partial success, or a Status with Retry-After', () => {
    expect(receiverResponse('logs', 'json', { kind: 'accepted' })).toEqual({
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(receiverResponse('traces', 'protobuf', { kind: 'accepted' }).body.length).toBe(0);
    const partial = receiverResponse('traces', 'json', { kind: 'accepted', partialSuccess: { rejectedItems: 2, errorMessage: 'old' } });
    expect(JSON.parse(partial.body.toString())).toEqual({ partialSuccess: { rejectedSpans: '2', errorMessage: 'old' } });
    const busy = receiverResponse('traces', 'json', { kind: 'failed', status: 503, message: 'busy', retryAfter: '7' });
    expect(busy.status).toBe(503);
    expect(busy.headers).toEqual({ 'content-type': 'application/json', 'retry-after': '7' });
    expect(JSON.parse(busy.body.toString())).toEqual({ code: 14, message: 'busy' });
  });

  it.each([
    ['application/x-protobuf', 'protobuf'],
    ['application/json', 'json'],
    ['Application/JSON; charset=utf-8', 'json'],
    [' application/x-protobuf ;x=y', 'protobuf'],
    ['text/plain', undefined],
    ['application/jsonl', undefined],
    [undefined, undefined],
  ])('reads the media type %j as %s', (contentType, encoding) => {
    expect(encodingOf(contentType)).toBe(encoding);
  });

  it('knows the three signal paths and no other', () => {
    expect(['/v1/traces', '/v1/metrics', '/v1/logs', '/v1/profiles', '/v1/traces/'].map(signalOfPath)).toEqual([
      'traces',
      'metrics',
      'logs',
      undefined,
      undefined,
    ]);
  });
});
