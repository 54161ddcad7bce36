import { WireBody, wholeBody } from '../../src/otlp/otlp-wire';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import type { FastifyInstance } from 'fastify';
import { gzipSync } from 'node:zlib';
import { Readable } from 'node:stream';
import pino from 'pino';
import { MetricsService } from '../../src/observability/metrics.service';
import { loadConfig } from '../../src/config/app-config';
import { MemoryLimitStore } from '../../src/limits/memory-limit-store';
import { StoreUnavailableError } from '../../src/store/store-unavailable-error';
import { GatewayMetrics } from '../../src/otlp-gateway/gateway-metrics';
import { buildGatewayServer } from '../../src/otlp-gateway/otlp-gateway.server';
import { CollectorAnswer, exportResult, ExportResult } from '../../src/collector/collector-client';
import type { OtlpEncoding, OtlpSignal } from '../../src/otlp/otlp-encoding';
import { AuthOutcome, JobIdentity } from '../../src/runner-auth/auth-outcome';
import { DecisionCache } from '../../src/runner-auth/decision-cache';
import { RunnerCredential } from '../../src/runner-auth/runner-credential';
import { recordSpans } from '../helpers/ci-job';

/**
 * The gateway's Fastify server in process (`inject`): a memory store, a scripted auth decision and a
 * fake collector that records what reached it. The same pipeline as the e2e tier, without processes.
 */
const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const identity: JobIdentity = {
  jobId: 1001,
  projectId: 7,
  pipelineId: 500,
  runnerId: 17,
  traceId: TRACE_ID,
  expiresAt: Date.now() + 3_600_000,
  controlPlaneSpanIds: [],
};
const GOOD = { authorization: 'Bearer glcbt-job-1001', 'runner-token': 'glrt-runner-17' };

/**
 * The collector as the gateway sees it: answers what the test says (an HTTP answer, decided as the real
 * client decides it, or no answer at all), remembers every body it was sent.
 */
class FakeCollector {
  readonly received: Buffer[] = [];
  answer: CollectorAnswer | 'unreachable' = { status: 200, contentType: 'application/json', retryAfter: undefined, body: Buffer.from('{}') };
  async export(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer | WireBody): Promise<ExportResult> {
    if (this.answer === 'unreachable') return { kind: 'retry', happened: 'unreachable' };
    this.received.push(wholeBody(body));
    return exportResult(signal, encoding, this.answer);
  }
}

/** A store that refuses everything, as Redis does while it is down. */
class UnreachableStore extends MemoryLimitStore {
  override async takeWindowBlock(): Promise<never> {
    throw new StoreUnavailableError('connection refused');
  }

  override async leaseSpans(): Promise<never> {
    throw new StoreUnavailableError('connection refused');
  }
}

const decide = async (credential: RunnerCredential): Promise<AuthOutcome> =>
  credential.kind === 'tokens' && credential.jobToken === 'glcbt-job-1001' && credential.runnerToken === 'glrt-runner-17'
    ? { kind: 'allowed', identity, maxAgeSeconds: 30 }
    : { kind: 'unauthenticated', reason: 'unknown job token' };

function exportBody(names: string[], traceId = TRACE_ID): Buffer {
  return Buffer.from(JsonTraceSerializer.serializeRequest(recordSpans(`00-${traceId}-b7ad6b7169203331-01`, names))!);
}

interface ResourceSpans {
  resource: { attributes: Array<{ key: string; value: { intValue?: string | number } }> };
  scopeSpans: Array<{ spans: Array<{ name: string }> }>;
}

