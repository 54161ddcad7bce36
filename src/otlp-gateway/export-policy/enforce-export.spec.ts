import { ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import * as protobuf from 'protobufjs';
import { enforceExport } from './enforce-export';
import type { OtlpSignal } from '../../otlp/otlp-encoding';
import { otlpProto } from '../../otlp/otlp-proto';
import { OtlpPayloadError, lengthDelimitedHeader } from '../../otlp/otlp-wire';
import type { GatewayGrant } from './otlp-types';

// Independent codec: protobufjs with the OTLP schema, nothing from the code under test.
const schema = otlpProto();
const REQUEST_TYPES: Record<OtlpSignal, protobuf.Type> = {
  traces: schema.lookupType('otlp.ExportTraceServiceRequest'),
  metrics: schema.lookupType('otlp.ExportMetricsServiceRequest'),
  logs: schema.lookupType('otlp.ExportLogsServiceRequest'),
};

const GRANT: GatewayGrant = {
  jobId: 1001,
  projectId: 7,
  pipelineId: 500,
  runnerId: 17,
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
};
const FOREIGN_TRACE = '0af7651916cd43dd8448eb211c80319c';

/** What the gateway writes on every resource of a head-sampled job's export. */
const EXPECTED_RESOURCE_STAMP = [
  { key: 'ci.job.id', value: { intValue: '1001' } },
  { key: 'ci.project.id', value: { intValue: '7' } },
  { key: 'ci.pipeline.id', value: { intValue: '500' } },
  { key: 'ci.runner.id', value: { intValue: '17' } },
  { key: 'cicd.pipeline.run.id', value: { stringValue: '500' } },
  { key: 'cicd.pipeline.task.run.id', value: { stringValue: '1001' } },
  { key: 'cicd.worker.id', value: { stringValue: '17' } },
  // Not provisional: the head decision sampled the pipeline (SPEC §11).
  { key: 'ci.sampling.reason', value: { stringValue: 'head' } },
];

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A request in OTLP/JSON shape (hex ids, int64 as strings): the common input of both encodings. */
function encode(signal: OtlpSignal, request: Json, encoding: 'protobuf' | 'json'): Buffer {
  if (encoding === 'json') return Buffer.from(JSON.stringify(request));
  const type = REQUEST_TYPES[signal];
  return Buffer.from(type.encode(type.fromObject(hexToBase64(request) as Json)).finish());
}

/** Decodes either encoding into the OTLP/JSON shape, so both can be compared with the same expectations. */
function decode(signal: OtlpSignal, body: Buffer, encoding: 'protobuf' | 'json'): Json {
  if (encoding === 'json') return normalizeJson(JSON.parse(body.toString('utf8')));
  const type = REQUEST_TYPES[signal];
  const object = type.toObject(type.decode(body), { longs: String, bytes: String, enums: Number });
  return base64ToHex(object);
}

const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

function hexToBase64(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((item) => hexToBase64(item));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, hexToBase64(v, k)]));
  }
  return ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, 'hex').toString('base64') : value;
}

function base64ToHex(value: unknown, key = ''): Json {
  if (Array.isArray(value)) return value.map((item) => base64ToHex(item)) as unknown as Json;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, base64ToHex(v, k)]));
  }
  const isId = ID_FIELDS.has(key) && typeof value === 'string';
  return (isId ? Buffer.from(value, 'base64').toString('hex') : value) as Json;
}

/** protobufjs omits empty repeated fields and defaults; JSON keeps what was sent. Drop empties on both sides. */
function normalizeJson(value: unknown): Json {
  if (Array.isArray(value)) return value.map((item) => normalizeJson(item)) as unknown as Json;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([, v]) => !(Array.isArray(v) && v.length === 0))
        .map(([k, v]) => [k, normalizeJson(v)]),
    );
  }
  return value as Json;
}

function span(traceId: string, name: string, extra: Json = {}): Json {
  return {
    traceId,
    // Eight bytes whatever the name: a span id of any other length is a span the collector cannot decode.
    spanId: Buffer.from(name.padEnd(8, '_')).subarray(0, 8).toString('hex'),
    name,
    kind: 1,
    startTimeUnixNano: '1700000000000000123',
    endTimeUnixNano: '1700000000500000456',
    ...extra,
  };
}

function attributesOf(resourceEntry: Json): Json[] {
  return resourceEntry.resource?.attributes ?? [];
}

const STAMPED_KEYS = new Set(EXPECTED_RESOURCE_STAMP.map(({ key }) => key));

function stampedOf(resourceEntry: Json): Json[] {
  return attributesOf(resourceEntry).filter((kv) => STAMPED_KEYS.has(kv.key));
}

function spanNames(request: Json): string[] {
  return (request.resourceSpans ?? []).flatMap((rs: Json) => (rs.scopeSpans ?? []).flatMap((ss: Json) => (ss.spans ?? []).map((s: Json) => s.name)));
}

const RICH_SPAN_EXTRA: Json = {
  parentSpanId: 'abcdef0123456789',
  traceState: 'ot=th:c',
  flags: 769,
  attributes: [
    { key: 'http.method', value: { stringValue: 'GET' } },
    { key: 'retries', value: { intValue: '3' } },
    { key: 'ratio', value: { doubleValue: 0.25 } },
    { key: 'tags', value: { arrayValue: { values: [{ stringValue: 'a' }, { boolValue: true }] } } },
    { key: 'ci.project.id', value: { intValue: '999' } },
  ],
  droppedAttributesCount: 2,
  events: [
    {
      timeUnixNano: '1700000000100000000',
      name: 'exception',
      attributes: [{ key: 'exception.type', value: { stringValue: 'Boom' } }],
    },
  ],
  links: [
    {
      traceId: FOREIGN_TRACE,
      spanId: '1122334455667788',
      attributes: [{ key: 'link.kind', value: { stringValue: 'caused-by' } }],
    },
  ],
  status: { code: 2, message: 'failed' },
};

function tracesRequest(): Json {
  return {
    resourceSpans: [
      {
        resource: {
          attributes: [
            { key: 'service.name', value: { stringValue: 'rspec' } },
            { key: 'ci.project.id', value: { intValue: '666' } },
            { key: 'host.name', value: { stringValue: 'runner-abc' } },
            { key: 'ci.project.id', value: { stringValue: 'spoofed-again' } },
            { key: 'cicd.worker.id', value: { stringValue: 'not-my-runner' } },
            { key: 'ci.sampling.reason', value: { stringValue: 'failed' } },
          ],
          droppedAttributesCount: 1,
        },
        scopeSpans: [
          {
            scope: { name: 'rspec-tracer', version: '1.2.3' },
            spans: [span(GRANT.traceId, 'compile', RICH_SPAN_EXTRA), span(FOREIGN_TRACE, 'foreign-1'), span(GRANT.traceId, 'test')],
            schemaUrl: 'https://opentelemetry.io/schemas/1.26.0',
          },
          { scope: { name: 'only-foreign' }, spans: [span(FOREIGN_TRACE, 'foreign-2')] },
        ],
        schemaUrl: 'https://opentelemetry.io/schemas/1.26.0',
      },
      {
        scopeSpans: [{ scope: { name: 'no-resource' }, spans: [span(GRANT.traceId.toUpperCase(), 'upper-hex')] }],
      },
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'intruder' } }] },
        scopeSpans: [{ spans: [span(FOREIGN_TRACE, 'foreign-3'), span('', 'no-trace-id')] }],
      },
    ],
  };
}

