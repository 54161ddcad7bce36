import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';
import { AddressInfo } from 'node:net';
import { exportRequestType, exportResponseType } from '../src/otlp/otlp-proto';

const ExportTraceServiceRequest = exportRequestType('traces');
const ExportTraceServiceResponse = exportResponseType('traces');

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

const hex = (bytes: unknown) => Buffer.from((bytes as Uint8Array | undefined) ?? []).toString('hex');

/** A span's fields as both encodings decode them: ids as bytes (protobuf) or hex (OTLP/JSON), times as decimal strings. */
function collectedSpans(request: Decoded, id: (value: unknown) => string): CollectedSpan[] {
  const spans: CollectedSpan[] = [];
  for (const resourceSpans of (request.resourceSpans ?? []) as Decoded[]) {
    const resource = attributeMap((resourceSpans.resource as Decoded | undefined)?.attributes);
    for (const scopeSpans of (resourceSpans.scopeSpans ?? []) as Decoded[]) {
      for (const span of (scopeSpans.spans ?? []) as Decoded[]) {
        spans.push({
          traceId: id(span.traceId),
          spanId: id(span.spanId),
          parentSpanId: id(span.parentSpanId),
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

/** Spans of one OTLP/HTTP protobuf trace export, flattened with their resource. */
export function decodeTraceExport(body: Uint8Array): CollectedSpan[] {
  const request = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), { longs: String, defaults: false }) as Decoded;
  return collectedSpans(request, hex);
}

/**
 * Spans of one OTLP/HTTP JSON trace export (the OTLP spec's JSON mapping: ids as hex strings, 64-bit
 * integers as decimal strings or numbers, enums as integers), flattened with their resource.
 */
export function decodeJsonTraceExport(body: Uint8Array): CollectedSpan[] {
  const request = JSON.parse(Buffer.from(body).toString('utf8')) as unknown;
  if (typeof request !== 'object' || request === null || Array.isArray(request)) throw new SyntaxError('an ExportTraceServiceRequest is a JSON object');
  return collectedSpans(request as Decoded, (value) => (typeof value === 'string' ? value.toLowerCase() : ''));
}

/** The encodings an OTLP/HTTP receiver reads, by media type: each decodes a request and encodes the (empty) response. */
const ENCODINGS: Record<string, { decode: (body: Uint8Array) => CollectedSpan[]; answer: () => Buffer }> = {
  'application/x-protobuf': {
    decode: decodeTraceExport,
    answer: () => Buffer.from(ExportTraceServiceResponse.encode(ExportTraceServiceResponse.create({})).finish()),
  },
  'application/json': { decode: decodeJsonTraceExport, answer: () => Buffer.from('{}') },
};

/**
 * A local stand-in for the OpenTelemetry Collector's OTLP/HTTP receiver, traces only, in protobuf (what
 * the runner sends through the gateway) and JSON (the service's own pipeline spans): enough for the demo
 * to show what reached the collector, with no Docker. Answers as the receiver does: 200 with an empty
 * response in the request's encoding, 400 for a body it cannot decode, 404, 405 and 415 for anything else.
 */
export async function startLocalCollector(): Promise<LocalCollector> {
  const spans: CollectedSpan[] = [];
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (request.url !== '/v1/traces') return void response.writeHead(404).end();
      if (request.method !== 'POST') return void response.writeHead(405, { allow: 'POST' }).end();
      const mediaType = (request.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
      const encoding = mediaType in ENCODINGS ? ENCODINGS[mediaType] : undefined;
      if (encoding === undefined)
        return void response.writeHead(415, { 'content-type': 'text/plain' }).end(`${mediaType || 'no content type'} is not supported`);
      let received: CollectedSpan[];
      try {
        received = encoding.decode(Buffer.concat(chunks));
      } catch (error) {
        return void response.writeHead(400, { 'content-type': 'text/plain' }).end(`cannot decode the ${mediaType} body: ${(error as Error).message}`);
      }
      spans.push(...received);
      response.writeHead(200, { 'content-type': mediaType }).end(encoding.answer());
    });
  };
  const server: Server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
