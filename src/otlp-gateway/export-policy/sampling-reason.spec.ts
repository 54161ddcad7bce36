import * as protobuf from 'protobufjs';
import { enforceExport } from './enforce-export';
import type { OtlpEncoding, OtlpSignal } from '../../otlp/otlp-encoding';
import { exportRequestType, otlpProto } from '../../otlp/otlp-proto';
import { encodeBytesField, encodeStringField } from '../../otlp/otlp-wire';
import type { GatewayGrant } from './otlp-types';
import { OutcomeSamplingReason, SAMPLING_REASON_ATTRIBUTE, settleProvisionalTraces, settleSamplingReason } from '../../otlp/sampling-reason';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const HEAD: GatewayGrant = { jobId: 1001, projectId: 7, pipelineId: 500, runnerId: 17, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' };
const PROVISIONAL: GatewayGrant = { ...HEAD, provisional: true };
const FOREIGN_TRACE = '0af7651916cd43dd8448eb211c80319c';
const OUTCOMES: OutcomeSamplingReason[] = ['failed', 'slow', 'queued', 'no_outcome'];

function span(name: string, extra: Json = {}): Json {
  return {
    traceId: HEAD.traceId,
    spanId: Buffer.from(name.padEnd(8, '_').slice(0, 8)).toString('hex'),
    name,
    startTimeUnixNano: '1700000000000000123',
    endTimeUnixNano: '1700000000500000456',
    ...extra,
  };
}

/** Two resources (one the exporter left out), an exporter's own resource reason, spans with and without trace_state. */
function tracesRequest(): Json {
  return {
    resourceSpans: [
      {
        resource: {
          attributes: [
            { key: 'service.name', value: { stringValue: 'rspec' } },
            { key: SAMPLING_REASON_ATTRIBUTE, value: { stringValue: 'failed' } },
          ],
        },
        scopeSpans: [
          {
            spans: [
              span('compile', { traceState: 'ot=th:c,vendor=x', attributes: [{ key: 'sampling.reason', value: { stringValue: 'my own' } }] }),
              span('foreign', { traceId: FOREIGN_TRACE }),
              span('test'),
            ],
          },
        ],
      },
      { scopeSpans: [{ spans: [span('no-resource', { traceState: 'ot=th:8' })] }] },
    ],
  };
}

function encode(signal: OtlpSignal, request: Json, encoding: OtlpEncoding): Buffer {
  if (encoding === 'json') return Buffer.from(JSON.stringify(request));
  const type = exportRequestType(signal);
  return Buffer.from(type.encode(type.fromObject(withBinaryIds(request) as Json)).finish());
}

/** The request a decoder reads: protobufjs with the OTLP schema (ids as hex), or JSON.parse as sent. */
function decode(signal: OtlpSignal, body: Buffer, encoding: OtlpEncoding): Json {
  if (encoding === 'json') return JSON.parse(body.toString('utf8'));
  const type = exportRequestType(signal);
  return withHexIds(type.toObject(type.decode(body), { longs: String, bytes: String }));
}

const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

function withBinaryIds(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((item) => withBinaryIds(item));
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withBinaryIds(v, k)]));
  return ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, 'hex').toString('base64') : value;
}

function withHexIds(value: unknown, key = ''): Json {
  if (Array.isArray(value)) return value.map((item) => withHexIds(item)) as unknown as Json;
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withHexIds(v, k)]));
  return (ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, 'base64').toString('hex') : value) as Json;
}

function resources(request: Json): Json[] {
  return request.resourceSpans ?? request.resourceMetrics ?? request.resourceLogs;
}

/** Every value of the resource attribute, per resource: exactly one each is what a reader can rely on. */
function resourceReasons(request: Json): unknown[][] {
  return resources(request).map((entry) =>
    (entry.resource?.attributes ?? []).filter((kv: Json) => kv.key === SAMPLING_REASON_ATTRIBUTE).map((kv: Json) => kv.value),
  );
}

function spans(request: Json): Json[] {
  return request.resourceSpans.flatMap((rs: Json) => rs.scopeSpans.flatMap((ss: Json) => ss.spans));
}