describe.each(['protobuf', 'json'] as const)('enforceExport traces (%s)', (encoding) => {
  it('drops and counts spans outside the granted trace, forwarding the rest', () => {
    const result = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), GRANT, 1000);

    const forwarded = decode('traces', result.body, encoding);
    expect(spanNames(forwarded)).toEqual(['compile', 'test', 'upper-hex']);
    expect(result.forwardedItems).toBe(3);
    expect(result.rejectedItems).toBe(4);
    expect(result.errorMessage).toBe("4 spans rejected: trace_id is not this CI job's trace");
    expect(result.nothingToForward).toBe(false);
  });

  it('removes the scopes and resources that only carried foreign spans', () => {
    const result = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), GRANT, 1000);

    const forwarded = decode('traces', result.body, encoding);
    expect(forwarded.resourceSpans).toHaveLength(2);
    expect(forwarded.resourceSpans[0].scopeSpans.map((ss: Json) => ss.scope.name)).toEqual(['rspec-tracer']);
    expect(attributesOf(forwarded.resourceSpans[1]).map((kv) => kv.key)).not.toContain('service.name');
  });

  it('rejects spans beyond the remaining span quota, in body order, after the trace check', () => {
    const result = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), GRANT, 2);

    expect(spanNames(decode('traces', result.body, encoding))).toEqual(['compile', 'test']);
    expect(result.forwardedItems).toBe(2);
    expect(result.rejectedItems).toBe(5);
    expect(result.errorMessage).toBe("4 spans rejected: trace_id is not this CI job's trace; 1 span rejected: this CI job's span quota is exhausted");
  });

  it('reports nothing to forward when the quota is already spent', () => {
    const result = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), GRANT, 0);

    expect(result.nothingToForward).toBe(true);
    expect(result.forwardedItems).toBe(0);
    expect(result.rejectedItems).toBe(7);
    expect(decode('traces', result.body, encoding).resourceSpans ?? []).toEqual([]);
  });

  it('overwrites spoofed identity attributes: one entry per key, grant values, other attributes in order', () => {
    const result = enforceExport('traces', encoding, encode('traces', tracesRequest(), encoding), GRANT, 1000);

    const [first, second] = decode('traces', result.body, encoding).resourceSpans;
    expect(attributesOf(first)).toEqual([
      { key: 'service.name', value: { stringValue: 'rspec' } },
      { key: 'host.name', value: { stringValue: 'runner-abc' } },
      ...EXPECTED_RESOURCE_STAMP,
    ]);
    expect(first.resource.droppedAttributesCount).toBe(1);
    expect(first.schemaUrl).toBe('https://opentelemetry.io/schemas/1.26.0');
    // A resource the exporter left out is created, so its spans are attributed too.
    expect(attributesOf(second)).toEqual(EXPECTED_RESOURCE_STAMP);
  });

  it('leaves spans it keeps untouched apart from their identity attributes: events, links, status, flags', () => {
    const input = tracesRequest();
    const result = enforceExport('traces', encoding, encode('traces', input, encoding), GRANT, 1000);

    const forwardedSpan = decode('traces', result.body, encoding).resourceSpans[0].scopeSpans[0].spans[0];
    const sent = decode('traces', encode('traces', input, encoding), encoding);
    const sentSpan = sent.resourceSpans[0].scopeSpans[0].spans[0];
    expect(forwardedSpan).toEqual({
      ...sentSpan,
      attributes: sentSpan.attributes.map((kv: Json) => (kv.key === 'ci.project.id' ? { key: 'ci.project.id', value: { intValue: '7' } } : kv)),
    });
    expect(forwardedSpan.events[0].name).toBe('exception');
    expect(forwardedSpan.links[0].traceId).toBe(FOREIGN_TRACE);
  });

  it('treats an empty export as nothing to forward and no rejection', () => {
    const result = enforceExport('traces', encoding, encode('traces', {}, encoding), GRANT, 1000);

    expect(result).toMatchObject({ forwardedItems: 0, rejectedItems: 0, nothingToForward: true });
    expect(result.errorMessage).toBeUndefined();
  });
});

describe('enforceExport encodings agree', () => {
  it.each(['traces', 'metrics', 'logs'] as const)('%s: protobuf and JSON forward the same data', (signal) => {
    const request = signal === 'traces' ? tracesRequest() : signal === 'metrics' ? metricsRequest() : logsRequest();
    const viaProtobuf = enforceExport(signal, 'protobuf', encode(signal, request, 'protobuf'), GRANT, 2);
    const viaJson = enforceExport(signal, 'json', encode(signal, request, 'json'), GRANT, 2);

    expect(decode(signal, viaJson.body, 'json')).toEqual(decode(signal, viaProtobuf.body, 'protobuf'));
    expect({ ...viaJson, body: undefined, wire: undefined }).toEqual({ ...viaProtobuf, body: undefined, wire: undefined });
  });
});

