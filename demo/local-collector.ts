import { OtlpJsonRequest, startOtlpReceiver } from '../src/otlp/otlp-receiver';

export type AttributeValue = string | number | boolean;

/** A span as it reached the collector: after the gateway checked, bound and stamped it. */
export interface CollectedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly startNanos: bigint;
  readonly endNanos: bigint;
  /** 0 unset, 1 ok, 2 error (OTLP Status.code). */
  readonly statusCode: number;
  readonly attributes: Record<string, AttributeValue>;
  readonly resource: Record<string, AttributeValue>;
}

export interface LocalCollector {
  readonly url: string;
  readonly spans: CollectedSpan[];
  stop(): Promise<void>;
}

type Decoded = Record<string, unknown>;

function attributeValue(value: Decoded | undefined): AttributeValue {
  if (value === undefined) return '';
  if (value.stringValue !== undefined) return value.stringValue as string;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue as boolean;
  if (value.doubleValue !== undefined) return value.doubleValue as number;
  return JSON.stringify(value);
}

function attributeMap(list: unknown): Record<string, AttributeValue> {
  const map: Record<string, AttributeValue> = {};
  for (const entry of (list ?? []) as Decoded[]) map[entry.key as string] = attributeValue(entry.value as Decoded | undefined);
  return map;
}

const hex = (value: unknown) => (typeof value === 'string' ? value.toLowerCase() : '');

/** The spans of one OTLP/JSON trace export request, flattened with their resource. */
export function collectedSpans(request: OtlpJsonRequest): CollectedSpan[] {
  const spans: CollectedSpan[] = [];
  for (const resourceSpans of (request.resourceSpans ?? []) as Decoded[]) {
    const resource = attributeMap((resourceSpans.resource as Decoded | undefined)?.attributes);
    for (const scopeSpans of (resourceSpans.scopeSpans ?? []) as Decoded[]) {
      for (const span of (scopeSpans.spans ?? []) as Decoded[]) {
        spans.push({
          traceId: hex(span.traceId),
          spanId: hex(span.spanId),
          parentSpanId: hex(span.parentSpanId),
          name: span.name as string,
          startNanos: BigInt((span.startTimeUnixNano as string | number | undefined) ?? 0),
          endNanos: BigInt((span.endTimeUnixNano as string | number | undefined) ?? 0),
          statusCode: Number((span.status as Decoded | undefined)?.code ?? 0),
          attributes: attributeMap(span.attributes),
          resource,
        });
      }
    }
  }
  return spans;
}

/**
 * Spans of one OTLP/HTTP JSON trace export (the OTLP spec's JSON mapping: ids as hex strings, 64-bit
 * integers as decimal strings or numbers, enums as integers), flattened with their resource.
 */
export function decodeJsonTraceExport(body: Uint8Array): CollectedSpan[] {
  const request = JSON.parse(Buffer.from(body).toString('utf8')) as unknown;
  if (typeof request !== 'object' || request === null || Array.isArray(request)) throw new SyntaxError('an ExportTraceServiceRequest is a JSON object');
  return collectedSpans(request as OtlpJsonRequest);
}

/**
 * A local stand-in for the OpenTelemetry Collector: the one OTLP receiver (src/otlp/otlp-receiver.ts),
 * keeping the spans of trace exports in protobuf (what the runner sends through the gateway) and JSON (the
 * service's own pipeline spans): enough for the demo to show what reached the collector, with no Docker.
 */
export async function startLocalCollector(): Promise<LocalCollector> {
  const spans: CollectedSpan[] = [];
  const receiver = await startOtlpReceiver({
    onExport: ({ signal, request }) => {
      if (signal === 'traces') spans.push(...collectedSpans(request!));
      return { kind: 'accepted' };
    },
  });
  return { url: receiver.url, spans, stop: () => receiver.stop() };
}
