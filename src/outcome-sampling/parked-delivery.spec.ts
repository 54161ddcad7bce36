import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { HttpCollectorClient } from '../collector/http-collector-client';
import { loadConfig } from '../config/app-config';
import { MetricsService } from '../observability/metrics.service';
import { exportRequestType } from '../otlp/otlp-proto';
import { MemoryOutboxStore } from '../outbox/memory-outbox-store';
import { OutboxDeliverer } from '../outbox/outbox-deliverer';
import { OutboxMetrics } from '../outbox/outbox.metrics';
import { CollectorScript, ScriptedCollector, startScriptedCollector } from '../../test/helpers/scripted-collector';
import { DEFAULT_OUTCOME_POLICY } from './outcome-policy';
import { OutcomeSamplingMetrics } from './outcome-sampling.metrics';
import { OutcomeSamplingService } from './outcome-sampling.service';
import { MemoryParkingStore } from './parking/memory-parking-store';
import { MAX_DELIVERY_BYTES, nextPage, parkedSpansAsEntries, sendPage } from './parked-delivery';
import { ParkedEntry, parkedEntryId, ParkedKind } from './parking/parking';
import { counted as countedIn } from '../../test/helpers/metrics';

const entry = (digest: string, kind: ParkedKind, bytes: number, body = Buffer.alloc(bytes, 0x0a)): ParkedEntry => ({
  ...parkedEntryId(digest, kind, 1, bytes),
  body,
});

describe('a kept trace delivered a page at a time (SPEC §11)', () => {
  it('moves the control-plane spans first, then joins protobuf exports up to the request bound, then JSON one by one', () => {
    const ids = [entry('a', 'protobuf', 3 * 1024 * 1024), entry('b', 'json', 10), entry('c', 'protobuf', 2 * 1024 * 1024), entry('d', 'spans', 50)];
    expect(nextPage(ids).map((id) => id.id)).toEqual([ids[3].id]);
    const withoutSpans = ids.filter((id) => id.kind !== 'spans');
    const page = nextPage(withoutSpans);
    expect(page.map((id) => id.id)).toEqual([ids[0].id]);
    expect(page.reduce((sum, id) => sum + id.bytes, 0)).toBeLessThanOrEqual(MAX_DELIVERY_BYTES);
    expect(nextPage([ids[1]]).map((id) => id.id)).toEqual([ids[1].id]);
  });

  it("keeps each control-plane span once, a pipeline span's older version before its newer", () => {
    const lines = (text: string) => entry(text.slice(0, 4), 'spans', text.length, Buffer.from(text));
    const parked = [lines(`00aa@200 {"v":2}\n00bb {"job":1}`), lines(`00aa@100 {"v":1}\n00bb {"job":1}`)];
    expect(parkedSpansAsEntries(parked, 'failed', 1).map((span) => span.key)).toEqual(['00aa@100', '00aa@200', '00bb']);
  });

  it('bisects a joined page the collector refuses whole, so one bad export costs only itself', async () => {
    // Empty ResourceSpans (field 1, length 0): one, two, three of them.
    const empties = (n: number) => Buffer.concat(Array.from({ length: n }, () => Buffer.from([0x0a, 0x00])));
    const good = [entry('g1', 'protobuf', 2, empties(1)), entry('g2', 'protobuf', 4, empties(2))];
    const bad = entry('b1', 'protobuf', 6, empties(3));
    const sent: number[] = [];
    const collector: Pick<CollectorClient, 'export'> = {
      async export(_signal, _encoding, body): Promise<ExportResult> {
        sent.push(body.length);
        // As the Collector does: a body holding the export it cannot decode (here: the one of three) is refused whole.
        return body.length === 2 || body.length === 4
          ? { kind: 'accepted', status: 200, partialSuccess: undefined }
          : { kind: 'bad_data', status: 400, contentType: undefined, body: Buffer.alloc(0) };
      },
    };
    const result = await sendPage(collector, 'protobuf', [good[0], bad, good[1]], 'failed');
    expect(result.keptBy).toBeUndefined();
    expect(result.done.map((done) => done.id).sort()).toEqual([good[0].id, bad.id, good[1].id].sort());
    expect(result.dropped.map((dropped) => [dropped.part, dropped.status])).toEqual([[1, 400]]);
    // The joined request, then halves: [g1, b1] refused, g1 alone taken, b1 alone refused, g2 alone taken.
    expect(sent).toEqual([12, 8, 2, 6, 4]);
  });
});

/**
 * A kept pipeline's parked spans delivered through the real deliverer and HTTP collector client to a collector that
 * refuses (issue 56 item 7, SPEC §11: an acknowledged span is never lost): nothing leaves parking before a 2xx.
 */
