import type { ExportResult } from '../collector/collector-client';
import { loadConfig } from '../config/app-config';
import { MetricsService } from '../observability/metrics.service';
import { keepsWhatTheOutboxWasGiven } from '../../test/suites/outbox-delivery.suite';
import { memoryWorld } from '../../test/suites/store-world';
import { MemoryOutboxStore } from './memory-outbox-store';
import { OutboxEntry } from './outbox';
import { OutboxDeliverer, retryDelayOf } from './outbox-deliverer';
import { OutboxMetrics } from './outbox.metrics';

const MAX_BACKOFF_MS = 60_000;

/** The wait before the outbox sends again what the collector did not take (SPEC §10). */
describe('retryDelayOf', () => {
  it('backs off exponentially per attempt, with jitter, up to the maximum', () => {
    const retry = { kind: 'retry', happened: 'unreachable' } as const;
    expect(retryDelayOf(retry, 0, MAX_BACKOFF_MS, 0.5)).toEqual({ reason: 'unreachable', delayMs: 500 });
    expect(retryDelayOf(retry, 3, MAX_BACKOFF_MS, 0.5)).toEqual({ reason: 'unreachable', delayMs: 4000 });
    expect(retryDelayOf(retry, 3, MAX_BACKOFF_MS, 0).delayMs).toBeCloseTo(3200);
    expect(retryDelayOf(retry, 3, MAX_BACKOFF_MS, 1).delayMs).toBeCloseTo(4800);
    expect(retryDelayOf(retry, 40, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: MAX_BACKOFF_MS });
  });

  it("waits at least the collector's Retry-After, up to five minutes, and names what happened", () => {
    expect(retryDelayOf({ kind: 'retry', happened: 503, retryAfterSeconds: 30 }, 0, MAX_BACKOFF_MS, 0.5)).toEqual({ reason: '503', delayMs: 30_000 });
    expect(retryDelayOf({ kind: 'retry', happened: 429, retryAfterSeconds: 1 }, 3, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: 4000 });
    expect(retryDelayOf({ kind: 'retry', happened: 429, retryAfterSeconds: 3600 }, 0, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: 300_000 });
    expect(retryDelayOf({ kind: 'retry', happened: 'timeout' }, 0, MAX_BACKOFF_MS, 0.5)).toMatchObject({ reason: 'timeout' });
  });

  it('backs off the same from an answer that says nothing of the data (401, 404, 500), honouring its Retry-After', () => {
    const refused = (status: number, retryAfterSeconds?: number) =>
      ({ kind: 'refused', status, contentType: undefined, body: Buffer.alloc(0), retryAfterSeconds }) as const;
    expect(retryDelayOf(refused(401), 2, MAX_BACKOFF_MS, 0.5)).toEqual({ reason: '401', delayMs: 2000 });
    expect(retryDelayOf(refused(500, 20), 0, MAX_BACKOFF_MS, 0.5)).toEqual({ reason: '500', delayMs: 20_000 });
  });
});

keepsWhatTheOutboxWasGiven(memoryWorld());

/** The deliverer's rounds against a memory outbox and a collector that records what it took. */
describe('OutboxDeliverer', () => {
  const limits = { maxSpans: 100, rememberMs: 60_000 };
  const span = (key: string): OutboxEntry => ({ key, body: `{"resource":{"attributes":[]},"scopeSpans":[],"key":"${key}"}`, enqueuedAt: Date.now() });
  let store: MemoryOutboxStore;
  let metrics: MetricsService;
  let deliverer: OutboxDeliverer;
  const taken: string[] = [];
  const collector = {
    export: async (_signal: string, _encoding: string, body: Buffer): Promise<ExportResult> => {
      taken.push(...[...body.toString().matchAll(/"key":"(\w+)"/g)].map((match) => match[1]));
      return { kind: 'accepted', status: 200, partialSuccess: undefined };
    },
  };

  const start = () => {
    const config = loadConfig({ OTLP_UPSTREAM_TIMEOUT_MS: '1000', OUTBOX_MAX_BACKOFF_SECONDS: '1' });
    deliverer = new OutboxDeliverer(config.outbox, config.collector, store, collector, new OutboxMetrics(metrics));
    deliverer.onApplicationBootstrap();
  };
  const until = async (what: () => Promise<boolean>) => {
    for (let waited = 0; !(await what()); waited += 20) {
      if (waited > 5000) throw new Error('not within 5 s');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const counted = async (name: string) => (await metrics.registry.getSingleMetric(name)?.get())?.values[0]?.value ?? 0;

  beforeEach(() => {
    store = new MemoryOutboxStore();
    metrics = new MetricsService();
    taken.length = 0;
  });
  afterEach(async () => {
    await deliverer.onModuleDestroy();
    store.close();
  });

  it('acknowledges next round what the collector took when the store missed the acknowledgement, instead of sending it again', async () => {
    const acknowledge = store.acknowledge.bind(store);
    let refusals = 1;
    store.acknowledge = async (keys) => {
      if (refusals-- > 0) throw new Error('store timeout');
      return acknowledge(keys);
    };
    await store.enqueue([span('aa'), span('bb')], limits);
    start();
    // Well before the lease (7 s here) runs out: the outbox is empty, and the collector has each span once.
    await until(async () => (await store.depth()).spans === 0);
    expect(taken.sort()).toEqual(['aa', 'bb']);
    expect(await counted('ci_job_telemetry_outbox_redelivered_total')).toBe(0);
  });

  it('sends again, counts and says an entry whose deliverer stopped mid-delivery (its lease ran out unanswered)', async () => {
    await store.enqueue([span('cc'), span('dd')], limits);
    // A replica claimed cc and was killed before it answered.
    await store.claim(1, 50);
    await new Promise((resolve) => setTimeout(resolve, 60));
    start();
    await until(async () => (await store.depth()).spans === 0);
    expect(taken.sort()).toEqual(['cc', 'dd']);
    expect(await counted('ci_job_telemetry_outbox_redelivered_total')).toBe(1);
  });
});
