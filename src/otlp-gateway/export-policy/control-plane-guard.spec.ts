import * as protobuf from 'protobufjs';
import { enforceExport } from './enforce-export';
import type { OtlpEncoding, OtlpSignal } from '../../otlp/otlp-encoding';
import { otlpProto } from '../../otlp/otlp-proto';
import { encodeBytesField } from '../../otlp/otlp-wire';
import { CONTROL_PLANE_MARK } from '../../otlp/control-plane-mark';
import type { GatewayGrant } from './otlp-types';

/**
 * SPEC §12 "Trust" at the gateway: a job writes only its own spans. A span with one of the control plane's span ids
 * for the job, or carrying (itself or through its resource) an attribute readers trust for versions, decisions or
 * the path, is refused through partial success, span by span, in both encodings. Independent codec: protobufjs.
 */
const schema = otlpProto();
const REQUEST_TYPES: Record<OtlpSignal, protobuf.Type> = {
  traces: schema.lookupType('otlp.ExportTraceServiceRequest'),
  metrics: schema.lookupType('otlp.ExportMetricsServiceRequest'),
  logs: schema.lookupType('otlp.ExportLogsServiceRequest'),
};

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const FOREIGN_TRACE = '0af7651916cd43dd8448eb211c80319c';
const JOB_SPAN = '00f067aa0ba902b7';
const QUEUE_WAIT_SPAN = '1a2b3c4d5e6f7081';
const PIPELINE_SPAN = '92a3b4c5d6e7f809';
const ROOT_PIPELINE_SPAN = 'a0b1c2d3e4f50617';
const GRANT: GatewayGrant = {
  jobId: 1001,
  projectId: 7,
  pipelineId: 500,
  runnerId: 17,
  traceId: TRACE_ID,
  controlPlaneSpanIds: [JOB_SPAN, QUEUE_WAIT_SPAN, PIPELINE_SPAN, ROOT_PIPELINE_SPAN],
};

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

function convertIds(value: unknown, from: BufferEncoding, to: BufferEncoding, key = ''): unknown {
  if (Array.isArray(value)) return value.map((item) => convertIds(item, from, to));
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, convertIds(v, from, to, k)]));
  return ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, from).toString(to) : value;
}

function encode(signal: OtlpSignal, request: Json, encoding: OtlpEncoding): Buffer {
  if (encoding === 'json') return Buffer.from(JSON.stringify(request));
  const type = REQUEST_TYPES[signal];
  return Buffer.from(type.encode(type.fromObject(convertIds(request, 'hex', 'base64') as Json)).finish());
}

function decode(signal: OtlpSignal, body: Buffer, encoding: OtlpEncoding): Json {
  if (encoding === 'json') return JSON.parse(body.toString('utf8')) as Json;
  const type = REQUEST_TYPES[signal];
  return convertIds(type.toObject(type.decode(body), { longs: String, bytes: String, enums: Number }), 'base64', 'hex') as Json;
}

function span(name: string, spanId: string, attributes: Json[] = []): Json {
  return {
    traceId: TRACE_ID,
    spanId,
    parentSpanId: JOB_SPAN,
    name,
    kind: 1,
    startTimeUnixNano: '1700000000000000000',
    endTimeUnixNano: '1700000001000000000',
    attributes,
  };
}

const stringAttribute = (key: string, value: string) => ({ key, value: { stringValue: value } });

function traces(...resourceSpans: Json[]): Json {
  return { resourceSpans };
}

function resourceSpans(spans: Json[], resourceAttributes: Json[] = [stringAttribute('service.name', 'rspec')]): Json {
  return { resource: { attributes: resourceAttributes }, scopeSpans: [{ scope: { name: 'tests' }, spans }] };
}

function forwardedNames(request: Json): string[] {
  return (request.resourceSpans ?? []).flatMap((rs: Json) => (rs.scopeSpans ?? []).flatMap((ss: Json) => (ss.spans ?? []).map((s: Json) => s.name)));
}

const RESERVED_KEYS = [
  CONTROL_PLANE_MARK.key,
  'ci.pipeline.span.version',
  'ci.sampling.reason',
  'ci.job.critical_path',
  'ci.job.critical_path_seconds',
  'ci.job.slack_seconds',
  'ci.pipeline.critical_path.queue_seconds',
  'ci.job.critical_path.wait_seconds',
  'ci.job.attempt',
  'ci.job.retried',
];

