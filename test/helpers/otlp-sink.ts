import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { exportRequestType, exportResponseType, rpcStatusType } from '../../src/otlp/otlp-proto';
import { freePort } from './ports';

/**
 * A stand-in OpenTelemetry Collector: decodes OTLP/HTTP exports on its own (protobufjs with the
 * OTLP schema, or JSON) and answers as the test says. No Collector binary can be fetched here;
 * what this proves is what reached the collector, byte for byte decoded independently of the gateway.
 */
const REQUEST_TYPES = {
  traces: exportRequestType('traces'),
  metrics: exportRequestType('metrics'),
  logs: exportRequestType('logs'),
};

export type AttributeValue = string | number | boolean | undefined;

export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly traceState: string;
  readonly startNanos: bigint;
  readonly endNanos: bigint;
  /** OTLP Status.code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number;
  readonly statusMessage: string;
  /** The span's own attributes (int values as numbers, strings as strings, so their types show). */
  readonly attributes: Record<string, AttributeValue>;
  /** Every occurrence of each span attribute key, to catch appended duplicates. */
  readonly attributeKeys: string[];
  readonly resource: Record<string, AttributeValue>;
  /** Every occurrence of each resource attribute key, to catch appended duplicates. */
  readonly resourceKeys: string[];
}

export interface ReceivedExport {
  readonly signal: 'traces' | 'metrics' | 'logs';
  readonly contentType: string;
  readonly headers: IncomingMessage['headers'];
  /** Resource attributes of each resource in the export. */
  readonly resources: Array<Record<string, AttributeValue>>;
  readonly spans: ReceivedSpan[];
  /** The export exactly as it arrived (what a Collector would decode). */
  readonly body: Buffer;
  /** Epoch milliseconds it arrived. */
  readonly receivedAt: number;
  /** Sent by the control plane's outbox rather than forwarded by the gateway. */
  readonly fromControlPlane: boolean;
}

/** A status alone answers with a google.rpc.Status; `retryAfter` adds the collector's own Retry-After. */
export type SinkAnswer = 'ok' | 'hang' | number | { status: number; retryAfter: string } | { rejectedSpans: number; errorMessage: string };

/** The scope of the control plane's own spans (src/pipeline-spans/pipeline-span-model.ts). */
const CONTROL_PLANE_SCOPE = 'ci-job-telemetry/pipeline-spans';

export interface OtlpSink {
  readonly url: string;
  /** What the gateway forwarded: runners' and jobs' exports. */
  readonly exports: ReceivedExport[];
  /** What the control plane's outbox delivered: pipeline, job, queue-wait and bridge spans (SPEC §10). */
  readonly controlPlaneExports: ReceivedExport[];
  /** The spans the gateway forwarded. */
  spans(): ReceivedSpan[];
  controlPlaneSpans(): ReceivedSpan[];
  /** Everything that reached the collector, as a trace viewer sees it. */
  allSpans(): ReceivedSpan[];
  allExports(): ReceivedExport[];
  answerWith(answer: SinkAnswer): void;
  /** Answers the next requests with these, one each, then goes back to the `answerWith` answer. */
  answerNext(...answers: SinkAnswer[]): void;
  stop(): Promise<void>;
  start(): Promise<void>;
}

type Decoded = Record<string, unknown>;
const hex = (value: unknown) => (typeof value === 'string' ? value : Buffer.from((value as Uint8Array | undefined) ?? []).toString('hex'));

