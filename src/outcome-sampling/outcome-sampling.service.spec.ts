import { wholeBody } from '../otlp/otlp-wire';
import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { loadConfig } from '../config/app-config';
import { MetricsService } from '../observability/metrics.service';
import { MemoryOutboxStore } from '../outbox/memory-outbox-store';
import { ClaimedEntry, OutboxEntryKind } from '../outbox/outbox';
import type { OutboxDeliverer } from '../outbox/outbox-deliverer';
import { DEFAULT_OUTCOME_POLICY } from './outcome-policy';
import { OutcomeSamplingMetrics } from './outcome-sampling.metrics';
import { OutcomeSamplingService, PipelineHookFacts } from './outcome-sampling.service';
import { MemoryParkingStore } from './parking/memory-parking-store';

/*
 * Outcome sampling's steps against the memory stores and a collector that says what it was sent (SPEC §11), in the
 * orders and faults of issue 35: each case is one of the ways a failed pipeline was lost, sent twice, or a drop
 * reversed.
 */

const TRACE = 'd'.repeat(32);
const ROOT = 900;
const pipeline = { traceId: TRACE, rootPipelineId: ROOT, outcomePolicy: DEFAULT_OUTCOME_POLICY };
const T0 = Date.parse('2026-11-27T10:00:00Z');
const rootHook = (status: string | undefined, jobs: Array<{ jobId: number; status: string }> = [], active: number[] = []): PipelineHookFacts => ({
  pipelineId: ROOT,
  rootPipelineId: ROOT,
  ...(status === undefined ? {} : { end: { status, createdAt: T0, finishedAt: T0 + 60_000 } }),
  finishedJobs: jobs,
  activeJobIds: active,
});
const childHook = (pipelineId: number, status: string | undefined): PipelineHookFacts => ({
  pipelineId,
  rootPipelineId: ROOT,
  ...(status === undefined ? {} : { end: { status, createdAt: T0, finishedAt: T0 + 90_000 } }),
  finishedJobs: [],
  activeJobIds: [],
});
/** A protobuf export body: `n` empty ResourceSpans, distinct by their count. */
const exportOf = (n: number) => Buffer.concat(Array.from({ length: n }, () => Buffer.from([0x0a, 0x00])));

class World {
  readonly parking = new MemoryParkingStore();
  readonly outbox = new MemoryOutboxStore();
  readonly sent: Array<{ encoding: string; body: Buffer }> = [];
  readonly metrics = new MetricsService();
  collectorUp = true;
  private kind: OutboxEntryKind | undefined;
  readonly service: OutcomeSamplingService;

  constructor(env: Record<string, string> = {}) {
    const config = loadConfig({ OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '0', ...env });
    const collector: Pick<CollectorClient, 'export'> = {
      export: async (_signal, encoding, body): Promise<ExportResult> => {
        if (!this.collectorUp) return { kind: 'retry', happened: 'unreachable' } as ExportResult;
        this.sent.push({ encoding, body: wholeBody(body) });
        return { kind: 'accepted', status: 200, partialSuccess: undefined };
      },
    };
    const deliverer = { register: (kind: OutboxEntryKind) => (this.kind = kind), kick: () => undefined } as unknown as OutboxDeliverer;
    this.service = new OutcomeSamplingService(
      config.outcomeSampling,
      config.outbox,
      config.webhooks,
      this.parking,
      this.outbox,
      collector,
      deliverer,
      new OutcomeSamplingMetrics(this.metrics),
    );
  }

  /** What the outbox's deliverer does, round after round, until nothing is due: the parked pointer's rounds and the spans. */
  async deliverAll(): Promise<number> {
    let rounds = 0;
    for (;;) {
      const claimed: ClaimedEntry[] = await this.outbox.claim(500, 60_000);
      if (claimed.length === 0) return rounds;
      rounds++;
      for (const entry of claimed) {
        if (entry.key.startsWith('parked:')) {
          const { result, more } = await this.kind!.deliver(entry, Infinity);
          if (result === 'deadline' || result.kind !== 'accepted') await this.outbox.retry([entry.key], 0);
          else if (more) await this.outbox.putBack([entry.key]);
          else await this.outbox.acknowledge([entry.key]);
        } else if (this.collectorUp) {
          this.sent.push({ encoding: 'json', body: Buffer.from(entry.body) });
          await this.outbox.acknowledge([entry.key]);
        } else await this.outbox.retry([entry.key], 0);
      }
      if (!this.collectorUp) return rounds;
    }
  }

  /** The sweep's round, as if its time had come. */
  async sweep(): Promise<void> {
    for (const traceId of await this.parking.claimOverdue(100, 30_000))
      await (this.service as unknown as { sweepOne(id: string): Promise<void> }).sweepOne(traceId);
  }