describe.each(['protobuf', 'json'] as const)('a provisional export (%s)', (encoding) => {
  it('carries a pending slot on every resource and reaches the collector settled, every admitted span saying ot=th:0', () => {
    const enforced = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), PROVISIONAL, 1000);

    expect(enforced).toMatchObject({ forwardedItems: 3, rejectedItems: 1 });
    const parked = decode('traces', enforced.body, encoding);
    // Protobuf is parked with each span as the exporter wrote it: its trace_state is appended only if it is kept.
    expect(spans(parked).map((s) => [s.name, s.traceState])).toEqual(
      encoding === 'json'
        ? [
            ['compile', 'ot=th:0'],
            ['test', 'ot=th:0'],
            ['no-resource', 'ot=th:0'],
          ]
        : [
            ['compile', 'ot=th:c,vendor=x'],
            ['test', undefined],
            ['no-resource', 'ot=th:8'],
          ],
    );
    // The exporter's own resource value is gone; the one left is the gateway's placeholder.
    expect(resourceReasons(parked)).toEqual([[{ stringValue: 'pending' }], [{ stringValue: 'pending' }]]);

    const settled = decode('traces', settleProvisionalTraces(encoding, enforced.body, 'failed'), encoding);

    expect(resourceReasons(settled)).toEqual([[{ stringValue: 'failed' }], [{ stringValue: 'failed' }]]);
    // A span's own attributes are left as they came (one named ci.sampling.reason is refused: control-plane-guard.spec.ts).
    expect(spans(settled)[0].attributes).toEqual([{ key: 'sampling.reason', value: { stringValue: 'my own' } }]);
    expect(spans(settled).map((s) => s.traceState)).toEqual(['ot=th:0', 'ot=th:0', 'ot=th:0']);
  });

  it.each(['metrics', 'logs'] as const)('carries the slot on every %s resource too', (signal) => {
    const request =
      signal === 'metrics'
        ? { resourceMetrics: [{ scopeMetrics: [{ metrics: [{ name: 'm', gauge: { dataPoints: [{ asInt: '1', timeUnixNano: '1' }] } }] }] }] }
        : { resourceLogs: [{ scopeLogs: [{ logRecords: [{ timeUnixNano: '1', body: { stringValue: 'line' } }] }] }] };
    const enforced = enforceExport(signal, encoding, encode(signal, request, encoding), PROVISIONAL, 0);

    expect(resourceReasons(decode(signal, enforced.body, encoding))).toEqual([[{ stringValue: 'pending' }]]);
    expect(resourceReasons(decode(signal, settleSamplingReason(encoding, enforced.body, 'slow'), encoding))).toEqual([[{ stringValue: 'slow' }]]);
  });
});

describe.each(['protobuf', 'json'] as const)('a head-sampled export (%s)', (encoding) => {
  it("says head on every resource and leaves every span's trace_state as the exporter wrote it", () => {
    const enforced = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), HEAD, 1000);

    const forwarded = decode('traces', enforced.body, encoding);
    expect(resourceReasons(forwarded)).toEqual([[{ stringValue: 'head' }], [{ stringValue: 'head' }]]);
    expect(spans(forwarded).map((s) => [s.name, s.traceState])).toEqual([
      ['compile', 'ot=th:c,vendor=x'],
      ['test', undefined],
      ['no-resource', 'ot=th:8'],
    ]);
  });

  it('follows a grant object that turns provisional and back between exports (derivations are cached per grant object)', () => {
    const grant: GatewayGrant = { ...HEAD };
    const body = encode('traces', tracesRequest(), encoding);
    const reasonsOf = () => resourceReasons(decode('traces', enforceExport('traces', encoding, body, grant, 1000).body, encoding)).flat();

    expect(reasonsOf()).toEqual([{ stringValue: 'head' }, { stringValue: 'head' }]);
    grant.provisional = true;
    expect(reasonsOf()).toEqual([{ stringValue: 'pending' }, { stringValue: 'pending' }]);
    grant.provisional = false;
    expect(reasonsOf()).toEqual([{ stringValue: 'head' }, { stringValue: 'head' }]);
  });
});