describe('enforceExport protobuf wire preservation', () => {
  // Hand-built fields with numbers no OTLP version defines: what a newer SDK or a vendor could send.
  function varint(value: number): Buffer {
    const bytes: number[] = [];
    while (value >= 128) {
      bytes.push((value % 128) | 0x80);
      value = Math.floor(value / 128);
    }
    bytes.push(value);
    return Buffer.from(bytes);
  }
  function bytesField(fieldNumber: number, payload: Buffer): Buffer {
    return Buffer.concat([varint(fieldNumber * 8 + 2), varint(payload.length), payload]);
  }
  const unknownIn = (where: string) => bytesField(4242, Buffer.from(`unknown field in ${where}`));
  const spanType = schema.lookupType('otlp.Span');
  const resourceType = schema.lookupType('otlp.Resource');
  const encodeMessage = (type: protobuf.Type, object: Json) => Buffer.from(type.encode(type.fromObject(hexToBase64(object) as Json)).finish());

  function requestWithUnknownFields(): { body: Buffer; keptSpan: Buffer; foreignSpan: Buffer } {
    const withoutIdentity = RICH_SPAN_EXTRA.attributes.filter((kv: Json) => !kv.key.startsWith('ci.'));
    const keptSpan = Buffer.concat([
      encodeMessage(spanType, span(GRANT.traceId, 'kept', { ...RICH_SPAN_EXTRA, attributes: withoutIdentity })),
      unknownIn('span'),
    ]);
    const foreignSpan = Buffer.concat([encodeMessage(spanType, span(FOREIGN_TRACE, 'foreign')), unknownIn('foreign span')]);
    const scopeSpans = Buffer.concat([bytesField(2, keptSpan), bytesField(2, foreignSpan), unknownIn('scope')]);
    const resource = Buffer.concat([encodeMessage(resourceType, { attributes: [{ key: 'ci.job.id', value: { intValue: '1' } }] }), unknownIn('resource')]);
    // A second `resource` occurrence merges into the first for every decoder: spoofing must not hide in it.
    const resourceTail = encodeMessage(resourceType, {
      attributes: [
        { key: 'ci.job.id', value: { intValue: '2' } },
        { key: 'k8s.pod.name', value: { stringValue: 'runner-pod' } },
      ],
    });
    const resourceSpans = Buffer.concat([bytesField(1, resource), bytesField(2, scopeSpans), unknownIn('resource spans'), bytesField(1, resourceTail)]);
    const body = Buffer.concat([bytesField(1, resourceSpans), unknownIn('request')]);
    return { body, keptSpan, foreignSpan };
  }

  it('forwards kept spans byte for byte with their unknown fields, and drops unknown fields where data could hide', () => {
    const { body, keptSpan, foreignSpan } = requestWithUnknownFields();

    const result = enforceExport('traces', 'protobuf', body, GRANT, 1000);

    expect(result.body.includes(keptSpan)).toBe(true);
    expect(result.body.includes(foreignSpan)).toBe(false);
    expect(result.body.includes(unknownIn('resource'))).toBe(true);
    // A newer collector could read a field it knows there as spans nobody checked (issue 9 item 1).
    for (const where of ['scope', 'resource spans', 'request']) {
      expect(result.body.includes(unknownIn(where))).toBe(false);
    }
    const [resourceSpans] = decode('traces', result.body, 'protobuf').resourceSpans;
    expect(attributesOf(resourceSpans)).toEqual([{ key: 'k8s.pod.name', value: { stringValue: 'runner-pod' } }, ...EXPECTED_RESOURCE_STAMP]);
  });

  it('leaves a request without foreign spans identical apart from the stamped resource', () => {
    const spans = [span(GRANT.traceId, 'a'), span(GRANT.traceId, 'b')];
    const request = { resourceSpans: [{ scopeSpans: [{ spans }] }] };
    const body = encode('traces', request, 'protobuf');

    const result = enforceExport('traces', 'protobuf', body, GRANT, 1000);

    const scopeSpans = encodeMessage(schema.lookupType('otlp.ScopeSpans'), request.resourceSpans[0].scopeSpans[0]);
    expect(result.body.includes(scopeSpans)).toBe(true);
    expect(result.forwardedItems).toBe(2);
  });
});

describe('enforceExport JSON specifics', () => {
  it('applies the trace filter to snake_case field names, which the collector also reads', () => {
    const body = Buffer.from(
      JSON.stringify({
        resource_spans: [
          {
            scope_spans: [
              {
                spans: [
                  { trace_id: FOREIGN_TRACE, name: 'sneaky' },
                  { trace_id: GRANT.traceId, name: 'ok' },
                ],
              },
            ],
          },
        ],
      }),
    );

    const result = enforceExport('traces', 'json', body, GRANT, 1000);

    expect(result.rejectedItems).toBe(1);
    expect(spanNames(decode('traces', result.body, 'json'))).toEqual(['ok']);
  });

  it('forwards traces as the exact text JSON.stringify writes, the same with the per-span limits on or off', () => {
    const request = tracesRequest();
    const snakeSpan = { trace_id: GRANT.traceId, name: 'snake', attributes: [{ key: 'ci.job.id', value: { intValue: 5 } }] };
    request.resourceSpans[0].scopeSpans[0].spans.push(snakeSpan, span(GRANT.traceId, 'caf\u00e9 \u2028 "quoted"'));
    const body = encode('traces', request, 'json');

    const limited = enforceExport('traces', 'json', body, GRANT, 1000, { maxBytes: 4096, maxAttributes: 128, maxAttributeValueBytes: 2048 });
    const unlimited = enforceExport('traces', 'json', body, GRANT, 1000);

    const text = limited.body.toString('utf8');
    expect(text).toBe(JSON.stringify(JSON.parse(text)));
    expect(unlimited.body.toString('utf8')).toBe(text);
    expect(spanNames(JSON.parse(text))).toEqual(['compile', 'test', 'snake', 'caf\u00e9 \u2028 "quoted"', 'upper-hex']);
  });

  it('refuses a body naming the same field in both spellings', () => {
    const body = Buffer.from(JSON.stringify({ resourceSpans: [], resource_spans: [] }));
    expect(() => enforceExport('traces', 'json', body, GRANT, 1000)).toThrow(OtlpPayloadError);
  });

  it('keeps 64-bit integers sent as JSON numbers exact, and unknown members inside spans only', () => {
    const body = Buffer.from(
      `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"${GRANT.traceId}","name":"big",` +
        `"startTimeUnixNano":1700000000000000123,"endTimeUnixNano": 1700000000000000999,` +
        `"attributes":[{"key":"n","value":{"intValue":-9007199254740993}},` +
        `{"key":"d","value":{"doubleValue":1.5e300}},` +
        `{"key":"s","value":{"stringValue":"a: 12345678901234567 \\" ,99999999999999999"}}],` +
        `"vendorExtension":{"x":[1,2,3]}}]}],"futureField":true}]}`,
    );

    const result = enforceExport('traces', 'json', body, GRANT, 1000);

    const forwarded = JSON.parse(result.body.toString());
    const forwardedSpan = forwarded.resourceSpans[0].scopeSpans[0].spans[0];
    expect(BigInt(forwardedSpan.startTimeUnixNano)).toBe(1700000000000000123n);
    expect(BigInt(forwardedSpan.endTimeUnixNano)).toBe(1700000000000000999n);
    expect(BigInt(forwardedSpan.attributes[0].value.intValue)).toBe(-9007199254740993n);
    expect(forwardedSpan.attributes[1].value.doubleValue).toBe(1.5e300);
    expect(forwardedSpan.attributes[2].value.stringValue).toBe('a: 12345678901234567 " ,99999999999999999');
    expect(forwardedSpan.vendorExtension).toEqual({ x: [1, 2, 3] });
    expect(forwarded.resourceSpans[0]).not.toHaveProperty('futureField');
  });
});

describe('enforceExport with a real OpenTelemetry SDK as the client', () => {
  async function exportedSpans() {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'ci-job', 'ci.job.id': 4242 }),
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    const tracer = provider.getTracer('spec');
    const inTrace = (traceId: string) => trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: '00f067aa0ba902b7', traceFlags: TraceFlags.SAMPLED });
    const own = tracer.startSpan('build', { attributes: { 'build.target': 'all' } }, inTrace(GRANT.traceId));
    own.addEvent('cache-miss', { key: 'deps' });
    own.end();
    tracer.startSpan('elsewhere', {}, inTrace(FOREIGN_TRACE)).end();
    await provider.forceFlush();
    return exporter.getFinishedSpans();
  }

  it.each([
    ['protobuf', ProtobufTraceSerializer],
    ['json', JsonTraceSerializer],
  ] as const)('enforces the %s export the SDK serializes', async (encoding, serializer) => {
    const body = Buffer.from(serializer.serializeRequest(await exportedSpans())!);

    const result = enforceExport('traces', encoding, body, GRANT, 1000);

    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: 1 });
    const [resourceSpans] = decode('traces', result.body, encoding).resourceSpans;
    const [forwardedSpan] = resourceSpans.scopeSpans[0].spans;
    expect(forwardedSpan.name).toBe('build');
    expect(forwardedSpan.events[0].name).toBe('cache-miss');
    expect(attributesOf(resourceSpans).filter((kv) => kv.key === 'ci.job.id')).toEqual([{ key: 'ci.job.id', value: { intValue: '1001' } }]);
    expect(attributesOf(resourceSpans).map((kv) => kv.key)).toContain('service.name');
  });
});