describe.each(['protobuf', 'json'] as const)('a job writing the control plane’s spans (%s)', (encoding) => {
  it.each([
    ['its job span (the id TRACEPARENT hands it)', JOB_SPAN],
    ['its queue wait', QUEUE_WAIT_SPAN],
    ["its pipeline's span", PIPELINE_SPAN],
    ["its root pipeline's span", ROOT_PIPELINE_SPAN],
  ])('is refused a span with the id of %s, and its own spans go on', (_what, spanId) => {
    const request = traces(
      resourceSpans([
        span('job', spanId, [stringAttribute('ci.job.status', 'success')]),
        span('rspec', 'abcdefabcdef0001', [stringAttribute('ci.job.status', 'success')]),
      ]),
    );

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    expect(forwardedNames(decode('traces', result.body, encoding))).toEqual(['rspec']);
    expect(result).toMatchObject({ forwardedItems: 1, rejectedItems: 1, nothingToForward: false });
    expect(result.rejections).toMatchObject({ controlPlaneSpanId: 1, reservedAttribute: 0 });
    expect(result.errorMessage).toBe(
      `1 span rejected: span_id is the control plane's (the job, queue-wait or pipeline span GitLab's account is written on); refused as the control plane's: "job" (span_id ${spanId})`,
    );
  });

  it.each(RESERVED_KEYS)('is refused a span carrying %s, whatever its id', (key) => {
    const request = traces(
      resourceSpans([span('forged', 'abcdefabcdef0002', [stringAttribute('http.method', 'GET'), stringAttribute(key, '9')]), span('mine', 'abcdefabcdef0003')]),
    );

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    expect(forwardedNames(decode('traces', result.body, encoding))).toEqual(['mine']);
    expect(result.rejections).toMatchObject({ controlPlaneSpanId: 0, reservedAttribute: 1 });
    expect(result.errorMessage).toContain('refused as the control plane\'s: "forged" (span_id abcdefabcdef0002)');
  });

  it.each([CONTROL_PLANE_MARK.key, 'ci.pipeline.span.version', 'ci.job.critical_path'])(
    'is refused every span under a resource carrying %s, and the key reaches the collector nowhere',
    (key) => {
      const request = traces(
        resourceSpans([span('pipeline', 'abcdefabcdef0004'), span('bridge', 'abcdefabcdef0005')], [stringAttribute(key, CONTROL_PLANE_MARK.value)]),
        resourceSpans([span('mine', 'abcdefabcdef0006')]),
      );

      const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

      const forwarded = decode('traces', result.body, encoding);
      expect(forwardedNames(forwarded)).toEqual(['mine']);
      expect(result.rejections).toMatchObject({ reservedAttribute: 2 });
      expect(JSON.stringify(forwarded)).not.toContain(key);
    },
  );

  it('keeps what the gateway writes itself on a resource as before: its own ci.sampling.reason overwrites the exporter’s', () => {
    const request = traces(resourceSpans([span('mine', 'abcdefabcdef0007')], [stringAttribute('ci.sampling.reason', 'failed')]));

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    const forwarded = decode('traces', result.body, encoding);
    expect(forwardedNames(forwarded)).toEqual(['mine']);
    expect(forwarded.resourceSpans[0].resource.attributes.filter((kv: Json) => kv.key === 'ci.sampling.reason')).toEqual([
      stringAttribute('ci.sampling.reason', 'head'),
    ]);
  });

  it("forwards the runner's job_execution span under its job span, with the ci.* attributes readers do not trust", () => {
    const request = traces(
      resourceSpans([
        span('job_execution', 'abcdefabcdef0008', [
          { key: 'ci.job.id', value: { intValue: '1001' } },
          stringAttribute('ci.job.status', 'failed'),
          stringAttribute('ci.job.stage', 'test'),
        ]),
      ]),
    );

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    expect(forwardedNames(decode('traces', result.body, encoding))).toEqual(['job_execution']);
    expect(result.rejectedItems).toBe(0);
  });

  it('counts a span of another trace as such first, whatever its id', () => {
    const request = traces(resourceSpans([{ ...span('job', JOB_SPAN), traceId: FOREIGN_TRACE }]));

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1000);

    expect(result.rejections).toMatchObject({ foreignTrace: 1, controlPlaneSpanId: 0 });
  });

  it('names at most five refused spans, and says there were more', () => {
    const forged = Array.from({ length: 7 }, (_, i) =>
      span(`forged-${i}`, `abcdefabcdef01${String(i).padStart(2, '0')}`, [stringAttribute('ci.sampling.reason', 'failed')]),
    );

    const result = enforceExport('traces', encoding, encode('traces', traces(resourceSpans(forged)), encoding), GRANT, 1000);

    expect(result).toMatchObject({ forwardedItems: 0, rejectedItems: 7, nothingToForward: true });
    expect(result.errorMessage).toContain('"forged-4" (span_id abcdefabcdef0104), …');
    expect(result.errorMessage).not.toContain('forged-5');
  });

  it('does not charge a refused span against the quota', () => {
    const request = traces(resourceSpans([span('job', JOB_SPAN), span('mine', 'abcdefabcdef0009')]));

    const result = enforceExport('traces', encoding, encode('traces', request, encoding), GRANT, 1);

    expect(forwardedNames(decode('traces', result.body, encoding))).toEqual(['mine']);
    expect(result.rejections).toMatchObject({ controlPlaneSpanId: 1, overQuota: 0 });
  });

  it('drops the mark from the resource of metrics and logs, which are never refused one by one', () => {
    const request = {
      resourceMetrics: [
        {
          resource: { attributes: [stringAttribute(CONTROL_PLANE_MARK.key, CONTROL_PLANE_MARK.value)] },
          scopeMetrics: [{ metrics: [{ name: 'm', gauge: { dataPoints: [{ asInt: '1', timeUnixNano: '1' }] } }] }],
        },
      ],
    };

    const result = enforceExport('metrics', encoding, encode('metrics', request, encoding), GRANT, 1000);

    expect(result.forwardedItems).toBe(1);
    expect(JSON.stringify(decode('metrics', result.body, encoding))).not.toContain(CONTROL_PLANE_MARK.key);
  });
});

