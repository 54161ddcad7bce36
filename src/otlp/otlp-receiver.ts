import { createServer, IncomingHttpHeaders, IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { encodingOf, OTLP_MEDIA_TYPES, OtlpEncoding, OtlpSignal, signalOfPath } from './otlp-encoding';
import { exportRequestType } from './otlp-proto';
import { encodeExportResponse, encodeRpcStatus, OtlpPartialSuccess } from './otlp-response';
import { OtlpPayloadError } from './otlp-wire';

/**
 * An export request in the one shape every receiver here reads: the OTLP/JSON mapping, as the Collector's
 * file exporter writes it (camelCase names, trace and span ids in hex, 64-bit integers as decimal strings,
 * enums as numbers). A JSON export is that already, as its client wrote it.
 */
export type OtlpJsonRequest = Record<string, unknown>;

/** The OTLP/JSON mapping writes these bytes fields as hex, every other one as base64. */
const HEX_ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

/**
 * One export request as one line of OTLP/JSON (see OtlpJsonRequest); a JSON export keeps its own text.
 * @throws OtlpPayloadError when the body is not such a request.
 */
export function exportRequestLine(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): string {
  if (encoding === 'json') {
    // A newline can only be whitespace in valid JSON (strings escape theirs), so this keeps the export exact.
    const line = body.toString('utf8').replace(/[\r\n]/g, ' ');
    parseJsonRequest(line);
    return line;
  }
  const type = exportRequestType(signal);
  let request: Record<string, unknown>;
  try {
    request = type.toObject(type.decode(body), { longs: String, enums: Number, bytes: String, defaults: false });
  } catch (error) {
    throw new OtlpPayloadError(`not an OTLP protobuf export request: ${(error as Error).message}`);
  }
  return JSON.stringify(request, (key, value: unknown) =>
    HEX_ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, 'base64').toString('hex') : value,
  );
}

/** One export request, of either encoding, as an OtlpJsonRequest. @throws OtlpPayloadError */
export function decodeExportRequest(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): OtlpJsonRequest {
  return parseJsonRequest(encoding === 'json' ? body.toString('utf8') : exportRequestLine(signal, encoding, body));
}

function parseJsonRequest(text: string): OtlpJsonRequest {
  let request: unknown;
  try {
    request = JSON.parse(text);
  } catch (error) {
    throw new OtlpPayloadError(`not valid JSON: ${(error as Error).message}`);
  }
  if (typeof request !== 'object' || request === null || Array.isArray(request)) throw new OtlpPayloadError('an export request is a JSON object');
  return request as OtlpJsonRequest;
}

/** How a receiver answers an export: accepted (with a partial success, if any), or failed with a google.rpc.Status. */
export type ReceiverAnswer =
  | { readonly kind: 'accepted'; readonly partialSuccess?: OtlpPartialSuccess }
  | { readonly kind: 'failed'; readonly status: number; readonly message: string; readonly retryAfter?: string };

/** An OTLP/HTTP answer ready to send. */
export interface ReceiverResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
}

/** google.rpc.Code for an HTTP status, as the Collector's receiver pairs them. */
function rpcCodeOf(status: number): number {
  if (status === 429) return 8; // RESOURCE_EXHAUSTED
  if (status >= 500) return 14; // UNAVAILABLE
  return 3; // INVALID_ARGUMENT
}

/** The answer in the request's encoding (OTLP/HTTP "Response"): an Export*ServiceResponse, or a Status for a failure. */
export function receiverResponse(signal: OtlpSignal, encoding: OtlpEncoding, answer: ReceiverAnswer): ReceiverResponse {
  const contentType = OTLP_MEDIA_TYPES[encoding];
  if (answer.kind === 'accepted') {
    return { status: 200, headers: { 'content-type': contentType }, body: encodeExportResponse(signal, encoding, answer.partialSuccess) };
  }
  const headers: Record<string, string> = { 'content-type': contentType };
  if (answer.retryAfter !== undefined) headers['retry-after'] = answer.retryAfter;
  return { status: answer.status, headers, body: encodeRpcStatus(encoding, { code: rpcCodeOf(answer.status), message: answer.message }) };
}