function metricsRequest(): Json {
  const exemplar = {
    timeUnixNano: '1700000000000000001',
    asDouble: 2.5,
    spanId: '1122334455667788',
    traceId: GRANT.traceId,
  };
  return {
    resourceMetrics: [
      {
        resource: {
          attributes: [
            { key: 'ci.runner.id', value: { intValue: '1' } },
            { key: 'service.name', value: { stringValue: 'm' } },
          ],
        },
        scopeMetrics: [
          {
            scope: { name: 'meter' },
            metrics: [
              { name: 'g', gauge: { dataPoints: [{ timeUnixNano: '1700000000000000000', asInt: '5' }] } },
              {
                name: 's',
                sum: {
                  dataPoints: [{ asDouble: 1.5, exemplars: [exemplar] }, { asDouble: 2 }],
                  aggregationTemporality: 2,
                  isMonotonic: true,
                },
              },
              {
                name: 'h',
                histogram: {
                  dataPoints: [{ count: '3', sum: 6, bucketCounts: ['1', '2'], explicitBounds: [1], exemplars: [exemplar] }],
                  aggregationTemporality: 1,
                },
              },
              {
                name: 'e',
                exponentialHistogram: {
                  dataPoints: [{ count: '2', scale: 3, zeroCount: '1', positive: { offset: -2, bucketCounts: ['1', '1'] } }],
                },
              },
              {
                name: 'q',
                summary: { dataPoints: [{ count: '1', sum: 1, quantileValues: [{ quantile: 0.5, value: 1 }] }] },
              },
            ],
          },
        ],
      },
      { scopeMetrics: [{ metrics: [{ name: 'lonely', gauge: { dataPoints: [{ asDouble: 0.5 }] } }] }] },
    ],
  };
}

function logsRequest(): Json {
  return {
    resourceLogs: [
      {
        resource: { attributes: [{ key: 'cicd.pipeline.task.run.id', value: { stringValue: 'forged' } }] },
        scopeLogs: [
          {
            scope: { name: 'logger' },
            logRecords: [
              {
                timeUnixNano: '1700000000000000000',
                severityNumber: 9,
                body: { stringValue: 'hello' },
                traceId: FOREIGN_TRACE,
              },
              { severityText: 'WARN', body: { kvlistValue: { values: [{ key: 'a', value: { intValue: '1' } }] } } },
            ],
          },
        ],
      },
    ],
  };
}

describe.each(['protobuf', 'json'] as const)('enforceExport metrics and logs (%s)', (encoding) => {
  it('stamps every resource of a metrics export, counts its data points and keeps them intact', () => {
    const request = metricsRequest();
    const result = enforceExport('metrics', encoding, encode('metrics', request, encoding), GRANT, 0);

    expect(result).toMatchObject({ forwardedItems: 7, rejectedItems: 0, nothingToForward: false });
    const forwarded = decode('metrics', result.body, encoding);
    const sent = decode('metrics', encode('metrics', request, encoding), encoding);
    expect(attributesOf(forwarded.resourceMetrics[0])).toEqual([{ key: 'service.name', value: { stringValue: 'm' } }, ...EXPECTED_RESOURCE_STAMP]);
    expect(attributesOf(forwarded.resourceMetrics[1])).toEqual(EXPECTED_RESOURCE_STAMP);
    expect(forwarded.resourceMetrics.map((rm: Json) => rm.scopeMetrics)).toEqual(sent.resourceMetrics.map((rm: Json) => rm.scopeMetrics));
  });

  it('stamps a logs export, counts its records and leaves them alone (log trace ids are not filtered)', () => {
    const request = logsRequest();
    const result = enforceExport('logs', encoding, encode('logs', request, encoding), GRANT, 0);

    expect(result).toMatchObject({ forwardedItems: 2, rejectedItems: 0, nothingToForward: false });
    const forwarded = decode('logs', result.body, encoding);
    const sent = decode('logs', encode('logs', request, encoding), encoding);
    expect(stampedOf(forwarded.resourceLogs[0])).toEqual(EXPECTED_RESOURCE_STAMP);
    expect(forwarded.resourceLogs[0].scopeLogs).toEqual(sent.resourceLogs[0].scopeLogs);
  });
});

describe('enforceExport malformed bodies', () => {
  const valid = encode('traces', tracesRequest(), 'protobuf');

  it.each([
    ['truncated protobuf', 'protobuf', valid.subarray(0, valid.length - 7)],
    ['protobuf length past the end', 'protobuf', Buffer.from([0x0a, 0x05, 0x01])],
    ['resource_spans with a varint wire type', 'protobuf', Buffer.from([0x08, 0x01])],
    ['span with a varint wire type', 'protobuf', Buffer.from([0x0a, 0x04, 0x12, 0x02, 0x10, 0x01])],
    ['field number 0', 'protobuf', Buffer.from([0x02, 0x00])],
    ['unterminated varint', 'protobuf', Buffer.from([0x0a, 0xff])],
    ['not JSON', 'json', Buffer.from('{"resourceSpans": [')],
    ['JSON array at the top', 'json', Buffer.from('[]')],
    ['resourceSpans not an array', 'json', Buffer.from('{"resourceSpans": {}}')],
    ['span not an object', 'json', Buffer.from('{"resourceSpans":[{"scopeSpans":[{"spans":[42]}]}]}')],
    ['numeric traceId', 'json', Buffer.from('{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":1}]}]}]}')],
    ['resource not an object', 'json', Buffer.from('{"resourceSpans":[{"resource":"x"}]}')],
    ['invalid UTF-8', 'json', Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])],
    ['empty JSON body', 'json', Buffer.alloc(0)],
    ['deprecated JSON container not an array', 'json', Buffer.from('{"resourceSpans":[{"deprecatedScopeSpans":{}}]}')],
  ] as const)('%s → OtlpPayloadError', (_name, encoding, body) => {
    expect(() => enforceExport('traces', encoding, body, GRANT, 1000)).toThrow(OtlpPayloadError);
  });

  it('rejects a metric carrying two kinds of data in JSON', () => {
    const body = Buffer.from('{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"gauge":{},"sum":{}}]}]}]}');
    expect(() => enforceExport('metrics', 'json', body, GRANT, 0)).toThrow(OtlpPayloadError);
  });

  it('treats a bad grant as a programming error, not a bad request', () => {
    expect(() => enforceExport('traces', 'protobuf', valid, { ...GRANT, traceId: 'nope' }, 1)).toThrow(TypeError);
  });
});

