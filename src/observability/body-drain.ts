import type { FastifyInstance } from 'fastify';
import type { IncomingMessage } from 'node:http';

/**
 * How long the rest of an unwanted body is read after the answer: a default OTLP exporter gives up on
 * a request after 10 s, so a client still sending after that is no longer waiting for the answer.
 */
const DRAIN_MAX_MS = 10_000;

/**
 * An answer sent before the whole request body has arrived (over the body limit, refused before the
 * body is read, shutdown) goes out at once, and the rest of the body is then read and discarded before
 * the connection closes, as nginx's lingering close does. Closing a connection with unread bytes makes
 * the kernel send a reset, which can reach the client before it has read the answer: exporters then see
 * a network error and retry the same body instead of reading the 413 (SPEC §6, issue 9 item 7).
 * Bounded: at most twice `bodyLimitBytes` more is read, for at most DRAIN_MAX_MS; past that the
 * connection is cut.
 */
export function drainUnreadBodies(app: FastifyInstance, bodyLimitBytes: number): void {
  app.addHook('onSend', (request, _reply, _payload, done) => {
    drainAfterAnswer(request.raw, bodyLimitBytes);
    done();
  });
}

/** HTTP/1.1 frames a request body only by Content-Length or Transfer-Encoding (RFC 9112 §6.3): without them there is none. */
function announcesBody(request: IncomingMessage): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * The same, for answers Fastify sends outside any route (its `frameworkErrors`, such as a bad URL),
 * where no onSend hook runs. Call it before sending the answer.
 */
export function drainAfterAnswer(request: IncomingMessage, bodyLimitBytes: number): void {
  // `complete`: the whole body has arrived, read or not. `readableEnded` covers requests that are not
  // sockets at all (Fastify's inject). A request that announces no body has none to wait for, even when
  // it is answered before Node has marked it complete (a route answering synchronously on its headers).
  if (request.complete || request.readableEnded || request.destroyed || !announcesBody(request)) return;
  const maxBytes = 2 * bodyLimitBytes;
  const socket = request.socket;

  const drained = new Promise<void>((resolve) => {
    let received = 0;
    const done = (cut: boolean) => {
      clearTimeout(timer);
      request.off('data', onData).off('end', ended).off('close', ended);
      // Fastify's inject hands in a request whose socket is a stand-in without destroy().
      if (cut && typeof socket.destroy === 'function') socket.destroy();
      else if (cut) request.destroy();
      resolve();
    };
    const ended = () => done(false);
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > maxBytes) done(true);
    };
    const timer = setTimeout(() => done(true), DRAIN_MAX_MS).unref();
    request.on('data', onData).once('end', ended).once('close', ended);
    request.resume();
  });

  // Node ends a `Connection: close` exchange with socket.destroySoon() once the answer is written: FIN,
  // then destroy, whatever the client is still sending. Half-close now and destroy only once the body is
  // drained. Own property, removed again once used or once the body is in, so later requests on a
  // kept-alive connection close as Node closes them.
  const lingering = socket as { destroySoon?: () => void };
  lingering.destroySoon = () => {
    delete lingering.destroySoon;
    socket.end();
    void drained.then(() => socket.destroySoon());
  };
  void drained.then(() => {
    if (Object.prototype.hasOwnProperty.call(socket, 'destroySoon')) delete lingering.destroySoon;
  });
}