describe('OTLP gateway in process (SPEC §6)', () => {
  let gateway: FastifyInstance;
  let collector: FakeCollector;
  let store: MemoryLimitStore;

  async function start(options: { store?: MemoryLimitStore; env?: Record<string, string> } = {}) {
    const config = loadConfig({ SPANS_PER_JOB: '3', ...options.env });
    const metrics = new GatewayMetrics(new MetricsService());
    store = options.store ?? new MemoryLimitStore();
    collector = new FakeCollector();
    gateway = buildGatewayServer({
      config: config.gateway,
      logger: pino({ level: 'silent' }),
      decisions: new DecisionCache(decide, 100, metrics),
      store,
      collector,
      metrics,
    });
    await gateway.ready();
  }
  afterEach(async () => {
    await gateway.close();
    await store.close();
  });

  const post = (body: Buffer, headers: Record<string, string> = GOOD) =>
    gateway.inject({ method: 'POST', url: '/v1/traces', headers: { 'content-type': 'application/json', ...headers }, payload: body });

  it("forwards a job's spans with its identity stamped, and drops spans of another trace as partial success", async () => {
    await start();
    const foreign = Buffer.from(JsonTraceSerializer.serializeRequest(recordSpans(`00-${'1'.repeat(32)}-b7ad6b7169203331-01`, ['foreign']))!);
    const mixed = JSON.parse(exportBody(['compile']).toString()) as { resourceSpans: ResourceSpans[] };
    mixed.resourceSpans.push(...(JSON.parse(foreign.toString()) as { resourceSpans: ResourceSpans[] }).resourceSpans);

    const answer = await post(Buffer.from(JSON.stringify(mixed)));
    expect(answer.statusCode).toBe(200);
    expect(answer.json()).toEqual({ partialSuccess: { rejectedSpans: '1', errorMessage: expect.stringContaining('trace') } });
    const forwarded = JSON.parse(collector.received[0].toString()) as { resourceSpans: ResourceSpans[] };
    expect(forwarded.resourceSpans.flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans.map((span) => span.name)))).toEqual(['compile']);
    const jobId = forwarded.resourceSpans[0].resource.attributes.find((attribute) => attribute.key === 'ci.job.id');
    expect(Number(jobId?.value.intValue)).toBe(1001);
  });

  it('refuses a bad credential with 401 and an OTLP Status, before anything reaches the collector', async () => {
    await start();
    const answer = await post(exportBody(['compile']), { authorization: 'Bearer glcbt-forged', 'runner-token': 'glrt-runner-17' });
    expect(answer.statusCode).toBe(401);
    expect(answer.headers['content-type']).toBe('application/json');
    expect(answer.json()).toEqual({ code: 16, message: 'unknown job token' });
    expect(collector.received).toEqual([]);
  });

  it("passes the collector's 503 and Retry-After on, and gives the job its span quota back", async () => {
    await start();
    collector.answer = { status: 503, contentType: undefined, retryAfter: '7', body: Buffer.alloc(0) };
    const refused = await post(exportBody(['a', 'b', 'c']));
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('7');

    // The quota is 3 spans: the retry must get all of them, not be charged twice.
    collector.answer = { status: 200, contentType: 'application/json', retryAfter: undefined, body: Buffer.from('{}') };
    const retried = await post(exportBody(['a', 'b', 'c']));
    expect(retried.statusCode).toBe(200);
    expect(retried.json()).toEqual({});
  });

  it('answers an unreachable collector 502 and a store outage 503, both retryable with Retry-After', async () => {
    await start();
    collector.answer = 'unreachable';
    const unreachable = await post(exportBody(['compile']));
    expect([unreachable.statusCode, unreachable.headers['retry-after']]).toEqual([502, '1']);
    await gateway.close();
    await store.close();

    await start({ store: new UnreachableStore() });
    const storeDown = await post(exportBody(['compile']));
    expect([storeDown.statusCode, storeDown.headers['retry-after']]).toEqual([503, '1']);
    expect(storeDown.json()).toEqual({ code: 14, message: 'grant store unavailable' });
  });

  it("answers a runner over its export rate 429 whatever its body, and leaves the job's span quota untouched", async () => {
    await start({ env: { SPANS_PER_JOB: '10', GATEWAY_RUNNER_RATE_LIMIT: '1' } });
    expect((await post(exportBody(['a', 'b']))).statusCode).toBe(200);

    // The window is charged before the body is read: a refused export is never charged spans.
    const overRate = await post(exportBody(['c', 'd', 'e']));
    expect([overRate.statusCode, overRate.json()]).toEqual([429, { code: 8, message: expect.any(String) }]);
    const malformed = await post(Buffer.from('{"resourceSpans": 5}'));
    expect(malformed.statusCode).toBe(429);
    // Stopping hands the unspent lease back: the job has all but the two spans it sent.
    await gateway.close();
    const left = await store.leaseSpans(identity.jobId, {
      leaseId: 'probe',
      spent: 0,
      quotaWanted: 10,
      rateWanted: 0,
      limits: { perJob: 10, perSecond: 1000 },
      quotaTtlMs: 60_000,
      leaseMs: 60_000,
    });
    expect(left.quotaGranted).toBe(8);
  });

  it('takes an export arriving in many pieces whole, and refuses one over the wire limit with 413, declared or not', async () => {
    await start({ env: { GATEWAY_MAX_WIRE_BYTES: '4096' } });
    const body = Buffer.concat([Buffer.from(' '.repeat(3000)), exportBody(['pieced'])]);
    const inPieces = (bytes: Buffer, size: number) =>
      gateway.inject({
        method: 'POST',
        url: '/v1/traces',
        headers: { 'content-type': 'application/json', ...GOOD },
        payload: Readable.from(Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size))),
      });

    const pieced = await inPieces(body.subarray(0, body.length - 5), 100);
    expect(pieced.statusCode).toBe(400); // cut short of valid JSON: the bytes, not a guess, reach the decoder
    expect((await inPieces(Buffer.concat([Buffer.from(' '.repeat(4096 - body.length)), body]), 97)).statusCode).toBe(200);
    const forwarded = JSON.parse(collector.received[0].toString()) as { resourceSpans: ResourceSpans[] };
    expect(forwarded.resourceSpans[0].scopeSpans[0].spans[0].name).toBe('pieced');

    const declared = await post(Buffer.concat([body, Buffer.from(' '.repeat(2000))]));
    const streamed = await inPieces(Buffer.concat([body, Buffer.from(' '.repeat(2000))]), 512);
    for (const answer of [declared, streamed]) {
      expect([answer.statusCode, answer.json()]).toEqual([413, { code: 8, message: 'body over 4096 bytes' }]);
    }
    expect(collector.received).toHaveLength(1);
  });

  it('inflates gzip exports small and large (inline up to 1 MiB, on the thread pool beyond), and refuses one over the cap with 413', async () => {
    await start({ env: { SPANS_PER_JOB: '10', GATEWAY_MAX_DECOMPRESSED_BYTES: String(2 * 1024 * 1024) } });
    const gzipped = (body: Buffer) => post(gzipSync(body), { ...GOOD, 'content-encoding': 'gzip' });
    // Whitespace is valid JSON anywhere between tokens: the same one-span export, inflating past 1 MiB.
    const padded = (bytes: number) => Buffer.concat([Buffer.from(' '.repeat(bytes)), exportBody(['large'])]);

    expect((await gzipped(exportBody(['small']))).statusCode).toBe(200);
    expect((await gzipped(padded(1.5 * 1024 * 1024))).statusCode).toBe(200);
    const names = collector.received.map(
      (body) => (JSON.parse(body.toString()) as { resourceSpans: ResourceSpans[] }).resourceSpans[0].scopeSpans[0].spans[0].name,
    );
    expect(names).toEqual(['small', 'large']);

    const overCap = await gzipped(padded(3 * 1024 * 1024));
    expect([overCap.statusCode, overCap.json()]).toEqual([413, { code: 8, message: expect.stringContaining('once decompressed') }]);
  });
});