describe('enforceExport on corrupted bodies', () => {
  // Deterministic pseudo-random corruption: whatever the gateway accepts keeps the trace confinement and the
  // identity stamping; whatever it refuses is refused as a bad request, never as a crash.
  function corruptions(seedBody: Buffer, alphabet: Buffer, count: number): Buffer[] {
    let seed = 42;
    const random = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    return Array.from({ length: count }, () => {
      const mutated = Buffer.from(seedBody);
      for (let k = 1 + random(3); k > 0; k--) mutated[random(mutated.length)] = alphabet[random(alphabet.length)];
      return random(8) === 0 ? mutated.subarray(0, random(mutated.length)) : mutated;
    });
  }

  it.each(['protobuf', 'json'] as const)('%s: refuses as bad request or forwards only the grant trace', (encoding) => {
    const seedBody = encode('traces', tracesRequest(), encoding);
    const alphabet = encoding === 'json' ? Buffer.from('0123456789abcdefABCDEF_-.e ":,{}[]') : Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    let forwarded = 0;
    for (const body of corruptions(seedBody, alphabet, 3000)) {
      let result;
      try {
        result = enforceExport('traces', encoding, body, GRANT, 1000);
      } catch (error) {
        expect(error).toBeInstanceOf(OtlpPayloadError);
        continue;
      }
      let decoded: Json;
      try {
        decoded = decode('traces', result.body, encoding);
      } catch {
        continue; // damage inside a span the gateway does not parse: the collector refuses it
      }
      forwarded++;
      for (const resourceSpans of decoded.resourceSpans ?? []) {
        expect(stampedOf(resourceSpans)).toEqual(EXPECTED_RESOURCE_STAMP);
        for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
          for (const forwardedSpan of scopeSpans.spans ?? []) {
            expect(String(forwardedSpan.traceId).toLowerCase()).toBe(GRANT.traceId);
          }
        }
      }
    }
    expect(forwarded).toBeGreaterThan(50);
  });
});

/** GitLab Runner's `job_execution` span attributes (gitlab-runner commands/tracing.go), spoofed. */
const RUNNER_SPAN_ATTRIBUTES: Json[] = [
  { key: 'ci.job.id', value: { intValue: '1' } },
  { key: 'ci.pipeline.id', value: { stringValue: '1' } },
  { key: 'ci.pipeline.source', value: { stringValue: 'push' } },
  { key: 'ci.project.id', value: { intValue: '999' } },
  { key: 'ci.runner.id', value: { stringValue: 'another-runner' } },
  { key: 'ci.runner.executor', value: { stringValue: 'docker' } },
  { key: 'ci.job.status', value: { stringValue: 'success' } },
  { key: 'ci.project.id', value: { intValue: '998' } },
];
/** The same, stamped: the grant's ids in the runner's types (integers, `ci.pipeline.id` a string), once each. */
const STAMPED_RUNNER_SPAN_ATTRIBUTES: Json[] = [
  { key: 'ci.job.id', value: { intValue: '1001' } },
  { key: 'ci.pipeline.id', value: { stringValue: '500' } },
  { key: 'ci.pipeline.source', value: { stringValue: 'push' } },
  { key: 'ci.project.id', value: { intValue: '7' } },
  { key: 'ci.runner.id', value: { intValue: '17' } },
  { key: 'ci.runner.executor', value: { stringValue: 'docker' } },
  { key: 'ci.job.status', value: { stringValue: 'success' } },
];
const SPOOFED_ITEM_ATTRIBUTES: Json[] = [
  { key: 'http.route', value: { stringValue: '/' } },
  { key: 'ci.project.id', value: { intValue: '999' } },
  { key: 'ci.job.id', value: { stringValue: 'not-a-number' } },
];
const STAMPED_ITEM_ATTRIBUTES: Json[] = [
  { key: 'http.route', value: { stringValue: '/' } },
  { key: 'ci.project.id', value: { intValue: '7' } },
  { key: 'ci.job.id', value: { intValue: '1001' } },
];

describe.each(['protobuf', 'json'] as const)('enforceExport item-level identity (%s)', (encoding) => {
  it("overwrites the runner's spoofed span attributes with the grant's, in the runner's types, never duplicated", () => {
    const request = {
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
          scopeSpans: [
            {
              spans: [
                span(GRANT.traceId, 'job_execution', {
                  attributes: RUNNER_SPAN_ATTRIBUTES,
                  events: [{ name: 'e', attributes: [{ key: 'ci.project.id', value: { intValue: '5' } }] }],
                }),
                span(GRANT.traceId, 'plain', { attributes: [{ key: 'test.step', value: { stringValue: 'rspec' } }] }),
              ],
            },
          ],
        },
      ],
    };

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    const [runnerSpan, plainSpan] = decode('traces', result.body, encoding).resourceSpans[0].scopeSpans[0].spans;
    expect(runnerSpan.attributes).toEqual(STAMPED_RUNNER_SPAN_ATTRIBUTES);
    // Only span attributes are the runner's identity; events keep theirs, and nothing is added to other spans.
    expect(runnerSpan.events[0].attributes).toEqual([{ key: 'ci.project.id', value: { intValue: '5' } }]);
    expect(plainSpan.attributes).toEqual([{ key: 'test.step', value: { stringValue: 'rspec' } }]);
    expect(result.forwardedItems).toBe(2);
  });

  it('stamps data point attributes of every metric kind the same way', () => {
    const point = { attributes: SPOOFED_ITEM_ATTRIBUTES };
    const request = {
      resourceMetrics: [
        {
          scopeMetrics: [
            {
              metrics: [
                { name: 'g', gauge: { dataPoints: [{ ...point, asInt: '5' }, { asInt: '6' }] } },
                { name: 's', sum: { dataPoints: [{ ...point, asDouble: 1.5 }], aggregationTemporality: 2, isMonotonic: true } },
                { name: 'h', histogram: { dataPoints: [{ ...point, count: '1' }], aggregationTemporality: 1 } },
                { name: 'e', exponentialHistogram: { dataPoints: [{ ...point, count: '1', scale: 2 }] } },
                { name: 'q', summary: { dataPoints: [{ ...point, count: '1' }] } },
              ],
            },
          ],
        },
      ],
    };

    const result = enforceExport('metrics', encoding, encode('metrics', request, encoding), GRANT, 0);

    const metrics = decode('metrics', result.body, encoding).resourceMetrics[0].scopeMetrics[0].metrics;
    const pointsOf = (metric: Json) => (metric.gauge ?? metric.sum ?? metric.histogram ?? metric.exponentialHistogram ?? metric.summary).dataPoints;
    expect(metrics.map((metric: Json) => pointsOf(metric)[0].attributes)).toEqual(Array(5).fill(STAMPED_ITEM_ATTRIBUTES));
    expect(pointsOf(metrics[0])[1].attributes).toBeUndefined();
    expect(metrics[1].sum).toMatchObject({ aggregationTemporality: 2, isMonotonic: true });
    expect(result.forwardedItems).toBe(6);
  });

  it('stamps log record attributes the same way', () => {
    const request = { resourceLogs: [{ scopeLogs: [{ logRecords: [{ body: { stringValue: 'hi' }, attributes: SPOOFED_ITEM_ATTRIBUTES }] }] }] };

    const result = enforceExport('logs', encoding, encode('logs', request, encoding), GRANT, 0);

    const [record] = decode('logs', result.body, encoding).resourceLogs[0].scopeLogs[0].logRecords;
    expect(record.attributes).toEqual(STAMPED_ITEM_ATTRIBUTES);
    expect(record.body).toEqual({ stringValue: 'hi' });
  });
});

