import type { FastifyInstance } from 'fastify';
import type { IncomingMessage } from 'node:http';

/**
 * How long an answer waits for the rest of a body it did not need: a default OTLP exporter gives up on
 * a request after 10 s, so a client still sending after that is no longer listening for the answer.
 */
const DRAIN_MAX_MS = 10_000;

/**
 * Answers sent before the whole request body has arrived (over the body limit, refused before the body
 * is read, shutdown) first read and discard the rest of it. Closing a connection that still has unread
 * bytes makes the kernel send a reset, and a reset can reach the client before it has read the answer:
 * exporters then see a network error and retry the same oversize body, instead of reading the 413
 * (SPEC §6, issue 9 item 7). Bounded: a body up to twice `bodyLimitBytes` is drained, for at most
 * DRAIN_MAX_MS; past that the answer goes out and the connection is closed as it is.
 */
export function drainUnreadBodies(app: FastifyInstance, bodyLimitBytes: number): void {
  app.addHook('onSend', async (request) => {
    await drainRequestBody(request.raw, bodyLimitBytes);
  });
}

/**
 * The same drain, for answers Fastify sends outside any route (its `frameworkErrors`, such as a bad
 * URL), where no onSend hook runs. Resolves when the answer may go out.
 */
export function drainRequestBody(request: IncomingMessage, bodyLimitBytes: number): Promise<void> {
  const maxBytes = 2 * bodyLimitBytes;
  // `complete`: the whole body has arrived, read or not. `readableEnded` covers requests that are
  // not sockets at all (Fastify's inject).
  if (request.complete || request.readableEnded || request.destroyed) return Promise.resolve();
  if (Number(request.headers['content-length']) > maxBytes) return Promise.resolve();
  return new Promise((resolve) => {
    let drained = 0;
    const done = () => {
      clearTimeout(timer);
      request.off('data', onData).off('end', done).off('error', done).off('close', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      drained += chunk.length;
      if (drained > maxBytes) done();
    };
    const timer = setTimeout(done, DRAIN_MAX_MS);
    request.on('data', onData).once('end', done).once('error', done).once('close', done);
    request.resume();
  });
}
