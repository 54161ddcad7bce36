import { createServer, IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpCollectorClient } from '../../src/collector/http-collector-client';
import { encodeExportResponse, encodeRpcStatus } from '../../src/otlp/otlp-response';

/** What the collector answers next, and what it was sent. */
interface Scripted {
  status: number;
  headers?: Record<string, string>;
  body?: Buffer | string;
  /** Never answers. */
  hang?: boolean;
}

/**
 * HttpCollectorClient against a real HTTP server on a free port: every answer of the collector becomes one
 * ExportResult, decided by OTLP/HTTP's rules (2xx accepted with its partial success; 429, 502, 503, 504 and
 * transport failures retried with the collector's Retry-After; 413 too large, 400 bad data, anything else refused).
 */
describe('HttpCollectorClient', () => {
  let server: Server;
  let url: string;
  let next: Scripted;
  let received: { path: string; headers: IncomingHttpHeaders; body: Buffer }[];
  let client: HttpCollectorClient;

  beforeEach(async () => {
    received = [];
    next = { status: 200 };
    server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        received.push({ path: request.url ?? '', headers: request.headers, body: Buffer.concat(chunks) });
        if (next.hang) return;
        response.writeHead(next.status, next.headers).end(next.body ?? '');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/collector/`;
    client = new HttpCollectorClient(url, { authorization: 'Basic collector' }, 500);
  });
  afterEach(async () => {
    await client.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('posts the export to <url>/v1/<signal> with its media type and the configured headers only', async () => {
    await client.export('logs', 'json', Buffer.from('{"resourceLogs":[]}'));
    expect(received).toHaveLength(1);
    expect(received[0].path).toBe('/collector/v1/logs');
    expect(received[0].headers).toMatchObject({ 'content-type': 'application/json', authorization: 'Basic collector' });
    expect(received[0].body.toString()).toBe('{"resourceLogs":[]}');
  });

  it.each(['protobuf', 'json'] as const)("accepts a 2xx with the collector's partial success decoded (%s)", async (encoding) => {
    const partialSuccess = { rejectedItems: 2, errorMessage: 'two spans too old' };
    next = {
      status: 200,
      headers: { 'content-type': encoding === 'json' ? 'application/json' : 'application/x-protobuf' },
      body: encodeExportResponse('traces', encoding, partialSuccess),
    };
    expect(await client.export('traces', encoding, Buffer.from('x'))).toEqual({ kind: 'accepted', status: 200, partialSuccess });
  });

  it('accepts a 2xx whose answer it cannot read: the collector has the data, sending it again would duplicate it', async () => {
    next = { status: 202, headers: { 'content-type': 'application/json' }, body: 'not json' };
    expect(await client.export('metrics', 'json', Buffer.from('{}'))).toEqual({ kind: 'accepted', status: 202, partialSuccess: undefined });
  });

  it.each([429, 502, 503, 504])("retries a %i after the collector's Retry-After in seconds", async (status) => {
    const body = encodeRpcStatus('json', { code: 14, message: 'busy' });
    next = { status, headers: { 'content-type': 'application/json', 'retry-after': '7' }, body };
    expect(await client.export('traces', 'json', Buffer.from('{}'))).toEqual({
      kind: 'retry',
      happened: status,
      retryAfterSeconds: 7,
      contentType: 'application/json',
      body,
    });
  });

  it('reads a Retry-After given as an HTTP date, and none at all', async () => {
    next = { status: 503, headers: { 'retry-after': new Date(Date.now() + 30_000).toUTCString() } };
    const dated = await client.export('traces', 'protobuf', Buffer.alloc(0));
    expect(dated.kind === 'retry' && dated.retryAfterSeconds).toBeGreaterThanOrEqual(29);
    next = { status: 502 };
    expect(await client.export('traces', 'protobuf', Buffer.alloc(0))).toMatchObject({ kind: 'retry', happened: 502, retryAfterSeconds: undefined });
  });

  it.each([
    [400, 'bad_data'],
    [413, 'too_large'],
    [401, 'refused'],
    [403, 'refused'],
    [404, 'refused'],
    [408, 'refused'],
    [500, 'refused'],
    [501, 'refused'],
  ])('names a %i %s, with the answer as it came', async (status, kind) => {
    const body = encodeRpcStatus('protobuf', { code: 3, message: 'no' });
    next = { status, headers: { 'content-type': 'application/x-protobuf' }, body };
    expect(await client.export('traces', 'protobuf', Buffer.alloc(0))).toEqual({
      kind,
      status,
      contentType: 'application/x-protobuf',
      body,
      retryAfterSeconds: undefined,
    });
  });

  it('retries when the collector does not answer in time', async () => {
    next = { status: 200, hang: true };
    expect(await client.export('traces', 'json', Buffer.from('{}'))).toEqual({ kind: 'retry', happened: 'timeout' });
  });

  it('retries when nothing listens', async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(await client.export('traces', 'json', Buffer.from('{}'))).toEqual({ kind: 'retry', happened: 'unreachable' });
    server.listen(0, '127.0.0.1');
  });
});
