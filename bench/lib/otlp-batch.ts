/**
 * A CI job's trace export as its SDK batches it, in OTLP/JSON form: one resource (with a spoofed
 * `ci.project.id` the gateway must overwrite), two instrumentation scopes, spans with attributes of mixed
 * types, every fourth with an event. Shared by the payload and gateway benches so both measure the same batch.
 *
 * The members and their JSON types are those @opentelemetry/otlp-transformer's JSON serializer writes
 * (JSON_ENCODER, sdkSpanToOtlpSpan): hex ids, timestamps as decimal strings, `intValue` as a JSON number,
 * `doubleValue` only for a non-integer, the dropped counts as 0, `flags` (W3C flags | HAS_IS_REMOTE), `links: []`,
 * `resource.droppedAttributesCount`. Its protobuf serializer writes the same fields, zeros included.
 */
export interface SpanBatchOptions {
  /** 32 hex digits: the grant's trace. */
  readonly traceId: string;
  readonly spans: number;
  readonly attributesPerSpan: number;
  /** Spans for which this says true get `foreignTraceId` instead (trace binding drops them). */
  readonly isForeign?: (index: number) => boolean;
  readonly foreignTraceId?: string;
}

type Attribute = { key: string; value: Record<string, unknown> };

const number = (value: number) => (Number.isInteger(value) ? { intValue: value } : { doubleValue: value });

const ATTRIBUTES: ReadonlyArray<(i: number) => Attribute> = [
  (i) => ({ key: 'code.filepath', value: { stringValue: `spec/models/user_spec_${i % 40}.rb` } }),
  (i) => ({ key: 'code.lineno', value: { intValue: i % 300 } }),
  () => ({ key: 'code.function', value: { stringValue: 'it validates the presence of email' } }),
  () => ({ key: 'test.suite.name', value: { stringValue: 'models' } }),
  (i) => ({ key: 'test.case.result.status', value: { stringValue: i % 17 === 0 ? 'fail' : 'pass' } }),
  (i) => ({ key: 'thread.id', value: { intValue: i % 8 } }),
  () => ({ key: 'db.system', value: { stringValue: 'postgresql' } }),
  () => ({ key: 'db.query.text', value: { stringValue: 'SELECT "users".* FROM "users" WHERE "users"."id" = $1 LIMIT $2' } }),
  () => ({ key: 'retry', value: { boolValue: false } }),
  (i) => ({ key: 'duration.ratio', value: number((i % 100) / 100) }),
];

const hex = (value: number, bytes: number) => value.toString(16).padStart(bytes * 2, '0');

// W3C sampled, with the "is_remote is known" bit the SDK always sets (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK).
const SPAN_FLAGS = 0x101;

export function ciJobSpanBatch(options: SpanBatchOptions) {
  const spans = [];
  for (let i = 0; i < options.spans; i++) {
    const start = 1_700_000_000_000_000_000n + BigInt(i) * 1_000_000n;
    const attributes: Attribute[] = [];
    for (let a = 0; a < options.attributesPerSpan; a++) {
      const attribute = ATTRIBUTES[a % ATTRIBUTES.length](i);
      attributes.push(a < ATTRIBUTES.length ? attribute : { ...attribute, key: `${attribute.key}.${Math.floor(a / ATTRIBUTES.length)}` });
    }
    const events =
      i % 4 === 0
        ? [
            {
              attributes: [{ key: 'message', value: { stringValue: 'cache miss' } }],
              name: 'log',
              timeUnixNano: String(start + 1000n),
              droppedAttributesCount: 0,
            },
          ]
        : [];
    spans.push({
      traceId: options.isForeign?.(i) && options.foreignTraceId !== undefined ? options.foreignTraceId : options.traceId,
      spanId: hex(i + 2, 8),
      parentSpanId: hex(1, 8),
      name: `rspec spec/models/user_spec.rb:${i}`,
      kind: 1,
      startTimeUnixNano: String(start),
      endTimeUnixNano: String(start + 750_000n),
      attributes,
      droppedAttributesCount: 0,
      events,
      droppedEventsCount: 0,
      status: { code: i % 17 === 0 ? 2 : 0 },
      links: [],
      droppedLinksCount: 0,
      flags: SPAN_FLAGS,
    });
  }
  const half = Math.ceil(spans.length / 2);
  return {
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
            { key: 'ci.project.id', value: { intValue: 1 } },
          ],
          droppedAttributesCount: 0,
        },
        scopeSpans: [
          { scope: { name: 'rspec', version: '3.13.0' }, spans: spans.slice(0, half) },
          { scope: { name: 'active_record', version: '7.1.3' }, spans: spans.slice(half) },
        ],
      },
    ],
  };
}

/** The same object with its hex ids as bytes, which is what protobufjs's `fromObject` takes. */
export function withBinaryIds(value: unknown, key?: string): unknown {
  if (Array.isArray(value)) return value.map((item) => withBinaryIds(item));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withBinaryIds(v, k)]));
  }
  return key === 'traceId' || key === 'spanId' || key === 'parentSpanId' ? Buffer.from(value as string, 'hex') : value;
}