// The Collector's pdata decoders read Resource{Spans,Metrics,Logs} field 1000 (deprecated_scope_*) and, in JSON,
// deprecatedScope* / deprecated_scope_* (and, in older versions, instrumentationLibrary* / instrumentation_library_*),
// using them when the current scopes are empty. An independent schema that knows field 1000 checks what leaves.
const DEPRECATED_SIGNALS = {
  traces: { plural: 'Spans', request: 'Trace', items: 'spans' },
  metrics: { plural: 'Metrics', request: 'Metrics', items: 'metrics' },
  logs: { plural: 'Logs', request: 'Logs', items: 'log_records' },
} as const;
protobuf.parse(
  `syntax = "proto3"; package otlp;\n` +
    Object.values(DEPRECATED_SIGNALS)
      .map(
        ({ plural, request }) =>
          `message Resource${plural}WithDeprecated { Resource resource = 1; repeated Scope${plural} scope_${plural.toLowerCase()} = 2;` +
          ` string schema_url = 3; repeated Scope${plural} deprecated_scope_${plural.toLowerCase()} = 1000; }\n` +
          `message Export${request}ServiceRequestWithDeprecated { repeated Resource${plural}WithDeprecated resource_${plural.toLowerCase()} = 1; }\n`,
      )
      .join(''),
  schema,
);

describe.each(['traces', 'metrics', 'logs'] as const)('enforceExport deprecated %s containers (issue 9 item 1)', (signal) => {
  const { plural, request: requestName } = DEPRECATED_SIGNALS[signal];
  const resources = `resource${plural}`;
  const scopes = `scope${plural}`;
  const withDeprecated = schema.lookupType(`otlp.Export${requestName}ServiceRequestWithDeprecated`);
  const spoofed = [{ key: 'ci.job.id', value: { intValue: '1' } }];

  /** A scope holding one item of the grant's job (spoofing its identity) and, for traces, one of another trace. */
  function smuggledScope(): Json {
    if (signal === 'traces') {
      return { spans: [span(GRANT.traceId, 'own', { attributes: spoofed }), span(FOREIGN_TRACE, 'smuggled')] };
    }
    if (signal === 'metrics') return { metrics: [{ name: 'smuggled', gauge: { dataPoints: [{ asInt: '1', attributes: spoofed }] } }] };
    return { logRecords: [{ body: { stringValue: 'smuggled' }, attributes: spoofed }] };
  }
  function currentScope(): Json {
    if (signal === 'traces') return { spans: [span(GRANT.traceId, 'current')] };
    if (signal === 'metrics') return { metrics: [{ name: 'current', gauge: { dataPoints: [{ asInt: '2' }] } }] };
    return { logRecords: [{ body: { stringValue: 'current' } }] };
  }
  /** Names (spans, metrics) or bodies (logs) of the items forwarded, with their item-level attributes. */
  function itemsOf(forwarded: Json): Array<{ name: string; attributes?: Json[] }> {
    return (forwarded[resources] ?? []).flatMap((rs: Json) =>
      (rs[scopes] ?? []).flatMap((scope: Json) => {
        if (signal === 'traces') return (scope.spans ?? []).map((s: Json) => ({ name: s.name, attributes: s.attributes }));
        if (signal === 'metrics') return (scope.metrics ?? []).map((m: Json) => ({ name: m.name, attributes: m.gauge.dataPoints[0].attributes }));
        return (scope.logRecords ?? []).map((r: Json) => ({ name: r.body.stringValue, attributes: r.attributes }));
      }),
    );
  }
  const decodeWithDeprecated = (body: Buffer) => base64ToHex(withDeprecated.toObject(withDeprecated.decode(body), { longs: String, bytes: String }));
  const stamped = [{ key: 'ci.job.id', value: { intValue: '1001' } }];

  it('protobuf field 1000 beside no current scope: enforced and forwarded as current scopes', () => {
    const body = Buffer.from(
      withDeprecated
        .encode(
          withDeprecated.fromObject(hexToBase64({ [resources]: [{ [`deprecated${scopes[0].toUpperCase()}${scopes.slice(1)}`]: [smuggledScope()] }] }) as Json),
        )
        .finish(),
    );

    const result = enforceExport(signal, 'protobuf', body, GRANT, 1000);

    const forwarded = decodeWithDeprecated(result.body);
    expect(forwarded[resources][0][`deprecated${scopes[0].toUpperCase()}${scopes.slice(1)}`]).toBeUndefined();
    const expectedName = signal === 'traces' ? 'own' : 'smuggled';
    expect(itemsOf(forwarded)).toEqual([{ name: expectedName, attributes: stamped }]);
    expect(stampedOf(forwarded[resources][0])).toEqual(EXPECTED_RESOURCE_STAMP);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: signal === 'traces' ? 1 : 0 });
  });

  it('protobuf field 1000 beside current scopes: dropped, as the Collector ignores it there', () => {
    const deprecatedName = `deprecated${scopes[0].toUpperCase()}${scopes.slice(1)}`;
    const body = Buffer.from(
      withDeprecated
        .encode(withDeprecated.fromObject(hexToBase64({ [resources]: [{ [scopes]: [currentScope()], [deprecatedName]: [smuggledScope()] }] }) as Json))
        .finish(),
    );

    const result = enforceExport(signal, 'protobuf', body, GRANT, 1000);

    const forwarded = decodeWithDeprecated(result.body);
    expect(forwarded[resources][0][deprecatedName]).toBeUndefined();
    expect(itemsOf(forwarded).map((item) => item.name)).toEqual(['current']);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: 0 });
  });

  const jsonNames = (['deprecatedScope', 'deprecated_scope_', 'instrumentationLibrary', 'instrumentation_library_'] as const).map((prefix) =>
    prefix.endsWith('_') ? `${prefix}${plural.toLowerCase()}` : `${prefix}${plural}`,
  );

  it.each(jsonNames)('JSON %s beside an empty current scope list: enforced and forwarded as current scopes', (name) => {
    const body = Buffer.from(JSON.stringify({ [resources]: [{ [scopes]: [], [name]: [smuggledScope()] }] }));

    const result = enforceExport(signal, 'json', body, GRANT, 1000);

    const forwarded = JSON.parse(result.body.toString());
    expect(forwarded[resources][0]).not.toHaveProperty(name);
    expect(itemsOf(forwarded)).toEqual([{ name: signal === 'traces' ? 'own' : 'smuggled', attributes: stamped }]);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: signal === 'traces' ? 1 : 0 });
  });

  it.each(jsonNames)('JSON %s beside current scopes: dropped, never forwarded', (name) => {
    const body = Buffer.from(JSON.stringify({ [resources]: [{ [scopes]: [currentScope()], [name]: [smuggledScope()] }] }));

    const result = enforceExport(signal, 'json', body, GRANT, 1000);

    const forwarded = JSON.parse(result.body.toString());
    expect(forwarded[resources][0]).not.toHaveProperty(name);
    expect(result.body.toString()).not.toContain('smuggled');
    expect(itemsOf(forwarded).map((item) => item.name)).toEqual(['current']);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: 0 });
  });

  it('JSON current containers in snake_case, which the Collector also reads, are enforced the same way', () => {
    const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    const scope = smuggledScope();
    if (signal === 'logs') {
      scope.log_records = scope.logRecords;
      delete scope.logRecords;
    }
    if (signal === 'metrics') {
      scope.metrics[0].gauge.data_points = scope.metrics[0].gauge.dataPoints;
      delete scope.metrics[0].gauge.dataPoints;
    }
    const body = Buffer.from(JSON.stringify({ [snake(resources)]: [{ [snake(scopes)]: [scope] }] }));

    const result = enforceExport(signal, 'json', body, GRANT, 1000);

    const forwarded = JSON.parse(result.body.toString());
    expect(itemsOf(forwarded)).toEqual([{ name: signal === 'traces' ? 'own' : 'smuggled', attributes: stamped }]);
    expect(stampedOf(forwarded[resources][0])).toEqual(EXPECTED_RESOURCE_STAMP);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: signal === 'traces' ? 1 : 0 });
  });

  it('protobuf fields outside the allow-list are dropped at the request, resource, scope and metric levels', () => {
    const tagged = (fieldNumber: number, payload: Buffer) => {
      const header = protobuf.Writer.create()
        .uint32((fieldNumber << 3) | 2)
        .uint32(payload.length)
        .finish();
      return Buffer.concat([Buffer.from(header), payload]);
    };
    const encodeAs = (type: string, object: Json) => {
      const messageType = schema.lookupType(`otlp.${type}`);
      return Buffer.from(messageType.encode(messageType.fromObject(hexToBase64(object) as Json)).finish());
    };
    const smuggledScopeBytes = encodeAs(`Scope${plural}`, smuggledScope());
    const smuggledItemBytes = smuggledScopeBytes.subarray(2); // any bytes holding 'smuggled'
    let scope = Buffer.concat([encodeAs(`Scope${plural}`, currentScope()), tagged(5, smuggledItemBytes)]);
    if (signal === 'metrics') {
      // Metric field 4 was int_gauge (removed from OTLP); an unknown field inside Gauge could be a newer member.
      const gauge = Buffer.concat([encodeAs('Gauge', { dataPoints: [{ asInt: '2' }] }), tagged(9, smuggledItemBytes)]);
      const metric = Buffer.concat([encodeAs('Metric', { name: 'current' }), tagged(5, gauge), tagged(4, smuggledItemBytes)]);
      scope = Buffer.concat([tagged(2, metric), tagged(5, smuggledItemBytes)]);
    }
    const container = Buffer.concat([tagged(2, scope), tagged(7, smuggledScopeBytes)]);
    const body = Buffer.concat([tagged(1, container), tagged(9, smuggledScopeBytes)]);

    const result = enforceExport(signal, 'protobuf', body, GRANT, 1000);

    expect(result.body.includes('smuggled')).toBe(false);
    expect(itemsOf(decode(signal, result.body, 'protobuf')).map((item) => item.name)).toEqual(['current']);
  });

  it('JSON members outside the allow-list are dropped at the request, resource, scope and metric levels', () => {
    const scope: Json = { ...currentScope(), futureItems: [smuggledScope()] };
    if (signal === 'metrics') scope.metrics[0].futureData = { dataPoints: [{ asInt: '9' }] };
    const body = Buffer.from(JSON.stringify({ [resources]: [{ [scopes]: [scope], futureScopes: [smuggledScope()] }], futureResources: [{}] }));

    const result = enforceExport(signal, 'json', body, GRANT, 1000);

    expect(result.body.toString()).not.toMatch(/future|smuggled/);
    expect(itemsOf(JSON.parse(result.body.toString())).map((item) => item.name)).toEqual(['current']);
  });
});

