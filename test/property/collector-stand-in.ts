import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import * as protobuf from 'protobufjs';
import { freePort } from '../helpers/ports';

/**
 * The OpenTelemetry Collector as the property suite needs it: it decodes every export (protobuf with the OTLP schema,
 * or OTLP/JSON) and refuses with 400 a whole request it could not decode, as the Collector's otlpreceiver does
 * (a span id that is not 8 bytes, a trace id that is not 16); it can be down, answer 503, or answer slowly. Only the
 * proto file is taken from the service, so a move of the service's own receiver does not move this one.
 */

export type CollectorMode = 'up' | 'down' | 'unavailable' | 'slow';

export interface CollectedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  /** `ci.pipeline.span.version` (SPEC §10's final story) when the span carries one. */
  readonly version?: number;
  readonly serviceName: string;
  /** Its trace_state ('' for none), and its resource's `ci.sampling.reason` ('' for none): why it was kept (SPEC §11). */
  readonly traceState: string;
  readonly samplingReason: string;
  /** Order of the accepted request it came in, across the whole run. */
  readonly arrival: number;
  /** Epoch ms its request was accepted. */
  readonly receivedAt: number;
}

export interface CollectorStandIn {
  readonly url: string;
  readonly spans: CollectedSpan[];
  /** Requests answered 400 because a span could not be decoded. */
  readonly refused: number;
  mode(next: CollectorMode): Promise<void>;
  reset(): void;
  close(): Promise<void>;
}

const PROTO = join(__dirname, '..', '..', 'src', 'otlp', 'proto', 'otlp.proto');
let exportRequestType: protobuf.Type | undefined;

export function traceRequestType(): protobuf.Type {
  exportRequestType ??= protobuf.loadSync(PROTO).lookupType('otlp.ExportTraceServiceRequest');
  return exportRequestType;
}

type Json = Record<string, unknown>;

const hexOfBytes = (value: unknown) => (value instanceof Uint8Array ? Buffer.from(value).toString('hex') : '');

function attributeValue(value: Json | undefined): unknown {
  if (value === undefined) return undefined;
  for (const key of ['stringValue', 'intValue', 'boolValue', 'doubleValue', 'string_value', 'int_value']) {
    if (value[key] !== undefined && value[key] !== null) return value[key];
  }
  return undefined;
}

function attributesOf(list: unknown): Map<string, unknown> {
  const found = new Map<string, unknown>();
  for (const entry of Array.isArray(list) ? (list as Json[]) : []) found.set(String(entry.key), attributeValue(entry.value as Json | undefined));
  return found;
}

class Undecodable extends Error {}

/** The spans of one export, ids as hex; throws {@link Undecodable} where the Collector could not decode. */
function decode(contentType: string, body: Buffer): Array<Omit<CollectedSpan, 'arrival' | 'receivedAt'>> {
  const json = contentType.includes('json');
  let request: Json;
  if (json) {
    request = JSON.parse(body.toString('utf8')) as Json;
  } else {
    const type = traceRequestType();
    request = type.toObject(type.decode(body), { longs: String, bytes: Uint8Array }) as Json;
  }
  const spans: Array<Omit<CollectedSpan, 'arrival' | 'receivedAt'>> = [];
  for (const resourceSpans of (request.resourceSpans ?? request.resource_spans ?? []) as Json[]) {
    const resource = attributesOf((resourceSpans.resource as Json | undefined)?.attributes);
    for (const scopeSpans of (resourceSpans.scopeSpans ?? resourceSpans.scope_spans ?? []) as Json[]) {
      for (const span of (scopeSpans.spans ?? []) as Json[]) {
        const id = (value: unknown) => (json ? String(value ?? '').toLowerCase() : hexOfBytes(value));
        const traceId = id(span.traceId ?? span.trace_id);
        const spanId = id(span.spanId ?? span.span_id);
        const parentSpanId = id(span.parentSpanId ?? span.parent_span_id);
        if (traceId.length !== 32 || spanId.length !== 16 || (parentSpanId.length !== 0 && parentSpanId.length !== 16)) {
          throw new Undecodable(`span ${String(span.name)}: trace id ${traceId}, span id ${spanId}, parent ${parentSpanId}`);
        }
        const version = attributesOf(span.attributes).get('ci.pipeline.span.version');
        spans.push({
          traceId,
          spanId,
          parentSpanId,
          name: String(span.name),
          ...(version === undefined ? {} : { version: Number(version) }),
          serviceName: String(resource.get('service.name') ?? ''),
          traceState: String(span.traceState ?? span.trace_state ?? ''),
          samplingReason: String(resource.get('ci.sampling.reason') ?? ''),
        });
      }
    }
  }
  return spans;
}

export async function startCollectorStandIn(): Promise<CollectorStandIn> {
  const port = await freePort();
  const spans: CollectedSpan[] = [];
  let refused = 0;
  let arrivals = 0;
  let current: CollectorMode = 'up';
  let server: Server | undefined;
  const sockets = new Set<Socket>();

  const answer = (response: ServerResponse, contentType: string, status: number) => {
    const json = contentType.includes('json');
    response.writeHead(status, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : Buffer.alloc(0));
  };
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const contentType = String(request.headers['content-type'] ?? 'application/x-protobuf');
      const mode = current;
      if (mode === 'unavailable') return answer(response, contentType, 503);
      const settle = () => {
        let body = Buffer.concat(chunks);
        try {
          if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
          const decoded = decode(contentType, body);
          const arrival = arrivals++;
          const receivedAt = Date.now();
          for (const span of decoded) spans.push({ ...span, arrival, receivedAt });
          answer(response, contentType, 200);
        } catch (error) {
          if (!(error instanceof Undecodable) && !(error instanceof Error)) throw error;
          refused++;
          answer(response, contentType, 400);
        }
      };
      if (mode === 'slow') setTimeout(settle, 300);
      else settle();
    });
  };
  const listen = async () => {
    if (server !== undefined) return;
    const started = createServer(handle);
    started.on('connection', (socket: Socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => started.listen(port, '127.0.0.1', resolve));
    server = started;
  };
  const shut = async () => {
    const running = server;
    server = undefined;
    if (running === undefined) return;
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => running.close(() => resolve()));
  };

  await listen();
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    get refused() {
      return refused;
    },
    async mode(next) {
      current = next;
      if (next === 'down') await shut();
      else await listen();
    },
    reset() {
      spans.length = 0;
      refused = 0;
    },
    close: shut,
  };
}
