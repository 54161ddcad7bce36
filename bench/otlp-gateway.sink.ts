/**
 * Sink side of otlp-gateway.bench.ts (not run by hand): the one OTLP receiver (src/otlp/otlp-receiver.ts)
 * in its bytes mode, which reads the whole body and answers 200 with the OTLP all-accepted answer (an empty
 * ExportTrace/Metrics/Logs ServiceResponse: zero bytes in protobuf, `{}` in JSON) without inflating or
 * decoding anything, in its own process so its CPU is counted apart from the gateway's and the load
 * generator's.
 *
 * GET /-/stats answers what it has received so far; GET /-/last?type=<content type> the last body of that
 * type as received, so the bench can check (once, outside the timed rounds) what really reached the collector:
 * by type, because the service's own pipeline spans (JSON, from its outbox) may land after an export checked.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { otlpRequestHandler } from '../src/otlp/otlp-receiver';

export interface SinkStats {
  readonly requests: number;
  readonly bytes: number;
  /** Connections accepted so far: a client without keep-alive opens one per request. */
  readonly connections: number;
  readonly byPath: Record<string, number>;
}

let requests = 0;
let bytes = 0;
let connections = 0;
const byPath: Record<string, number> = {};
const lastOfType = new Map<string, { contentType: string; contentEncoding: string; body: Buffer }>();

const EMPTY = Buffer.alloc(0);

const receive = otlpRequestHandler({
  mode: 'bytes',
  onExport: ({ signal, headers, body }) => {
    requests++;
    bytes += body.length;
    const path = `/v1/${signal}`;
    byPath[path] = (byPath[path] ?? 0) + 1;
    const contentType = headers['content-type'] ?? '';
    lastOfType.set(contentType, { contentType, contentEncoding: String(headers['content-encoding'] ?? ''), body });
    return { kind: 'accepted' };
  },
});

const server = createServer((request, response) => {
  if (request.method === 'GET' && request.url === '/-/stats') {
    const stats: SinkStats = { requests, bytes, connections, byPath };
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats));
    return;
  }
  if (request.method === 'GET' && request.url?.startsWith('/-/last?type=')) {
    const last = lastOfType.get(decodeURIComponent(request.url.slice('/-/last?type='.length)));
    response
      .writeHead(last === undefined ? 404 : 200, {
        'content-type': 'application/octet-stream',
        'x-received-content-type': last?.contentType ?? '',
        'x-received-content-encoding': last?.contentEncoding ?? '',
      })
      .end(last?.body ?? EMPTY);
    return;
  }
  receive(request, response);
});
server.keepAliveTimeout = 65_000; // longer than any client's idle timeout, as a collector behind a proxy would be
server.on('connection', () => connections++);
server.listen(0, '127.0.0.1', () => {
  process.send?.({ type: 'listening', port: (server.address() as AddressInfo).port });
});
process.on('disconnect', () => process.exit(0));
