import { createServer } from 'node:net';

/**
 * Ports are drawn below Linux's ephemeral range (32768-60999), and so is each port + 10000 (a Redis Cluster
 * node's bus port). A port the kernel picks for `listen(0)` comes from that range, and any outgoing
 * connection of the tests running beside (load generators, clients) can take it as its local port before
 * the server meant for it binds: a redis-server then fails to start, seen once in CI.
 */
const LOWEST_PORT = 15_000;
const HIGHEST_PORT = 22_767;
const handedOut = new Set<number>();

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A loopback port nobody listens on right now, never handed out before in this process. */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST_PORT + Math.floor(Math.random() * (HIGHEST_PORT - LOWEST_PORT + 1));
    if (handedOut.has(port) || !(await canListen(port)) || !(await canListen(port + 10_000))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port between ${LOWEST_PORT} and ${HIGHEST_PORT}`);
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 15_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}
