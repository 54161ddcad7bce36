/**
 * Proxy side of otlp-gateway.bench.ts (not run by hand): the least a Node.js OTLP gateway can do, built
 * from the same parts as ours (Fastify with the body kept as bytes, OtlpUpstream's pooled undici client)
 * and nothing else: no credential, no store, no enforcement, no log line, no metric. It forwards each export
 * to the sink and answers what the sink answered. Its cost per export bounds what any gateway on this
 * runtime can reach against nginx, whatever it checks.
 */
import fastify from 'fastify';
import type { AddressInfo } from 'node:net';
import { OtlpUpstream } from '../src/otlp-gateway/otlp-upstream';

async function serve(): Promise<void> {
  const upstreamUrl = process.env.OTLP_UPSTREAM_URL;
  if (upstreamUrl === undefined) throw new Error('OTLP_UPSTREAM_URL is required');
  const upstream = new OtlpUpstream(upstreamUrl, {}, 10_000);
  const app = fastify({ bodyLimit: 64 * 1024 * 1024 });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  app.post('/v1/traces', async (request, reply) => {
    const answer = await upstream.send('/v1/traces', String(request.headers['content-type']), request.body as Buffer);
    void reply.status(answer.status).header('content-type', answer.contentType ?? 'application/x-protobuf');
    return answer.body;
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  process.send?.({ type: 'listening', port: (app.server.address() as AddressInfo).port });
  process.once('SIGTERM', () => void app.close().finally(() => process.exit(0)));
  process.once('disconnect', () => process.exit(0));
}

serve().catch((error: unknown) => {
  process.stderr.write(`bench proxy failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
