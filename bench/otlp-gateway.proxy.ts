/**
 * Proxy side of otlp-gateway.bench.ts (not run by hand), in two forms, each its own process:
 *
 *   proxy  the least a Node.js OTLP gateway can do, built from the same parts as ours (Fastify with the body
 *          kept as bytes, HttpCollectorClient's pooled undici client behind the same coalescing as the gateway's,
 *          OTLP_UPSTREAM_LINGER_MS) and nothing else: no credential, no store, no
 *          enforcement, no log line, no metric. It forwards each export to the sink and answers what the sink
 *          answered, as the client's result. Its cost per export bounds what any gateway on this runtime can reach against nginx,
 *          whatever it checks.
 *   floor  (FLOOR_IDENTITY set) the same plus the work SPEC §6 makes every export do, done the way the gateway
 *          does it: the runner's export window and the job's span quota charged from the lease ledger's blocks
 *          (RedisLimitStore on REDIS_URL; a store round trip per block, issue 21), the body enforced against
 *          the job's identity, and the enforced body forwarded. Still no credential check, log line or metric.
 *          What bounds our gateway, which does that and also authenticates, logs and counts.
 *   ledger (FLOOR_IDENTITY set, FLOOR_ENFORCE=no) the floor without enforcement: the body forwarded as it came.
 *          Beside the floor, what enforcement costs in a process busy with everything else.
 */
import fastify from 'fastify';
import type { AddressInfo } from 'node:net';
import { JobSpanLedger } from '../src/limits/job-span-ledger';
import { RedisLimitStore } from '../src/limits/redis-limit-store';
import { WindowLedger } from '../src/limits/window-ledger';
import { RedisStore } from '../src/store/redis-store';
import { CoalescingCollectorClient } from '../src/collector/coalescing-collector-client';
import { HttpCollectorClient } from '../src/collector/http-collector-client';
import { encodingOf, OTLP_MEDIA_TYPES } from '../src/otlp/otlp-encoding';
import { encodeExportResponse } from '../src/otlp/otlp-response';
import { enforceExport } from '../src/otlp-gateway/export-policy/enforce-export';
import type { GatewayGrant } from '../src/otlp-gateway/export-policy/otlp-types';

const UNLIMITED = 2_000_000_000;

/** The floor's per-export work; undefined for the plain proxy. */
async function floorWork(): Promise<((body: Buffer) => Promise<Buffer>) | undefined> {
  const identityJson = process.env.FLOOR_IDENTITY;
  if (identityJson === undefined) return undefined;
  const identity = JSON.parse(identityJson) as GatewayGrant;
  const redisUrl = process.env.REDIS_URL;
  if (redisUrl === undefined) throw new Error('REDIS_URL is required with FLOOR_IDENTITY');
  const store = new RedisLimitStore(await RedisStore.open({ topology: { mode: 'single', url: redisUrl }, commandTimeoutMs: 2000 }));
  const windows = new WindowLedger(store);
  const spans = new JobSpanLedger(store);
  const enforcing = process.env.FLOOR_ENFORCE !== 'no';
  const spansPerExport = Number(process.env.FLOOR_SPANS ?? 100);
  return async (body) => {
    const admitted = windows.charge(`floor:runner:${identity.runnerId}`, UNLIMITED, 60_000);
    if (!(admitted instanceof Promise ? await admitted : admitted).allowed) throw new Error('floor: runner window refused');
    if (!enforcing) {
      const charged = spans.charge(identity.jobId, spansPerExport, { perJob: UNLIMITED, perSecond: UNLIMITED }, 3_600_000);
      if (charged instanceof Promise) await charged;
      return body;
    }
    const enforced = enforceExport('traces', 'protobuf', body, identity, UNLIMITED);
    const charged = spans.charge(identity.jobId, enforced.forwardedItems, { perJob: UNLIMITED, perSecond: UNLIMITED }, 3_600_000);
    const charge = charged instanceof Promise ? await charged : charged;
    if (charge.granted < enforced.forwardedItems) throw new Error(`floor: ${charge.granted} of ${enforced.forwardedItems} spans granted`);
    return enforced.body;
  };
}

async function serve(): Promise<void> {
  const upstreamUrl = process.env.OTLP_UPSTREAM_URL;
  if (upstreamUrl === undefined) throw new Error('OTLP_UPSTREAM_URL is required');
  // Exports joined upstream as the gateway joins them (issue 29), with the same linger, so the floor is remeasured with it.
  const lingerMs = Number(process.env.OTLP_UPSTREAM_LINGER_MS ?? 2);
  const collector = new CoalescingCollectorClient(new HttpCollectorClient(upstreamUrl, {}, 10_000), { lingerMs, maxBytes: 1024 * 1024 });
  const work = await floorWork();
  const app = fastify({ bodyLimit: 64 * 1024 * 1024 });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  app.post('/v1/traces', async (request, reply) => {
    const body = work === undefined ? (request.body as Buffer) : await work(request.body as Buffer);
    const encoding = encodingOf(request.headers['content-type']) ?? 'protobuf';
    const result = await collector.export('traces', encoding, body);
    if (result.kind === 'accepted') {
      void reply.status(200).header('content-type', OTLP_MEDIA_TYPES[encoding]);
      return encodeExportResponse('traces', encoding, result.partialSuccess);
    }
    if (result.kind === 'retry' && typeof result.happened !== 'number') return reply.status(result.happened === 'timeout' ? 504 : 502).send();
    void reply
      .status(result.kind === 'retry' ? (result.happened as number) : result.status)
      .header('content-type', result.contentType ?? OTLP_MEDIA_TYPES[encoding]);
    return result.body ?? Buffer.alloc(0);
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
