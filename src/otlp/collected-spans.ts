import type { OtlpJsonRequest } from './otlp-receiver';

export type AttributeValue = string | number | boolean;

/**
 * A span as it reached the collector: after the gateway checked, bound and stamped it. What `npm run -s trace`
 * draws and what the read API (SPEC §12) fetches from either backend.
 */
export interface CollectedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root. */
  readonly parentSpanId: string;
  readonly name: string;
  readonly startNanos: bigint;
  readonly endNanos: bigint;
  /** 0 unset, 1 ok, 2 error (OTLP Status.code). */
  readonly statusCode: number;
  readonly statusMessage: string;
  /** OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  readonly kind: number;
  /** The span's W3C tracestate (`ot=th:…`), '' when none. */
  readonly traceState: string;
  /** The instrumentation scope's name, '' when none. */
  readonly scopeName: string;
  readonly attributes: Record<string, AttributeValue>;
  readonly resource: Record<string, AttributeValue>;
}

type Decoded = Record<string, unknown>;

/**
 * Arrays and maps are kept as the JSON text of their plain values (`["docker","linux"]`), the text the Collector's
 * ClickHouse exporter stores for them (pdata's `Value.AsString`), so a reader of either backend parses one form (a
 * runner's tags, `ci.runner.tags`).
 */
function attributeValue(value: Decoded | undefined): AttributeValue {
  if (value === undefined || value === null) return '';
  if (value.stringValue !== undefined) return value.stringValue as string;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue as boolean;
  if (value.doubleValue !== undefined) return value.doubleValue as number;
  return JSON.stringify(plainValue(value));
}

/** An OTLP/JSON AnyValue as a plain JSON value, arrays and maps all the way down (pdata's `AsRaw`). */
function plainValue(value: Decoded | undefined): unknown {
  if (value === undefined || value === null) return null;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.bytesValue !== undefined) return value.bytesValue;
  const array = value.arrayValue as Decoded | undefined;
  if (array !== undefined) return list(array.values).map((item) => plainValue(item));
  const kvlist = value.kvlistValue as Decoded | undefined;
  if (kvlist !== undefined) return Object.fromEntries(list(kvlist.values).map((entry) => [text(entry.key), plainValue(entry.value as Decoded | undefined)]));
  return null;
}

function attributeMap(list: unknown): Record<string, AttributeValue> {
  const map: Record<string, AttributeValue> = {};
  for (const entry of (Array.isArray(list) ? list : []) as Decoded[]) {
    if (typeof entry?.key === 'string') map[entry.key] = attributeValue(entry.value as Decoded | undefined);
  }
  return map;
}

const hex = (value: unknown) => (typeof value === 'string' ? value.toLowerCase() : '');
const text = (value: unknown) => (typeof value === 'string' ? value : '');
const list = (value: unknown) => (Array.isArray(value) ? (value as Decoded[]) : []);

/** The spans of one trace export request (in the OTLP/JSON mapping the receiver decodes to), flattened with their resource. */
export function collectedSpans(request: OtlpJsonRequest): CollectedSpan[] {
  const spans: CollectedSpan[] = [];
  for (const resourceSpans of list(request.resourceSpans)) {
    const resource = attributeMap((resourceSpans.resource as Decoded | undefined)?.attributes);
    for (const scopeSpans of list(resourceSpans.scopeSpans)) {
      const scopeName = text((scopeSpans.scope as Decoded | undefined)?.name);
      for (const span of list(scopeSpans.spans)) {
        const status = span.status as Decoded | undefined;
        spans.push({
          traceId: hex(span.traceId),
          spanId: hex(span.spanId),
          parentSpanId: hex(span.parentSpanId),
          name: text(span.name),
          startNanos: BigInt((span.startTimeUnixNano as string | number | undefined) ?? 0),
          endNanos: BigInt((span.endTimeUnixNano as string | number | undefined) ?? 0),
          statusCode: Number(status?.code ?? 0),
          statusMessage: text(status?.message),
          kind: Number(span.kind ?? 0),
          traceState: text(span.traceState),
          scopeName,
          attributes: attributeMap(span.attributes),
          resource,
        });
      }
    }
  }
  return spans;
}
