import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createServer, request as httpRequest } from 'node:http';
import { INTERNAL_API_HEADER, signInternalApiToken } from '../../src/internal-api/internal-api-token';
import { MCP_PATH } from '../../src/mcp/mcp.route';
import { ISSUER } from './internal-api';
import { freePort } from './ports';

/** Where a client puts the internal-API JWT: `Authorization: Bearer`, as MCP clients do, or the internal API's own header. */
export type TokenPlace = 'bearer' | 'header';

/**
 * A fetch that signs a fresh internal-API JWT into every request, as GitLab signs each call: a token is accepted for
 * 60 s after it was issued, and a test's client lives longer than that.
 */
export function signingFetch(secret: Buffer, place: TokenPlace = 'bearer'): typeof fetch {
  return async (input, init) => {
    const headers = new Headers(init?.headers);
    const token = await signInternalApiToken(secret, ISSUER);
    if (place === 'bearer') headers.set('authorization', `Bearer ${token}`);
    else headers.set(INTERNAL_API_HEADER, token);
    return fetch(input, { ...init, headers });
  };
}

/** The SDK's own client over Streamable HTTP, connected (initialized) to the service's MCP server at `baseUrl`. */
export async function mcpClient(baseUrl: string, secret: Buffer, place: TokenPlace = 'bearer'): Promise<Client> {
  const client = new Client({ name: 'ci-job-telemetry-tests', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${baseUrl}${MCP_PATH}`), { fetch: signingFetch(secret, place) }));
  return client;
}

export interface SigningProxy {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A forwarding proxy that adds a freshly signed JWT (`Authorization: Bearer`) to every request it passes to `target`:
 * for a client that cannot be told to send a header, such as the MCP conformance suite's (its `server` command takes
 * a URL and nothing else). Everything else is forwarded as it came, both ways.
 */
export async function signingProxy(target: string, secret: Buffer): Promise<SigningProxy> {
  const upstream = new URL(target);
  const server = createServer((request, response) => {
    void signInternalApiToken(secret, ISSUER).then((token) => {
      const forwarded = httpRequest(
        {
          host: upstream.hostname,
          port: upstream.port,
          path: upstream.pathname,
          method: request.method,
          headers: { ...request.headers, authorization: `Bearer ${token}` },
        },
        (answer) => {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
        },
      );
      forwarded.on('error', () => response.destroy());
      request.pipe(forwarded);
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
