import { join } from 'node:path';
import * as protobuf from 'protobufjs';

/** The repository's OTLP schema (protobufjs), used only to build the bench's export once and to check what arrived. */
export function otlpTypes(root: string) {
  const proto = protobuf.loadSync(join(root, 'src', 'otlp-gateway', 'proto', 'otlp.proto'));
  return {
    request: proto.lookupType('otlp.ExportTraceServiceRequest'),
    response: proto.lookupType('otlp.ExportTraceServiceResponse'),
  };
}

export interface ExportOptions {
  /** 32 hex digits: the grant's trace, so every span is forwarded. */
  readonly traceId: string;
  readonly spans: number;
  readonly attributesPerSpan: number;
}

const ATTRIBUTES: ReadonlyArray<(i: number) => { key: string; value: Record<string, unknown> }> = [
  (i) => ({ key: 'code.filepath', value: { stringValue: `spec/models/user_spec_${i % 40}.rb` } }),
  (i) => ({ key: 'code.lineno', value: { intValue: String(i % 300) } }),
  () => ({ key: 'code.function', value: { stringValue: 'it validates the presence of email' } }),
  () => ({ key: 'test.suite.name', value: { stringValue: 'models' } }),
  (i) => ({ key: 'test.case.result.status', value: { stringValue: i % 17 === 0 ? 'fail' : 'pass' } }),
  (i) => ({ key: 'thread.id', value: { intValue: String(i % 8) } }),
  () => ({ key: 'db.system', value: { stringValue: 'postgresql' } }),
  () => ({ key: 'db.query.text', value: { stringValue: 'SELECT "users".* FROM "users" WHERE "users"."id" = $1 LIMIT $2' } }),
  () => ({ key: 'retry', value: { boolValue: false } }),
  (i) => ({ key: 'duration.ratio', value: { doubleValue: (i % 100) / 100 } }),
];

/**
 * One OTLP/HTTP protobuf trace export as a CI job's SDK batches it: one resource (with a spoofed
 * `ci.project.id` the gateway must overwrite), two instrumentation scopes, spans with ~10 attributes
 * of mixed types, every fourth with an event. All spans in `traceId`.
 */
export function traceExport(types: ReturnType<typeof otlpTypes>, options: ExportOptions): Buffer {
  const hex = (value: number, bytes: number) => Buffer.from(value.toString(16).padStart(bytes * 2, '0'), 'hex');
  const traceId = Buffer.from(options.traceId, 'hex');
  const spans = [];
  for (let i = 0; i < options.spans; i++) {
    const start = 1_700_000_000_000_000_000n + BigInt(i) * 1_000_000n;
    const attributes = [];
    for (let a = 0; a < options.attributesPerSpan; a++) {
      const attribute = ATTRIBUTES[a % ATTRIBUTES.length](i);
      attributes.push(a < ATTRIBUTES.length ? attribute : { ...attribute, key: `${attribute.key}.${Math.floor(a / ATTRIBUTES.length)}` });
    }
    spans.push({
      traceId,
      spanId: hex(i + 2, 8),
      parentSpanId: hex(1, 8),
      name: `rspec spec/models/user_spec.rb:${i}`,
      kind: 1,
      startTimeUnixNano: String(start),
      endTimeUnixNano: String(start + 750_000n),
      attributes,
      events: i % 4 === 0 ? [{ timeUnixNano: String(start + 1000n), name: 'log', attributes: [{ key: 'message', value: { stringValue: 'cache miss' } }] }] : [],
      status: { code: i % 17 === 0 ? 2 : 0 },
    });
  }
  const half = Math.ceil(spans.length / 2);
  const request = {
    resourceSpans: [
      {
        resource: {
          attributes: [
            { key: 'service.name', value: { stringValue: 'gitlab-runner-job' } },
            { key: 'host.name', value: { stringValue: 'runner-abc123-project-7-concurrent-0' } },
            { key: 'os.type', value: { stringValue: 'linux' } },
            { key: 'process.runtime.name', value: { stringValue: 'ruby' } },
            { key: 'process.runtime.version', value: { stringValue: '3.3.4' } },
            { key: 'telemetry.sdk.name', value: { stringValue: 'opentelemetry' } },
            { key: 'telemetry.sdk.language', value: { stringValue: 'ruby' } },
            { key: 'ci.project.id', value: { intValue: '1' } },
          ],
        },
        scopeSpans: [
          { scope: { name: 'rspec', version: '3.13.0' }, spans: spans.slice(0, half) },
          { scope: { name: 'active_record', version: '7.1.3' }, spans: spans.slice(half) },
        ],
      },
    ],
  };
  return Buffer.from(types.request.encode(types.request.fromObject(request)).finish());
}

/** What arrived at the collector: spans, their traces, and the identity attributes of each resource. */
export function describeExport(types: ReturnType<typeof otlpTypes>, body: Buffer) {
  const decoded = types.request.toObject(types.request.decode(body), { longs: String, bytes: String, defaults: false }) as {
    resourceSpans?: Array<{
      resource?: { attributes?: Array<{ key: string; value: Record<string, unknown> }> };
      scopeSpans?: Array<{ spans?: Array<{ traceId: string }> }>;
    }>;
  };
  const traceIds = new Set<string>();
  let spans = 0;
  const resources: Array<Record<string, unknown>> = [];
  for (const resourceSpans of decoded.resourceSpans ?? []) {
    const attributes: Record<string, unknown> = {};
    for (const attribute of resourceSpans.resource?.attributes ?? []) attributes[attribute.key] = Object.values(attribute.value)[0];
    resources.push(attributes);
    for (const scope of resourceSpans.scopeSpans ?? []) {
      for (const span of scope.spans ?? []) {
        spans++;
        traceIds.add(Buffer.from(span.traceId, 'base64').toString('hex'));
      }
    }
  }
  return { spans, traceIds: [...traceIds], resources };
}
