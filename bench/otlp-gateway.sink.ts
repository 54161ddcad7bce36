/**
 * Sink side of otlp-gateway.bench.ts (not run by hand): an OTLP/HTTP "collector" that reads the
 * whole body and answers 200 with the OTLP all-accepted answer (an empty ExportTrace/Metrics/Logs
 * ServiceResponse: zero bytes in protobuf, `{}` in JSON) without decoding anything, in its own
 * process so its CPU is counted apart from the gateway's and the load generator's.
 *
 * GET /-/stats answers what it has received so far; GET /-/last the last body as received, so the
 * bench can check (once, outside the timed rounds) what really reached the collector.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

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
let last: { contentType: string; contentEncoding: string; body: Buffer } | undefined;

const EMPTY = Buffer.alloc(0);
const EMPTY_JSON = Buffer.from('{}');

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const path = request.url ?? '';
    if (request.method === 'GET' && path === '/-/stats') {
      const stats: SinkStats = { requests, bytes, connections, byPath };
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats));
      return;
    }
    if (request.method === 'GET' && path === '/-/last') {
      response
        .writeHead(last === undefined ? 404 : 200, {
          'content-type': 'application/octet-stream',
          'x-received-content-type': last?.contentType ?? '',
          'x-received-content-encoding': last?.contentEncoding ?? '',
        })
        .end(last?.body ?? EMPTY);
      return;
    }
    if (request.method !== 'POST' || !/^\/v1\/(traces|metrics|logs)$/.test(path)) {
      response.writeHead(404).end();
      return;
    }
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    requests++;
    bytes += body.length;
    byPath[path] = (byPath[path] ?? 0) + 1;
    const contentType = request.headers['content-type'] ?? '';
    last = { contentType, contentEncoding: String(request.headers['content-encoding'] ?? ''), body };
    if (contentType.startsWith('application/json')) {
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': EMPTY_JSON.length }).end(EMPTY_JSON);
    } else {
      response.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 }).end(EMPTY);
    }
  });
});
server.keepAliveTimeout = 65_000; // longer than any client's idle timeout, as a collector behind a proxy would be
server.on('connection', () => connections++);
server.listen(0, '127.0.0.1', () => {
  process.send?.({ type: 'listening', port: (server.address() as AddressInfo).port });
});
process.on('disconnect', () => process.exit(0));