describe.each(['protobuf', 'json'] as const)('enforceExport per-span limits (%s)', (encoding) => {
  const spanType = schema.lookupType('otlp.Span');
  const attribute = (key: string, value: Json) => ({ key, value });
  const LIMITS = { maxBytes: Infinity, maxAttributes: 3, maxAttributeValueBytes: 10 };

  it('rejects spans with too many attributes or too long a value through partial success, never truncating', () => {
    const spans = [
      span(GRANT.traceId, 'fits', {
        attributes: [attribute('a', { stringValue: 'é'.repeat(5) }), attribute('b', { intValue: '1' }), attribute('c', { boolValue: true })],
      }),
      span(GRANT.traceId, 'too many', { attributes: ['a', 'b', 'c', 'd'].map((key) => attribute(key, { intValue: '1' })) }),
      span(GRANT.traceId, 'too long', { attributes: [attribute('a', { stringValue: `${'é'.repeat(5)}x` })] }),
      span(GRANT.traceId, 'bytes fit', { attributes: [attribute('a', { bytesValue: Buffer.alloc(10).toString('base64') })] }),
      span(GRANT.traceId, 'bytes too long', { attributes: [attribute('a', { bytesValue: Buffer.alloc(11).toString('base64') })] }),
      span(FOREIGN_TRACE, 'foreign and too many', { attributes: ['a', 'b', 'c', 'd'].map((key) => attribute(key, { intValue: '1' })) }),
    ];
    const request = { resourceSpans: [{ scopeSpans: [{ spans }] }] };

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000, LIMITS);

    const forwarded = decode('traces', result.body, encoding);
    expect(spanNames(forwarded)).toEqual(['fits', 'bytes fit']);
    expect(forwarded.resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.stringValue).toBe('é'.repeat(5));
    expect(result.rejections).toEqual({
      foreignTrace: 1,
      undecodable: 0,
      controlPlaneSpanId: 0,
      reservedAttribute: 0,
      overLimits: 3,
      overQuota: 0,
      overRate: 0,
    });
    expect(result.errorMessage).toContain('3 spans rejected: over the per-span limits (Infinity bytes encoded, 3 attributes, 10 bytes per attribute value)');
  });

  it('measures a span in the encoding it was sent in: at the limit it goes on, one byte over it does not', () => {
    const sized = span(GRANT.traceId, 'sized', { attributes: [attribute('blob', { stringValue: 'x'.repeat(300) })] });
    const size =
      encoding === 'json' ? Buffer.byteLength(JSON.stringify(sized)) : spanType.encode(spanType.fromObject(hexToBase64(sized) as Json)).finish().length;
    const body = encode('traces', { resourceSpans: [{ scopeSpans: [{ spans: [sized] }] }] }, encoding);
    const limits = (maxBytes: number) => ({ maxBytes, maxAttributes: 128, maxAttributeValueBytes: 1000 });

    expect(enforceExport('traces', encoding, body, GRANT, 1000, limits(size))).toMatchObject({ forwardedItems: 1, rejectedItems: 0 });
    expect(enforceExport('traces', encoding, body, GRANT, 1000, limits(size - 1))).toMatchObject({
      forwardedItems: 0,
      rejectedItems: 1,
      nothingToForward: true,
    });
  });
});