describe('a kept pipeline delivered to a collector that refuses', () => {
  const TRACE = 'e'.repeat(32);
  const ROOT = 900;
  const TraceRequest = exportRequestType('traces');
  /** A runner's export of these spans, in protobuf as the gateway parked it. */
  const runnerExport = (names: string[]) =>
    Buffer.from(
      TraceRequest.encode(
        TraceRequest.fromObject({
          resourceSpans: [
            {
              resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
              scopeSpans: [{ scope: { name: 'runner' }, spans: names.map((name) => ({ traceId: Buffer.from(TRACE, 'hex'), spanId: randomBytes(8), name })) }],
            },
          ],
        }),
      ).finish(),
    );
  /** A control-plane span as pipeline spans park it. */
  const controlPlaneSpan = (name: string) => ({
    key: randomBytes(8).toString('hex'),
    body: JSON.stringify({
      resource: { attributes: [] },
      scopeSpans: [{ scope: { name: 'ci-job-telemetry/pipeline-spans' }, spans: [{ traceId: TRACE, spanId: randomBytes(8).toString('hex'), name }] }],
    }),
  });

  let parking: MemoryParkingStore;
  let outbox: MemoryOutboxStore;
  let metrics: MetricsService;
  let collector: ScriptedCollector;
  let client: HttpCollectorClient;
  let deliverer: OutboxDeliverer;
  let script: CollectorScript;

  /** Parks a provisional pipeline's exports and control-plane spans, then GitLab says it failed: it is kept. */
  const keepFailedPipeline = async (exports: string[][], controlPlane: string[], timeoutMs = 2000) => {
    const config = loadConfig({ OTLP_UPSTREAM_TIMEOUT_MS: String(timeoutMs), OUTBOX_MAX_BACKOFF_SECONDS: '1', OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '0' });
    client = new HttpCollectorClient(collector.url, {}, timeoutMs);
    deliverer = new OutboxDeliverer(config.outbox, config.collector, outbox, client, new OutboxMetrics(metrics));
    const service = new OutcomeSamplingService(
      config.outcomeSampling,
      config.outbox,
      config.webhooks,
      parking,
      outbox,
      client,
      deliverer,
      new OutcomeSamplingMetrics(metrics),
    );
    for (const names of exports) expect(await service.parkExport(TRACE, 'protobuf', runnerExport(names), names.length)).toEqual({ kind: 'parked' });
    expect(await service.offer(TRACE, controlPlane.map(controlPlaneSpan))).toEqual({ kind: 'parked' });
    deliverer.onApplicationBootstrap();
    const end = { status: 'failed', createdAt: Date.now() - 60_000, finishedAt: Date.now() };
    await service.note({
      kind: 'pipeline_hook',
      pipeline: { traceId: TRACE, rootPipelineId: ROOT, outcomePolicy: DEFAULT_OUTCOME_POLICY },
      hook: { pipelineId: ROOT, rootPipelineId: ROOT, end, finishedJobs: [], activeJobIds: [] },
    });
  };
  const until = async (description: string, what: () => Promise<boolean>) => {
    for (let waited = 0; !(await what()); waited += 50) {
      if (waited > 15_000) throw new Error(`not within 15 s: ${description}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const delivered = async () => (await parking.usage()).traces === 0 && (await outbox.depth()).spans === 0;
  const counted = (name: string, labels: Record<string, string> = {}) => countedIn(metrics.registry, name, labels);
  const sorted = (list: readonly string[]) => [...list].sort();

  beforeEach(async () => {
    parking = new MemoryParkingStore();
    outbox = new MemoryOutboxStore();
    metrics = new MetricsService();
    script = () => 'ok';
    collector = await startScriptedCollector((names, request, spans) => script(names, request, spans));
  });
  afterEach(async () => {
    await deliverer?.onModuleDestroy();
    await client?.close();
    await collector.stop();
    parking.close();
    outbox.close();
  });

  const exports = [
    ['build-1', 'build-2', 'build-3'],
    ['test-1', 'test-2'],
    ['deploy-1', 'deploy-2', 'deploy-3', 'deploy-4'],
  ];
  const everySpan = [...exports.flat(), 'pipeline', 'job build', 'job test'];

  it.each([500, 401, 403, 404, 'timeout'] as const)(
    'keeps it parked while the collector answers %s, readiness degraded meanwhile, and delivers every span exactly once when it recovers',
    async (failure) => {
      script = () => (failure === 'timeout' ? 'hang' : failure);
      await keepFailedPipeline(exports, ['pipeline', 'job build', 'job test'], failure === 'timeout' ? 300 : 2000);
      await until('failed deliveries of the parked exports', async () => (await counted('ci_job_telemetry_outbox_delivery_failures_total')) >= 3);
      expect(collector.delivered).toEqual([]);
      // Still parked, every export of it; readiness says the delivery is failing.
      expect((await parking.usage()).spans).toBe(9);
      expect(deliverer.deliveryFailing).toBe(true);
      expect(await counted('ci_job_telemetry_outbox_delivery_failures_total', { reason: String(failure) })).toBeGreaterThanOrEqual(3);

      script = () => 'ok';
      await until('the kept pipeline to be delivered', delivered);
      expect(sorted(collector.delivered)).toEqual(sorted(everySpan));
      expect(deliverer.deliveryFailing).toBe(false);
      expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(0);
    },
  );

  it('splits the exports the collector finds too large (413) and delivers every span once', async () => {
    // This collector takes at most 2 spans a request: every export of 3 or 4 is cut.
    script = (names) => (names.length > 2 ? 413 : 'ok');
    await keepFailedPipeline(exports, ['pipeline', 'job build', 'job test']);
    await until('the kept pipeline to be delivered', delivered);
    expect(sorted(collector.delivered)).toEqual(sorted(everySpan));
    expect(await counted('ci_job_telemetry_outbox_dropped_spans_total')).toBe(0);
  });

  it('delivers every other span of an export holding one the collector cannot decode (400), and drops only that one, counted', async () => {
    script = (names) => (names.includes('undecodable') ? 400 : 'ok');
    const withBad = [exports[0], ['test-1', 'undecodable', 'test-2'], exports[2]];
    const said = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      await keepFailedPipeline(withBad, ['pipeline']);
      await until('the kept pipeline to be delivered', delivered);
      expect(sorted(collector.delivered)).toEqual(sorted([...exports.flat(), 'pipeline']));
      expect(await counted('ci_job_telemetry_outbox_dropped_spans_total', { status: '400' })).toBe(1);
      expect(said.mock.calls.map(([line]) => String(line))).toEqual([
        expect.stringContaining(`a piece of parked:${TRACE} alone with 400 (cannot decode it: cannot decode span undecodable)`),
      ]);
    } finally {
      said.mockRestore();
    }
  });
});
