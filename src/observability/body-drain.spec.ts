import fastify, { FastifyInstance } from 'fastify';
import { connect } from 'node:net';
import { drainUnreadBodies } from './body-drain';

const BODY_LIMIT = 64 * 1024;

/** A server that refuses every request before reading its body, as the credential check does. */
async function refusingServer(): Promise<{ app: FastifyInstance; port: number }> {
  const app = fastify({ bodyLimit: BODY_LIMIT });
  drainUnreadBodies(app, BODY_LIMIT);
  app.post('/', { onRequest: async (_request, reply) => reply.status(401).send({ error: 'no credentials' }) }, async () => 'unreachable');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  return { app, port: typeof address === 'object' && address !== null ? address.port : 0 };
}

/**
 * Streams a chunked body for as long as the server lets it, and reports what the client saw: the status
 * line of the answer, and how much it had sent when the server closed the connection.
 */
function sendEndlessBody(port: number, maxBytes: number): Promise<{ status: string; sentBytes: number }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const chunk = Buffer.alloc(16 * 1024, 0x61);
    const framed = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]);
    let answer = '';
    let sentBytes = 0;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      socket.destroy();
      resolve({ status: answer.split('\r\n')[0], sentBytes });
    };
    socket.on('data', (data: Buffer) => (answer += data.toString('latin1')));
    socket.on('error', finish);
    socket.on('close', finish);
    const pump = () => {
      while (!finished && sentBytes < maxBytes) {
        sentBytes += chunk.length;
        if (!socket.write(framed)) return void socket.once('drain', pump);
      }
      if (sentBytes >= maxBytes) finish();
    };
    socket.write('POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n', pump);
  });
}

describe('drainUnreadBodies', () => {
  let server: { app: FastifyInstance; port: number };
  beforeEach(async () => (server = await refusingServer()));
  afterEach(() => server.app.close());

  it('answers at once, then reads an unwanted body only up to twice the body limit before cutting the connection', async () => {
    const { status, sentBytes } = await sendEndlessBody(server.port, 256 * 1024 * 1024);
    expect(status).toBe('HTTP/1.1 401 Unauthorized');
    // Socket buffers on both ends hold a few MiB at most; an unbounded drain would take all 256 MiB.
    expect(sentBytes).toBeLessThan(32 * 1024 * 1024);
  });
});