  sentControlPlaneKeys(): string[] {
    return this.sent.filter((sent) => sent.encoding === 'json').map((sent) => JSON.parse(sent.body.toString()).scopeSpans?.[0]?.spans?.[0]?.spanId ?? '');
  }

  close(): void {
    this.parking.close();
    this.outbox.close();
  }
}

const spanText = (spanId: string) =>
  JSON.stringify({ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 't' }, spans: [{ spanId, traceId: TRACE }] }] });

describe('outcome sampling in the orders and faults GitLab and operators meet (issue 35)', () => {
  let world: World;
  afterEach(() => world.close());

  it('delivers a failed pipeline kept while the outbox is full, and gives its whole budget back (1)', async () => {
    world = new World({ OUTBOX_MAX_SPANS: '1' });
    await world.outbox.enqueue([{ key: '00ff', body: spanText('00ff'), enqueuedAt: 0 }], { maxSpans: 1, rememberMs: 60_000 });
    expect(await world.service.parkExport(TRACE, 'protobuf', exportOf(3), 3)).toEqual({ kind: 'parked' });
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
    expect((await world.outbox.depth()).spans).toBe(2);
    await world.deliverAll();
    expect(world.sent.some((sent) => sent.encoding === 'protobuf' && sent.body.length === 6)).toBe(true);
    expect(await world.parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
  });

  it('counts and says a kept pipeline whose parked spans expired while the collector was away, never as delivered (1)', async () => {
    jest.useFakeTimers({ now: T0, doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    try {
      world = new World();
      await world.service.parkExport(TRACE, 'protobuf', exportOf(3), 3);
      world.collectorUp = false;
      await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
      await world.deliverAll();
      // The collector comes back after the parked spans' hold (6 h) and the decision's memory (3 days) have passed.
      jest.setSystemTime(T0 + (6 * 3600 + 3 * 24 * 3600) * 1000 + 1);
      world.collectorUp = true;
      await world.deliverAll();
      expect(world.sent.filter((sent) => sent.encoding === 'protobuf')).toEqual([]);
      const metric = async (name: string) => (await world.metrics.registry.getSingleMetric(name)!.get()).values;
      expect((await metric('ci_job_telemetry_outcome_expired_pipelines_total'))[0].value).toBe(1);
      const delays = (await metric('ci_job_telemetry_outcome_decision_delay_seconds')) as Array<{ metricName?: string; value: number }>;
      expect(delays.find((value) => value.metricName?.endsWith('_count'))?.value).toBe(0);
      expect(await world.outbox.depth()).toEqual({ spans: 0 });
    } finally {
      jest.useRealTimers();
    }
  });

  it('keeps a pipeline whose child fails after its root succeeded (3)', async () => {
    world = new World({ OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '300' });
    await world.service.parkExport(TRACE, 'protobuf', exportOf(2), 2);
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: childHook(901, undefined) });
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('success') });
    expect(await world.parking.findDecision(TRACE)).toBeNull();
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: childHook(901, 'failed') });
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: true, reason: 'failed' });
    await world.deliverAll();
    expect(world.sent.filter((sent) => sent.encoding === 'protobuf')).toHaveLength(1);
  });

  it("forwards a kept pipeline's late export though the total budget is full, and parks its control-plane spans over a bound (4)", async () => {
    world = new World({ OUTCOME_SAMPLING_MAX_TOTAL_BYTES: '1024', OUTCOME_SAMPLING_MAX_PIPELINE_SPANS: '2' });
    await world.service.parkExport(TRACE, 'protobuf', exportOf(2), 2);
    // Over the pipeline's span bound: the control plane's own spans still park.
    expect(await world.service.offer(TRACE, [{ key: '0aa1', body: spanText('0aa1') }])).toEqual({ kind: 'parked' });
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
    await world.service.parkExport('e'.repeat(32), 'protobuf', exportOf(500), 500);
    expect(await world.service.parkExport(TRACE, 'protobuf', exportOf(400), 400)).toEqual({ kind: 'forward', reason: 'failed' });
  });

  it('never turns a drop into a keep: not by a late export and the sweep, nor by an old running hook replayed (5)', async () => {
    world = new World();
    await world.service.parkExport(TRACE, 'protobuf', exportOf(2), 2);
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('success', [{ jobId: 1, status: 'success' }]) });
    await world.sweep();
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: false, reason: 'outcome' });
    expect(await world.service.parkExport(TRACE, 'protobuf', exportOf(3), 3)).toEqual({ kind: 'dropped' });
    await world.parking.schedule(TRACE, 0);
    await world.sweep();
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: false, reason: 'outcome' });
    // The running hook from before the end, delivered late: job 1 was running then, and had finished at the end.
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook(undefined, [], [1]) });
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: false, reason: 'outcome' });
    // A retry: a job the end did not know.
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook(undefined, [{ jobId: 1, status: 'success' }], [2]) });
    expect(await world.parking.findDecision(TRACE)).toBeNull();
    expect(world.sent).toEqual([]);
  });

  it("keeps a pipeline whose long queue wait is noted after its root's end: a pickup batch recorded late, the hooks on another replica", async () => {
    world = new World({ OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '300' });
    const outcomePolicy = { ...DEFAULT_OUTCOME_POLICY, queuedLongerThanSeconds: 300 };
    await world.service.parkExport(TRACE, 'protobuf', exportOf(2), 2);
    // The job ran and GitLab's hooks came before the batch holding its pickup was recorded: nothing keeps it yet.
    await world.service.note({ kind: 'pipeline_hook', pipeline: { ...pipeline, outcomePolicy }, hook: rootHook('success', [{ jobId: 1, status: 'success' }]) });
    expect(await world.parking.findDecision(TRACE)).toBeNull();
    await world.service.note({ kind: 'pickups', jobs: [{ traceId: TRACE, queuedAt: T0, pickedUpAt: T0 + 360_000, outcomePolicy }] });
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: true, reason: 'queued' });
    await world.deliverAll();
    expect(world.sent.filter((sent) => sent.encoding === 'protobuf')).toHaveLength(1);
  });

  it("delivers a kept pipeline's job span once when its Job Hook comes after the Pipeline Hook (7)", async () => {
    world = new World();
    await world.service.offer(TRACE, [{ key: '0bb1', body: spanText('0bb1') }]);
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
    // The same job span again, from the Job Hook that GitLab sent after: decided kept, so it goes to the outbox.
    const late = await world.service.offer(TRACE, [{ key: '0bb1', body: spanText('0bb1') }]);
    expect(late).toMatchObject({ kind: 'forward', spans: [{ key: '0bb1' }] });
    const outcome = await world.outbox.enqueue([{ key: '0bb1', body: spanText('0bb1'), enqueuedAt: 0 }], { maxSpans: 100, rememberMs: 60_000 });
    expect(outcome.duplicates).toBe(1);
    await world.deliverAll();
    expect(world.sentControlPlaneKeys().filter((key) => key === '0bb1')).toHaveLength(1);
  });

  it('delivers a large kept pipeline one bounded request a round, so no round outlives its lease (8, 9)', async () => {
    world = new World();
    // 12 exports of 1 MiB: three requests of at most 4 MiB.
    for (let i = 0; i < 12; i++) await world.service.parkExport(TRACE, 'protobuf', exportOf(512 * 1024 + i), 1);
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
    const rounds = await world.deliverAll();
    const requests = world.sent.filter((sent) => sent.encoding === 'protobuf');
    expect(requests.length).toBeGreaterThanOrEqual(3);
    expect(Math.max(...requests.map((sent) => sent.body.length))).toBeLessThanOrEqual(4 * 1024 * 1024);
    expect(rounds).toBeGreaterThanOrEqual(requests.length);
    expect(await world.parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
  });

  it('drops a pipeline without reading what it parked (9)', async () => {
    world = new World();
    for (let i = 1; i <= 3; i++) await world.service.parkExport(TRACE, 'protobuf', exportOf(i), i);
    let read = 0;
    const parkedEntries = world.parking.parkedEntries.bind(world.parking);
    world.parking.parkedEntries = async (...args) => {
      read++;
      return parkedEntries(...args);
    };
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('success') });
    await world.sweep();
    expect(await world.parking.findDecision(TRACE)).toEqual({ keep: false, reason: 'outcome' });
    expect(read).toBe(0);
    expect(await world.parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
  });

  it('keeps a collector outage from losing a kept pipeline: retried until the collector is back (1)', async () => {
    world = new World();
    await world.service.parkExport(TRACE, 'protobuf', exportOf(4), 4);
    await world.service.note({ kind: 'pipeline_hook', pipeline, hook: rootHook('failed') });
    world.collectorUp = false;
    await world.deliverAll();
    expect(world.sent).toEqual([]);
    expect((await world.parking.usage()).bytes).toBe(8);
    world.collectorUp = true;
    await world.deliverAll();
    expect(world.sent.filter((sent) => sent.encoding === 'protobuf')).toHaveLength(1);
    expect(await world.parking.usage()).toEqual({ traces: 0, spans: 0, bytes: 0 });
  });
});