function anyValue(value: Decoded | undefined): AttributeValue {
  if (value === undefined) return undefined;
  const camel = (key: string) => value[key] ?? value[key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
  const found = camel('string_value') ?? camel('int_value') ?? camel('bool_value') ?? camel('double_value');
  return typeof found === 'string' && /^-?\d+$/.test(found) && camel('int_value') !== undefined ? Number(found) : (found as AttributeValue);
}

/** protobufjs decodes the enum as its name or number; OTLP/JSON writes the number. */
function statusCode(code: unknown): number {
  if (typeof code === 'number') return code;
  return ({ STATUS_CODE_UNSET: 0, STATUS_CODE_OK: 1, STATUS_CODE_ERROR: 2 } as Record<string, number>)[String(code)] ?? 0;
}

function attributes(list: Decoded[] | undefined): { map: Record<string, AttributeValue>; keys: string[] } {
  const map: Record<string, AttributeValue> = {};
  const keys: string[] = [];
  for (const attribute of list ?? []) {
    keys.push(attribute.key as string);
    map[attribute.key as string] = anyValue(attribute.value as Decoded);
  }
  return { map, keys };
}

function decode(signal: ReceivedExport['signal'], contentType: string, body: Buffer): Decoded {
  if (contentType.startsWith('application/json')) return JSON.parse(body.toString('utf8')) as Decoded;
  const type = REQUEST_TYPES[signal];
  return type.toObject(type.decode(body), { longs: String, defaults: false }) as Decoded;
}

function summarize(signal: ReceivedExport['signal'], contentType: string, headers: IncomingMessage['headers'], body: Buffer): ReceivedExport {
  const request = decode(signal, contentType, body);
  const top = (request.resourceSpans ?? request.resource_spans ?? request.resourceMetrics ?? request.resourceLogs ?? []) as Decoded[];
  const resources: Array<Record<string, AttributeValue>> = [];
  const spans: ReceivedSpan[] = [];
  const scopes: string[] = [];
  for (const resourceEntry of top) {
    const { map, keys } = attributes((resourceEntry.resource as Decoded | undefined)?.attributes as Decoded[] | undefined);
    resources.push(map);
    for (const scope of (resourceEntry.scopeSpans ?? resourceEntry.scope_spans ?? []) as Decoded[]) {
      scopes.push(String((scope.scope as Decoded | undefined)?.name ?? ''));
      for (const span of (scope.spans ?? []) as Decoded[]) {
        const own = attributes(span.attributes as Decoded[] | undefined);
        spans.push({
          traceId: hex(span.traceId ?? span.trace_id).toLowerCase(),
          spanId: hex(span.spanId ?? span.span_id).toLowerCase(),
          parentSpanId: hex(span.parentSpanId ?? span.parent_span_id).toLowerCase(),
          name: span.name as string,
          traceState: String(span.traceState ?? span.trace_state ?? ''),
          startNanos: BigInt(String(span.startTimeUnixNano ?? span.start_time_unix_nano ?? 0)),
          endNanos: BigInt(String(span.endTimeUnixNano ?? span.end_time_unix_nano ?? 0)),
          statusCode: statusCode((span.status as Decoded | undefined)?.code),
          statusMessage: String((span.status as Decoded | undefined)?.message ?? ''),
          attributes: own.map,
          attributeKeys: own.keys,
          resource: map,
          resourceKeys: keys,
        });
      }
    }
  }
  return {
    signal,
    contentType,
    headers,
    resources,
    spans,
    body,
    receivedAt: Date.now(),
    fromControlPlane: scopes.length > 0 && scopes.every((name) => name === CONTROL_PLANE_SCOPE),
  };
}

export async function startOtlpSink(): Promise<OtlpSink> {
  const port = await freePort();
  const exports: ReceivedExport[] = [];
  const controlPlaneExports: ReceivedExport[] = [];
  let standing: SinkAnswer = 'ok';
  const queued: SinkAnswer[] = [];
  let server: Server | undefined;
  const sockets = new Set<Socket>();

  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const signal = (request.url ?? '').replace('/v1/', '') as ReceivedExport['signal'];
      if (request.method !== 'POST' || !(signal in REQUEST_TYPES)) {
        response.writeHead(404).end();
        return;
      }
      const contentType = request.headers['content-type'] ?? '';
      const received = summarize(signal, contentType, request.headers, Buffer.concat(chunks));
      // The answers a test scripts are for the gateway's forwarding; the control plane's own deliveries
      // (queue waits at pickup, job spans) are accepted beside them without taking one.
      const answer = received.fromControlPlane ? 'ok' : (queued.shift() ?? standing);
      if (answer === 'hang') return;
      if (typeof answer === 'number' || (typeof answer === 'object' && 'status' in answer)) {
        const httpStatus = typeof answer === 'number' ? answer : answer.status;
        // As a collector does: a google.rpc.Status in the request's encoding.
        const status = { code: httpStatus >= 500 ? 14 : 3, message: `sink answers ${httpStatus}` };
        const type = rpcStatusType();
        const body = contentType.startsWith('application/json') ? JSON.stringify(status) : Buffer.from(type.encode(type.fromObject(status)).finish());
        const headers = typeof answer === 'number' ? {} : { 'retry-after': answer.retryAfter };
        response.writeHead(httpStatus, { 'content-type': contentType, ...headers }).end(body);
        return;
      }
      (received.fromControlPlane ? controlPlaneExports : exports).push(received);
      const partial = typeof answer === 'object' ? answer : undefined;
      if (contentType.startsWith('application/json')) {
        const body = partial ? { partialSuccess: { rejectedSpans: String(partial.rejectedSpans), errorMessage: partial.errorMessage } } : {};
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      } else {
        const type = exportResponseType('traces');
        const body = partial
          ? type.encode(type.fromObject({ partialSuccess: { rejectedSpans: partial.rejectedSpans, errorMessage: partial.errorMessage } })).finish()
          : new Uint8Array();
        response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(body));
      }
    });
  };

  const start = () =>
    new Promise<void>((resolve) => {
      server = createServer(handle);
      server.on('connection', (socket) => {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
      });
      server.listen(port, '127.0.0.1', () => resolve());
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      if (server === undefined) return resolve();
      server.close(() => resolve());
      server = undefined;
    });

  await start();
  return {
    url: `http://127.0.0.1:${port}`,
    exports,
    controlPlaneExports,
    spans: () => exports.flatMap((received) => received.spans),
    controlPlaneSpans: () => controlPlaneExports.flatMap((received) => received.spans),
    allSpans: () => [...exports, ...controlPlaneExports].flatMap((received) => received.spans),
    allExports: () => [...exports, ...controlPlaneExports].sort((a, b) => a.receivedAt - b.receivedAt),
    answerWith: (next) => {
      standing = next;
      queued.length = 0;
    },
    answerNext: (...next) => queued.push(...next),
    stop,
    start,
  };
}