describe.each(['protobuf', 'json'] as const)('enforceExport span budget (%s)', (encoding) => {
  it('tells spans over the job quota from spans over the job rate', () => {
    const spans = ['1', '2', '3', '4', '5'].map((name) => span(GRANT.traceId, name));
    const body = encode('traces', { resourceSpans: [{ scopeSpans: [{ spans }] }] }, encoding);

    const result = enforceExport('traces', encoding, body, GRANT, { quota: 3, rate: 2 });

    expect(spanNames(decode('traces', result.body, encoding))).toEqual(['1', '2']);
    expect(result.rejections).toEqual({
      foreignTrace: 0,
      undecodable: 0,
      controlPlaneSpanId: 0,
      reservedAttribute: 0,
      overLimits: 0,
      overQuota: 2,
      overRate: 1,
    });
    expect(result.errorMessage).toBe(
      "2 spans rejected: this CI job's span quota is exhausted; 1 span rejected: this CI job is sending more spans per second than it may",
    );
  });
});

describe.each(['protobuf', 'json'] as const)('enforceExport with a grant object reused across exports (%s)', (encoding) => {
  it("stamps and filters with the grant's values as they are at each export, also after the object changed", () => {
    const grant: GatewayGrant = { ...GRANT };
    const body = encode('traces', tracesRequest(), encoding);
    const enforced = () => decode('traces', enforceExport('traces', encoding, body, grant, 1000).body, encoding);

    const first = enforced();
    expect(enforced()).toEqual(first);

    grant.jobId = 2002;
    grant.traceId = FOREIGN_TRACE;
    const changed = enforced();

    expect(spanNames(changed)).toEqual(['foreign-1', 'foreign-2', 'foreign-3']);
    expect(stampedOf(changed.resourceSpans[0])).toContainEqual({ key: 'ci.job.id', value: { intValue: '2002' } });
    expect(stampedOf(changed.resourceSpans[0])).toContainEqual({ key: 'cicd.pipeline.task.run.id', value: { stringValue: '2002' } });
  });
});

describe('enforceExport protobuf span walk', () => {
  // The gateway walks spans as encoders write them with a fast path and anything else with the general reader.
  // A span prefixed with an unknown field whose length is written in three bytes (still valid protobuf, and
  // kept as it is) always takes the general reader: both must reach the same verdict on every span.
  let seed = 7;
  const random = (n: number) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) % n;
  };
  const field = (tag: number[], ...payload: number[][]) => [...tag, ...payload.flat()];
  const delimited = (fieldNumber: number, bytes: number[]) => [...lengthDelimitedHeader(fieldNumber, bytes.length), ...bytes];
  const keyValue = (key: string, valueLength: number) => [...delimited(1, [...Buffer.from(key)]), ...delimited(2, delimited(1, Array(valueLength).fill(0x61)))];
  const PIECES: Array<() => number[]> = [
    () => delimited(1, [...Buffer.from(GRANT.traceId, 'hex')]),
    () => delimited(1, [...Buffer.from(FOREIGN_TRACE, 'hex')]),
    () => delimited(1, [1, 2, 3]),
    () => field([0x08], [random(200)]), // trace_id as a varint: a malformed span
    () => field([0x4d], [1, 2, 3, 4]), // attributes as fixed32: malformed
    () => delimited(9, keyValue(['ci.job.id', 'ci.project.id', 'http.route', 'k'][random(4)], random(20))),
    () => delimited(9, keyValue('db.statement', 150 + random(300))), // a two-byte length
    () => delimited(5, [...Buffer.from('span')]),
    () => field([0x30], [0x80 | random(128), random(128)]), // kind, two-byte varint
    () => field([0x39], Array(8).fill(7)), // start_time_unix_nano
    () => field([0x85, 0x01], [1, 1, 0, 0]), // flags: field 16, a two-byte tag
    () => field([0xa3, 0x06], [0xa4, 0x06]), // an empty group, field 100
    () => field([0xa4, 0x06]), // an end-group alone: malformed
    () => field([0x06]), // wire type 6 on field 0: malformed
    () => field([0x78], Array(11).fill(0xff)), // an 11-byte varint: malformed
    () => [random(256)], // a stray byte
  ];
  const exportOf = (spanBytes: number[]) => Buffer.from(delimited(1, delimited(2, delimited(2, spanBytes))));
  const verdict = (body: Buffer) => {
    try {
      const result = enforceExport('traces', 'protobuf', body, GRANT, 1000, { maxBytes: 1e9, maxAttributes: 3, maxAttributeValueBytes: 200 });
      const spans = decode('traces', result.body, 'protobuf').resourceSpans?.[0]?.scopeSpans?.[0]?.spans ?? [];
      return { forwarded: result.forwardedItems, rejections: result.rejections, attributes: spans.map((span: Json) => span.attributes) };
    } catch (error) {
      return { refused: error instanceof OtlpPayloadError };
    }
  };

  it('refuses an attribute whose key runs past it as a bad request, whatever else the span holds', () => {
    const traceId = delimited(1, [...Buffer.from(GRANT.traceId, 'hex')]);
    const unreadable = delimited(9, [0x0a, 0x50, 0x61, 0x62]);
    expect(() => enforceExport('traces', 'protobuf', exportOf([...traceId, ...unreadable]), GRANT, 1000)).toThrow(OtlpPayloadError);
    expect(() => enforceExport('traces', 'protobuf', exportOf([...traceId, ...unreadable, ...delimited(9, keyValue('ci.job.id', 1))]), GRANT, 1000)).toThrow(
      OtlpPayloadError,
    );
  });

  it('reaches the same verdict on the fast path and the general reader over many spans, malformed ones included', () => {
    const generalOnly = [...lengthDelimitedHeader(100, 0).subarray(0, 2), 0x80, 0x80, 0x00];
    const outcomes = new Set<string>();
    for (let i = 0; i < 5000; i++) {
      const spanBytes = Array.from({ length: 1 + random(6) }, () => PIECES[random(PIECES.length)]()).flat();
      const viaFastPath = verdict(exportOf(spanBytes));
      expect(verdict(exportOf([...generalOnly, ...spanBytes]))).toEqual(viaFastPath);
      outcomes.add(JSON.stringify(viaFastPath));
    }
    // The generator reaches refusals, forwarded spans and every rejection reason the walk decides.
    expect([...outcomes].some((outcome) => outcome.includes('refused'))).toBe(true);
    expect([...outcomes].some((outcome) => outcome.includes('"forwarded":1'))).toBe(true);
    expect([...outcomes].some((outcome) => outcome.includes('"overLimits":1'))).toBe(true);
    expect([...outcomes].some((outcome) => outcome.includes('"foreignTrace":1'))).toBe(true);
  });
});