describe('a provisional protobuf export', () => {
  const requestType = exportRequestType('traces');
  const anyValueType = otlpProto().lookupType('otlp.AnyValue');

  it('keeps its length through every outcome and decodes to exactly the reason string', () => {
    const enforced = enforceExport('traces', 'protobuf', encode('traces', tracesRequest(), 'protobuf'), PROVISIONAL, 1000).body;
    const length = enforced.length;

    for (const reason of OUTCOMES) {
      const settled = settleSamplingReason('protobuf', enforced, reason);
      // Settled where it lies: what the store holds is what goes to the collector.
      expect(settled).toBe(enforced);
      expect(settled.length).toBe(length);
      const values = (requestType.toObject(requestType.decode(settled)).resourceSpans as Json[]).map(
        (rs) => rs.resource.attributes.find((kv: Json) => kv.key === SAMPLING_REASON_ATTRIBUTE).value,
      );
      // A decoder sees the string alone: the padding field is unknown to it and skipped.
      expect(values.map((value) => anyValueType.toObject(value as protobuf.Message))).toEqual([{ stringValue: reason }, { stringValue: reason }]);
    }
  });

  it('is parked with each span byte for byte, and settled with a trailing trace_state and the rest of the span unchanged', () => {
    // A field of the span no OTLP version defines (1000) must reach the collector as the exporter wrote it.
    const spanType = otlpProto().lookupType('otlp.Span');
    const sentSpan = Buffer.concat([
      Buffer.from(spanType.encode(spanType.fromObject(withBinaryIds(span('a', { traceState: 'ot=th:c' })) as Json)).finish()),
      encodeStringField(1000, 'unknown to OTLP'),
    ]);
    const body = encodeBytesField(1, encodeBytesField(2, encodeBytesField(2, sentSpan)));
    const head = enforceExport('traces', 'protobuf', body, HEAD, 1000).body;
    const provisional = enforceExport('traces', 'protobuf', body, PROVISIONAL, 1000).body;
    const settled = settleProvisionalTraces('protobuf', Buffer.from(provisional), 'failed');

    expect(head.includes(sentSpan)).toBe(true);
    expect(provisional.includes(encodeBytesField(2, sentSpan))).toBe(true);
    // proto3: the last trace_state is the one a decoder keeps, so the exporter's stays in place before it.
    expect(settled.includes(encodeBytesField(2, Buffer.concat([sentSpan, encodeStringField(3, 'ot=th:0')])))).toBe(true);
    expect(settled.length).toBe(provisional.length + encodeStringField(3, 'ot=th:0').length);
  });

  it('parked by a replica that still stamped at parking, says ot=th:0 twice once settled, which decodes as once', () => {
    const enforced = enforceExport('traces', 'protobuf', encode('traces', tracesRequest(), 'protobuf'), PROVISIONAL, 1000).body;
    const stampedOnce = settleProvisionalTraces('protobuf', Buffer.from(enforced), 'slow');

    const stampedTwice = settleProvisionalTraces('protobuf', Buffer.from(stampedOnce), 'slow');

    expect(decode('traces', stampedTwice, 'protobuf')).toEqual(decode('traces', stampedOnce, 'protobuf'));
    expect(spans(decode('traces', stampedTwice, 'protobuf')).map((s) => s.traceState)).toEqual(['ot=th:0', 'ot=th:0', 'ot=th:0']);
  });

  it('concatenated with another settled export, decodes as one request holding every resource and span', () => {
    const other: GatewayGrant = { ...PROVISIONAL, jobId: 1002 };
    const first = enforceExport('traces', 'protobuf', encode('traces', tracesRequest(), 'protobuf'), PROVISIONAL, 1000).body;
    const secondRequest = { resourceSpans: [{ scopeSpans: [{ spans: [span('deploy')] }] }] };
    const second = enforceExport('traces', 'protobuf', encode('traces', secondRequest, 'protobuf'), other, 1000).body;

    // Settling the concatenation or each part first gives the same bytes.
    const concatenated = Buffer.concat([
      settleProvisionalTraces('protobuf', Buffer.from(first), 'failed'),
      settleProvisionalTraces('protobuf', Buffer.from(second), 'failed'),
    ]);
    expect(settleProvisionalTraces('protobuf', Buffer.concat([first, second]), 'failed')).toEqual(concatenated);

    const delivered = decode('traces', concatenated, 'protobuf');
    expect(delivered.resourceSpans).toHaveLength(3);
    expect(spans(delivered).map((s) => [s.name, s.traceState])).toEqual([
      ['compile', 'ot=th:0'],
      ['test', 'ot=th:0'],
      ['no-resource', 'ot=th:0'],
      ['deploy', 'ot=th:0'],
    ]);
    expect(resourceReasons(delivered).flat()).toEqual([{ stringValue: 'failed' }, { stringValue: 'failed' }, { stringValue: 'failed' }]);
    const jobIds = delivered.resourceSpans.map((rs: Json) => rs.resource.attributes.find((kv: Json) => kv.key === 'ci.job.id').value.intValue);
    expect(jobIds).toEqual(['1001', '1001', '1002']);
  });

  it("leaves alone a span attribute whose value copies the slot's bytes, cut short by the end of the string", () => {
    const parked = enforceExport('traces', 'protobuf', encode('traces', tracesRequest(), 'protobuf'), PROVISIONAL, 1000).body;
    // The gateway's slot KeyValue as it lies on the resource, found by the key's bytes.
    const keyAt = parked.indexOf(encodeStringField(1, SAMPLING_REASON_ATTRIBUTE));
    const slot = parked.subarray(keyAt, keyAt + 37);
    expect(anyValueType.toObject(anyValueType.decode(slot.subarray(22)))).toEqual({ stringValue: 'pending' });
    // A string that ends in the slot's first bytes up to "pending", followed by a span field (unknown field 1000,
    // 3 bytes) that reads on as the slot's padding: overwriting 14 bytes after the copied prefix would make the
    // span's fields undecodable.
    const stringValueEnd = slot.indexOf(Buffer.from('pending')) + 'pending'.length;
    const cutShort = encodeBytesField(
      9,
      Buffer.concat([encodeStringField(1, 'blob'), encodeBytesField(2, encodeBytesField(1, slot.subarray(0, stringValueEnd)))]),
    );
    const spanType = otlpProto().lookupType('otlp.Span');
    // A whole copy of the slot as a span attribute carries its key, which the gateway refuses on a span
    // (control-plane-guard.spec.ts): only a value can copy it into what is parked.
    const spanBytes = Buffer.concat([
      Buffer.from(spanType.encode(spanType.fromObject(withBinaryIds(span('mimic')) as Json)).finish()),
      cutShort,
      slot.subarray(stringValueEnd),
    ]);
    const body = encodeBytesField(1, encodeBytesField(2, encodeBytesField(2, spanBytes)));
    const sent = decode('traces', body, 'protobuf');

    const settled = decode('traces', settleSamplingReason('protobuf', enforceExport('traces', 'protobuf', body, PROVISIONAL, 1000).body, 'failed'), 'protobuf');

    expect(spans(settled)[0].attributes).toEqual(spans(sent)[0].attributes);
    expect(resourceReasons(settled)).toEqual([[{ stringValue: 'failed' }]]);
  });
});

