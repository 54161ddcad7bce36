import { Inject, Injectable, Logger as NestLogger, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { McpConfig } from '../config/sections/mcp';
import { callerCheckHook } from '../internal-api/internal-api-caller';
import { InternalApiTokenVerifier } from '../internal-api/internal-api-token';
import { INTERNAL_API_VERIFIER } from '../internal-api/internal-api.constants';
import { APP_LOGGER } from '../observability/logger';
import { ReadsService } from '../reads/reads.service';
import { mcpCallerRefusal } from './mcp-caller';
import { mcpServerOver } from './mcp-tools';

export const MCP_PATH = '/internal/ci/telemetry/mcp';

/** The JSON-RPC error a stateless server answers a GET (no stream to open) or a DELETE (no session to end) with. */
const NO_SESSIONS = JSON.stringify({
  jsonrpc: '2.0',
  error: { code: -32000, message: 'Method not allowed: this server is stateless, POST each request' },
  id: null,
});

/**
 * SPEC §14: the MCP server on the internal port, Streamable HTTP, stateless: every POST gets its own server and
 * transport (no session, nothing kept between requests, so any replica answers any call), JSON answers rather than
 * an SSE stream (a read answers once). A plain Fastify route, not a Nest controller, because the body must reach
 * the transport as it came: the SDK parses it and answers malformed JSON-RPC in JSON-RPC's own terms. The Web
 * Standard transport (the one the SDK's Node transport wraps) hands back a Response, which Fastify sends, so the
 * request id, the access log and the internal API's 401 stay Fastify's as on every other route.
 */
@Injectable()
export class McpRoute implements OnModuleInit {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly reads: ReadsService,
    private readonly config: McpConfig,
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    const fastify = this.adapterHost.httpAdapter.getInstance<FastifyInstance>();
    const onRequest = callerCheckHook((headers) => mcpCallerRefusal(headers, this.verifier), this.logger);
    void fastify.register(async (scope) => {
      // The body as text, for the transport to parse (its own -32700 for bad JSON, its own 415 for another type).
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body));
      scope.route({ method: 'POST', url: MCP_PATH, onRequest, handler: (request, reply) => this.answer(request, reply) });
      scope.route({
        method: ['GET', 'DELETE'],
        url: MCP_PATH,
        onRequest,
        handler: (_request, reply) => reply.status(405).header('allow', 'POST').type('application/json; charset=utf-8').send(NO_SESSIONS),
      });
    });
    new NestLogger('RouterExplorer').debug(`Mapped {${MCP_PATH}, POST} route (plain Fastify, MCP)`);
  }

  private async answer(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const server = mcpServerOver(this.reads, this.config.answerBudget);
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    try {
      await server.connect(transport);
      const response = await transport.handleRequest(webRequestOf(request));
      reply.status(response.status);
      response.headers.forEach((value, name) => void reply.header(name, value));
      return reply.send(response.body === null ? '' : Buffer.from(await response.arrayBuffer()));
    } finally {
      await server.close();
    }
  }
}

const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection']);

/** The request as the Web Standard transport reads it: its headers and the body text. */
function webRequestOf(request: FastifyRequest): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    // The body is whole already: how it was framed on the wire is no header of this one.
    if (value === undefined || FRAMING.has(name)) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  const body = typeof request.body === 'string' ? request.body : undefined;
  return new Request(`http://${request.host}${request.url}`, { method: request.method, headers, body });
}