/** One export as a receiver got it. */
export interface ReceivedExport {
  readonly signal: OtlpSignal;
  readonly encoding: OtlpEncoding;
  readonly headers: IncomingHttpHeaders;
  /** Inflated, unless the receiver only counts bytes: then as it came on the wire. */
  readonly body: Buffer;
  /** Undefined when the receiver only counts bytes. */
  readonly request: OtlpJsonRequest | undefined;
}

export interface OtlpReceiverOptions {
  /**
   * `decode` (the default): gzip inflated, the request decoded (400 when it cannot be). `bytes`: the body is
   * handed over as it came, neither inflated nor decoded, for a sink that measures the gateway's direct path
   * and must cost no more than reading it.
   */
  readonly mode?: 'decode' | 'bytes';
  /** Inflated bytes accepted at most (a gzip bomb is cut off there and answered 413). */
  readonly maxBytes?: number;
  /** `hang` leaves the request unanswered, as a collector that stopped answering would. */
  onExport(received: ReceivedExport): ReceiverAnswer | 'hang';
}

const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/**
 * An OTLP/HTTP receiver as a Node request handler, answering as the Collector's otlpreceiver does: POST
 * /v1/{traces,metrics,logs} only (404, 405), protobuf or JSON (415), gzip or identity (415), a body it
 * cannot decode 400; the answer in the request's encoding.
 */
export function otlpRequestHandler(options: OtlpReceiverOptions): (request: IncomingMessage, response: ServerResponse) => void {
  const decoding = options.mode !== 'bytes';
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  return (request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const plain = (status: number, text: string, headers: Record<string, string> = {}) =>
        void response.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(text);
      const signal = signalOfPath(request.url ?? '');
      if (signal === undefined) return plain(404, `${request.url} is not an OTLP/HTTP path`);
      if (request.method !== 'POST') return plain(405, 'POST an export', { allow: 'POST' });
      const encoding = encodingOf(request.headers['content-type']);
      if (encoding === undefined) return plain(415, `${request.headers['content-type'] ?? 'no content type'} is not supported`);
      const wire = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      const send = (answer: ReceiverAnswer) => {
        const { status, headers, body } = receiverResponse(signal, encoding, answer);
        response.writeHead(status, { ...headers, 'content-length': String(body.length) }).end(body);
      };
      let received: ReceivedExport = { signal, encoding, headers: request.headers, body: wire, request: undefined };
      if (decoding) {
        const contentEncoding = String(request.headers['content-encoding'] ?? 'identity').toLowerCase();
        if (contentEncoding !== 'identity' && contentEncoding !== 'gzip') return plain(415, `content-encoding ${contentEncoding} is not supported`);
        let body = wire;
        try {
          if (contentEncoding === 'gzip') body = gunzipSync(wire, { maxOutputLength: maxBytes });
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError) {
            return send({ kind: 'failed', status: 413, message: `body over ${maxBytes} bytes once decompressed` });
          }
          return send({ kind: 'failed', status: 400, message: 'body is not valid gzip' });
        }
        try {
          received = { ...received, body, request: decodeExportRequest(signal, encoding, body) };
        } catch (error) {
          return send({ kind: 'failed', status: 400, message: `cannot decode the ${encoding} body: ${(error as Error).message}` });
        }
      }
      const answer = options.onExport(received);
      if (answer !== 'hang') send(answer);
    });
  };
}

export interface OtlpReceiver {
  readonly url: string;
  readonly port: number;
  /** Closes every connection, those of unanswered requests too, and stops listening. */
  stop(): Promise<void>;
}

/** An OTLP/HTTP receiver listening on 127.0.0.1 (`port` 0: a free one), for the demo and the tests. */
export async function startOtlpReceiver(options: OtlpReceiverOptions & { readonly port?: number }): Promise<OtlpReceiver> {
  const server: Server = createServer(otlpRequestHandler(options));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