describe('a provisional JSON export', () => {
  it('keeps no snake_case trace_state beside the one it writes, which a decoder could prefer', () => {
    const request = {
      resourceSpans: [{ scopeSpans: [{ spans: [span('a', { trace_state: 'ot=th:c' }), span('b', { traceState: 'x=1', trace_state: 'y=2' })] }] }],
    };

    const parked = decode('traces', enforceExport('traces', 'json', encode('traces', request, 'json'), PROVISIONAL, 1000).body, 'json');

    expect(spans(parked).map((s) => [s.traceState, 'trace_state' in s])).toEqual([
      ['ot=th:0', false],
      ['ot=th:0', false],
    ]);
  });

  it('settles as text: every placeholder replaced, nothing else of the body changed', () => {
    const parked = enforceExport('traces', 'json', encode('traces', tracesRequest(), 'json'), PROVISIONAL, 1000).body;

    const settled = settleSamplingReason('json', parked, 'no_outcome');

    expect(settled.toString('utf8')).toBe(parked.toString('utf8').replaceAll('"stringValue":"pending"', '"stringValue":"no_outcome"'));
    expect(resourceReasons(decode('traces', settled, 'json'))).toEqual([[{ stringValue: 'no_outcome' }], [{ stringValue: 'no_outcome' }]]);
  });
});

describe('settleSamplingReason', () => {
  it.each(['protobuf', 'json'] as const)('refuses a reason that is not an outcome (%s)', (encoding) => {
    const parked = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), PROVISIONAL, 1000).body;

    expect(() => settleSamplingReason(encoding, parked, 'head' as OutcomeSamplingReason)).toThrow(TypeError);
    expect(() => settleSamplingReason(encoding, parked, 'pending' as OutcomeSamplingReason)).toThrow(TypeError);
  });
});