describe('a job writing the control plane’s spans, encoding specifics', () => {
  it('protobuf: a resource written after the spans it holds still refuses them', () => {
    const resourceType = schema.lookupType('otlp.Resource');
    const scopeSpansType = schema.lookupType('otlp.ScopeSpans');
    const scope = scopeSpansType
      .encode(scopeSpansType.fromObject(convertIds({ spans: [span('pipeline', 'abcdefabcdef0010')] }, 'hex', 'base64') as Json))
      .finish();
    const resource = resourceType.encode(resourceType.fromObject({ attributes: [stringAttribute(CONTROL_PLANE_MARK.key, CONTROL_PLANE_MARK.value)] })).finish();
    // ResourceSpans { scope_spans = 2; resource = 1 }: protobuf allows fields in any order.
    const body = encodeBytesField(1, Buffer.concat([encodeBytesField(2, Buffer.from(scope)), encodeBytesField(1, Buffer.from(resource))]));

    const result = enforceExport('traces', 'protobuf', body, GRANT, 1000);

    expect(result).toMatchObject({ forwardedItems: 0, rejectedItems: 1 });
    expect(result.rejections).toMatchObject({ reservedAttribute: 1 });
  });

  it('JSON: the id is the control plane’s in either case and under the snake_case member too', () => {
    const upper = span('job', JOB_SPAN.toUpperCase());
    const { spanId, ...snake } = span('queue_wait', QUEUE_WAIT_SPAN);
    const request = traces(resourceSpans([upper, { ...snake, span_id: spanId as string }, span('mine', 'abcdefabcdef0011')]));

    const result = enforceExport('traces', 'json', encode('traces', request, 'json'), GRANT, 1000);

    expect(forwardedNames(decode('traces', result.body, 'json'))).toEqual(['mine']);
    expect(result.rejections).toMatchObject({ controlPlaneSpanId: 2 });
  });

  it('with a grant that names no control-plane span (an older control process), refuses by attribute still', () => {
    const { controlPlaneSpanIds: _ids, ...older } = GRANT;
    const request = traces(resourceSpans([span('job', JOB_SPAN), span('forged', 'abcdefabcdef0012', [stringAttribute('ci.pipeline.span.version', '1')])]));

    const result = enforceExport('traces', 'protobuf', encode('traces', request, 'protobuf'), older, 1000);

    expect(forwardedNames(decode('traces', result.body, 'protobuf'))).toEqual(['job']);
    expect(result.rejections).toMatchObject({ controlPlaneSpanId: 0, reservedAttribute: 1 });
  });
});
