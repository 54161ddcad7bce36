import { Logger } from '@nestjs/common';
import { HttpCollectorClient } from '../../src/collector/http-collector-client';
import { loadConfig } from '../../src/config/app-config';
import { MetricsService } from '../../src/observability/metrics.service';
import { bundled, OutboxEntry, OutboxStore } from '../../src/outbox/outbox';
import { OutboxDeliverer } from '../../src/outbox/outbox-deliverer';
import { OutboxMetrics } from '../../src/outbox/outbox.metrics';
import { CollectorScript, ScriptedCollector, startScriptedCollector } from '../helpers/scripted-collector';
import { StoreWorld } from './store-world';
import { counted as countedIn } from '../helpers/metrics';

/**
 * The outbox keeps what it was given (issue 56 item 7, SPEC §10): nothing leaves it before a 2xx; a 413 splits, a 400
 * drops only the spans the collector cannot decode; every other answer keeps the spans and retries. Run on every
 * outbox store, with the real deliverer and the real HTTP collector client against a real HTTP collector.
 */
export function keepsWhatTheOutboxWasGiven(world: StoreWorld) {
  describe(`${world.name} outbox delivery against a collector that refuses`, () => {
    const limits = { maxSpans: 10_000, rememberMs: 60_000 };
    let outbox: OutboxStore;
    let metrics: MetricsService;
    let deliverer: OutboxDeliverer | undefined;
    let client: HttpCollectorClient | undefined;
    let collector: ScriptedCollector | undefined;
    let script: CollectorScript = () => 'ok';

    /** A control-plane span as the outbox holds it: keyed by its span id. */
    const span = (name: string): OutboxEntry => {
      const spanId = Buffer.from(name).toString('hex').slice(0, 16).padEnd(16, '0');
      return {
        key: spanId,
        body: JSON.stringify({
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'ci-job-telemetry' } }] },
          scopeSpans: [{ scope: { name: 'ci-job-telemetry/pipeline-spans' }, spans: [{ traceId: 'a'.repeat(32), spanId, name }] }],
        }),
        enqueuedAt: world.now(),
      };
    };
    const names = (count: number, prefix = 'span') => Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(2, '0')}`);

    const start = async (timeoutMs = 2000) => {
      collector = await startScriptedCollector((names, request, spans) => script(names, request, spans));
      client = new HttpCollectorClient(collector.url, {}, timeoutMs);
      const config = loadConfig({ OTLP_UPSTREAM_TIMEOUT_MS: String(timeoutMs), OUTBOX_MAX_BACKOFF_SECONDS: '1' });
      deliverer = new OutboxDeliverer(config.outbox, config.collector, outbox, client, new OutboxMetrics(metrics));
      deliverer.onApplicationBootstrap();
    };
    /** Until `what` holds, letting the store's time pass meanwhile, so what waits for its backoff comes due. */
    const until = async (description: string, what: () => boolean | Promise<boolean>) => {
      for (let waited = 0; !(await what()); waited += 50) {
        if (waited > 15_000) throw new Error(`not within 15 s: ${description}`);
        await world.elapse(50);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const counted = (name: string, labels: Record<string, string> = {}) => countedIn(metrics.registry, name, labels);
    const sorted = (list: readonly string[]) => [...list].sort();

    beforeEach(async () => {
      ({ outbox } = await world.open());
      metrics = new MetricsService();
      script = () => 'ok';
    });
    afterEach(async () => {
      await deliverer?.onModuleDestroy();
      await client?.close();
      await collector?.stop();
      deliverer = client = collector = undefined;
      await world.close();
    });

    it.each([500, 401, 403, 404, 'timeout'] as const)(
      'keeps a claim the collector answers %s, readiness degraded meanwhile, and delivers every span exactly once when it recovers',
      async (failure) => {
        const sent = names(40);
        // Spans of many pipelines, alone and bundled as a pickup batch's queue waits are.
        await outbox.enqueue([...sent.slice(0, 10).map(span), ...bundled(sent.slice(10).map(span))], limits);
        script = () => (failure === 'timeout' ? 'hang' : failure);
        await start(failure === 'timeout' ? 300 : 2000);
        await until('two failed deliveries', async () => (await counted('ci_job_telemetry_outbox_delivery_failures_total')) >= 2);
        // Nothing acknowledged, nothing lost: every span still waits, and readiness says the delivery is failing.
        expect(collector!.delivered).toEqual([]);
        expect((await outbox.depth()).spans).toBe(40);
        expect(deliverer!.deliveryFailing).toBe(true);
        expect(await counted('ci_job_telemetry_outbox_delivery_failures_total', { reason: String(failure) })).toBeGreaterThanOrEqual(2);
        // The conventions' count of the control plane's own failures says the same (an operator's cicd.system.errors).
        expect(await counted('cicd_system_errors_total', { cicd_system_component: 'outbox', error_type: String(failure) })).toBeGreaterThanOrEqual(2);

        script = () => 'ok';
        await until('the outbox to drain', async () => (await outbox.depth()).spans === 0);
        expect(sorted(collector!.delivered)).toEqual(sorted(sent));
        expect(deliverer!.deliveryFailing).toBe(false);
        expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(0);
      },
    );

    it('splits a claim the collector finds too large (413) until each request fits, and delivers every span once', async () => {
      const sent = names(37);
      await outbox.enqueue([...sent.slice(0, 12).map(span), ...bundled(sent.slice(12).map(span))], limits);
      // This collector takes at most 3 spans a request.
      script = (carried) => (carried.length > 3 ? 413 : 'ok');
      await start();
      await until('the outbox to drain', async () => (await outbox.depth()).spans === 0);
      expect(sorted(collector!.delivered)).toEqual(sorted(sent));
      expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(0);
      expect(deliverer!.deliveryFailing).toBe(false);
    });

    it('drops only the span the collector refuses as too large on its own, counted and said with its reason', async () => {
      const sent = names(20);
      await outbox.enqueue([...sent, 'huge'].map(span), limits);
      script = (carried) => (carried.includes('huge') ? 413 : 'ok');
      const said = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
      try {
        await start();
        await until('the outbox to drain', async () => (await outbox.depth()).spans === 0);
        expect(sorted(collector!.delivered)).toEqual(sorted(sent));
        expect(await counted('ci_job_telemetry_outbox_dropped_spans_total', { status: '413' })).toBe(1);
        expect(said.mock.calls.map(([line]) => String(line))).toEqual([expect.stringMatching(new RegExp(`${span('huge').key}.*413.*too large: answered 413`))]);
      } finally {
        said.mockRestore();
      }
    });

    it('delivers every other span of a claim holding one the collector cannot decode (400), and drops only that one, counted and said', async () => {
      const sent = names(60);
      const entries = [...sent.slice(0, 20), 'undecodable', ...sent.slice(20)].map(span);
      // One bundle holds the bad span: it is cut into its spans, and only that one is given up.
      await outbox.enqueue([...entries.slice(0, 15), ...bundled(entries.slice(15, 30)), ...entries.slice(30)], limits);
      script = (carried) => (carried.includes('undecodable') ? 400 : 'ok');
      const said = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
      try {
        await start();
        await until('the outbox to drain', async () => (await outbox.depth()).spans === 0);
        expect(sorted(collector!.delivered)).toEqual(sorted(sent));
        expect(await counted('ci_job_telemetry_outbox_dropped_spans_total', { status: '400' })).toBe(1);
        expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(1);
        // Named by its own span id, though it sat in a bundle keyed by another's.
        expect(said.mock.calls.map(([line]) => String(line))).toEqual([
          expect.stringContaining(`pipeline span ${span('undecodable').key} alone with 400 (cannot decode it: cannot decode span undecodable); dropped`),
        ]);
        // Bisected, not sent one span a request: a few requests per refusal, far fewer than the spans.
        expect(collector!.requests()).toBeLessThan(30);
      } finally {
        said.mockRestore();
      }
    });

    it('keeps what is left of a bundle when the collector stops answering in the middle of splitting it, and sends each span once', async () => {
      const sent = names(10);
      await outbox.enqueue(bundled(sent.map(span)), limits);
      // More than two spans are too large; the fifth request, the rest of a piece the fourth delivered half of, meets a collector gone wrong.
      script = (carried, request) => (request === 4 ? 503 : carried.length > 2 ? 413 : 'ok');
      await start();
      await until('the outbox to drain', async () => (await outbox.depth()).spans === 0);
      expect(sorted(collector!.delivered)).toEqual(sorted(sent));
      expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(0);
    });
  });
}
