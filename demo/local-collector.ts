import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';
import { AddressInfo } from 'node:net';
import { join } from 'node:path';
import * as protobuf from 'protobufjs';
import { repoRoot } from './repo-root';

const root = protobuf.loadSync(join(repoRoot(), 'src', 'otlp-gateway', 'wire', 'proto', 'otlp.proto'));
const ExportTraceServiceRequest = root.lookupType('otlp.ExportTraceServiceRequest');
const ExportTraceServiceResponse = root.lookupType('otlp.ExportTraceServiceResponse');

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

/** Spans of one OTLP/HTTP protobuf trace export, flattened with their resource. */
export function decodeTraceExport(body: Uint8Array): CollectedSpan[] {
  const request = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), { longs: String, defaults: false }) as Decoded;
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
          startNanos: BigInt((span.startTimeUnixNano as string | undefined) ?? 0),
          endNanos: BigInt((span.endTimeUnixNano as string | undefined) ?? 0),
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
 * A local stand-in for the OpenTelemetry Collector's OTLP/HTTP receiver, traces in protobuf only:
 * enough for the demo to show what the gateway forwarded, with no Docker.
 */
export async function startLocalCollector(): Promise<LocalCollector> {
  const spans: CollectedSpan[] = [];
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (request.method !== 'POST' || request.url !== '/v1/traces' || request.headers['content-type'] !== 'application/x-protobuf') {
        response.writeHead(404).end();
        return;
      }
      spans.push(...decodeTraceExport(Buffer.concat(chunks)));
      const answer = ExportTraceServiceResponse.encode(ExportTraceServiceResponse.create({})).finish();
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(answer));
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
