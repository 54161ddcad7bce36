import { exportRequestType, exportResponseType } from '../src/otlp/otlp-proto';
import { ciJobSpanBatch, withBinaryIds } from './lib/otlp-batch';

/** The repository's OTLP schema (protobufjs), used only to build the bench's export once and to check what arrived. */
export function otlpTypes() {
  return { request: exportRequestType('traces'), response: exportResponseType('traces') };
}

export interface ExportOptions {
  /** 32 hex digits: the grant's trace, so every span is forwarded. */
  readonly traceId: string;
  readonly spans: number;
  readonly attributesPerSpan: number;
}

/** One OTLP/HTTP protobuf trace export of the shared CI-job batch (bench/lib/otlp-batch), all spans in `traceId`. */
export function traceExport(types: ReturnType<typeof otlpTypes>, options: ExportOptions): Buffer {
  const batch = withBinaryIds(ciJobSpanBatch(options)) as Record<string, unknown>;
  return Buffer.from(types.request.encode(types.request.fromObject(batch)).finish());
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

/**
 * Each call a copy of `template` with its first span's id replaced by a counter: every export different, as a
 * runner's are, so nothing that keeps the same bytes once (parking keeps an export retried after a lost answer once)
 * makes the bench measure less than it claims. The first span's id is found by its bytes (span_id, field 2, 8 bytes).
 */
export function distinctExports(template: Buffer, firstSpanId = '0000000000000002'): () => Buffer {
  const marker = Buffer.concat([Buffer.from([0x12, 0x08]), Buffer.from(firstSpanId, 'hex')]);
  const at = template.indexOf(marker);
  if (at < 0) throw new Error(`the export holds no span ${firstSpanId}`);
  let counter = 0n;
  return () => {
    const body = Buffer.from(template);
    counter++;
    body.writeBigUInt64BE(counter | (1n << 62n), at + 2);
    return body;
  };
}
