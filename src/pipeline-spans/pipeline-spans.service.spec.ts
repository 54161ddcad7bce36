import { loadConfig } from '../config/app-config';
import { pipelineSpansServiceOn } from '../../test/helpers/pipeline-spans-service';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { MemoryTracedWorkStore } from '../traced-work/memory-traced-work-store';
import { Remembered, TracedJob, TracedPipeline } from '../traced-work/traced-work';
import { EnqueueOutcome, OutboxEntry, OutboxLimits } from '../outbox/outbox';
import { MemoryOutboxStore } from '../outbox/memory-outbox-store';
import { MetricsService } from '../observability/metrics.service';
import { PipelineSpansService } from './pipeline-spans.service';
import type { PipelineEvent } from './pipeline-events';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { OutboxDeliverer } from '../outbox/outbox-deliverer';
import { DEFAULT_OUTCOME_POLICY } from '../outcome-sampling/outcome-policy';
import { OutcomeSamplingMetrics } from '../outcome-sampling/outcome-sampling.metrics';
import { MemoryParkingStore } from '../outcome-sampling/parking/memory-parking-store';

/** The memory store, saying what it was asked to write, or failing as an outage does. */
class RecordingStore extends MemoryTracedWorkStore {
  readonly pipelineWrites: number[][] = [];
  readonly pipelineTtls: number[] = [];
  /** Span keys per enqueue, and how many outbox entries carried them. */
  readonly enqueued: string[][] = [];
  readonly enqueuedEntries: number[] = [];
  jobLookups = 0;
  failing = false;

  override async findTracedJob(jobId: number): Promise<TracedJob | null> {
    this.jobLookups += 1;
    if (this.failing) throw new StoreUnavailableError('connection refused');
    return super.findTracedJob(jobId);
  }

  override async recordTracedPipelines(pipelines: readonly Remembered<TracedPipeline>[]): Promise<void> {
    if (this.failing) throw new StoreUnavailableError('connection refused');
    this.pipelineWrites.push(pipelines.map((pipeline) => pipeline.value.pipelineId));
    this.pipelineTtls.push(...pipelines.map((pipeline) => pipeline.ttlMs));
    return super.recordTracedPipelines(pipelines);
  }

  readonly outbox = new RecordingOutbox(this);
}

/** The memory outbox, saying what it was asked to enqueue, failing with the store it belongs to. */
class RecordingOutbox extends MemoryOutboxStore {
  constructor(private readonly store: RecordingStore) {
    super();
  }

  override async enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome> {
    if (this.store.failing) throw new StoreUnavailableError('connection refused');
    this.store.enqueued.push(entries.flatMap((entry) => entry.members?.map((span) => span.key) ?? [entry.key]));
    this.store.enqueuedEntries.push(entries.length);
    return super.enqueue(entries, limits);
  }
}

const pickedUp = (jobId: number, overrides: Partial<TracedJob> = {}): TracedJob => ({
  jobId,
  pipelineId: 501,
  rootPipelineId: 500,
  projectId: 7,
  runnerId: 17,
  runnerType: 'project_type',
  traceId: 'a'.repeat(32),
  queuedAt: Date.now() - 12_000,
  pickedUpAt: Date.now(),
  ...overrides,
});

/** The service on `store` with no outcome sampling and a deliverer that waits to be asked: what the later describes need. */
const serviceOn = (store: RecordingStore, env: Record<string, string> = {}): PipelineSpansService =>
  pipelineSpansServiceOn(loadConfig(env), { store, outbox: store.outbox });

describe('PipelineSpansService at pickup (SPEC §10)', () => {
  let store: RecordingStore;
  let metrics: MetricsService;
  let service: PipelineSpansService;

  beforeEach(() => {
    store = new RecordingStore();
    metrics = new MetricsService();
    const config = loadConfig({});
    const deliverer = { kick: () => undefined } as unknown as OutboxDeliverer;
    // No pipeline here is traced provisionally (SPEC §11): outcome sampling is never asked.
    const outcomeSampling = {} as OutcomeSamplingService;
    service = pipelineSpansServiceOn(config, { store, outbox: store.outbox, deliverer, metrics, outcomeSampling });
  });
  afterEach(() => {
    store.close();
    store.outbox.close();
  });

  const grantEnd = () => Date.now() + 3_600_000;

  it("writes a linger's pickups together: their pipelines once, all their queue waits in one enqueue, as one outbox entry", async () => {
    for (let jobId = 1001; jobId <= 1005; jobId++) service.recordPickup(pickedUp(jobId), grantEnd(), jobId.toString(16).padStart(16, '0'));
    expect(store.enqueued).toEqual([]);
    await service.onModuleDestroy();
    expect(store.pipelineWrites).toEqual([[501, 500]]);
    expect(store.enqueued).toHaveLength(1);
    expect(store.enqueued[0]).toHaveLength(5);
    expect(new Set(store.enqueued[0]).size).toBe(5);
    expect(store.enqueuedEntries).toEqual([1]);
    // One entry, five spans: the outbox counts and delivers each.
    expect(await store.outbox.depth()).toMatchObject({ spans: 5 });
    const [bundle] = await store.outbox.claim(100, 60_000);
    const delivered = JSON.parse(`{"resourceSpans":[${bundle.body.toString()}]}`) as {
      resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ spanId: string }> }> }>;
    };
    expect(delivered.resourceSpans.map((resource) => resource.scopeSpans[0].spans[0].spanId).sort()).toEqual([...store.enqueued[0]].sort());
    expect(await store.findTracedPipeline(500)).toMatchObject({ pipelineId: 500, rootPipelineId: 500, traceId: 'a'.repeat(32) });
  });

  it('lets a pickup arriving while a full batch is written be answered before the whole batch is done, and still writes each queue wait once', async () => {
    // The hundredth pickup writes the batch at once; a request arriving then is work the event loop takes in its next turn.
    for (let jobId = 2001; jobId <= 2100; jobId++) service.recordPickup(pickedUp(jobId), grantEnd(), jobId.toString(16).padStart(16, '0'));
    const enqueuesWhenItRan: number[] = [];
    setImmediate(() => enqueuesWhenItRan.push(store.enqueued.length));
    await service.onModuleDestroy();
    expect(enqueuesWhenItRan).toEqual([0]);
    expect(store.enqueued).toHaveLength(1);
    expect(new Set(store.enqueued[0]).size).toBe(100);
    expect(await store.outbox.depth()).toMatchObject({ spans: 100 });
  });

  it('does not write again a pipeline it recorded lately, unless a job needs it kept longer', async () => {
    // Grants longer than the time a pipeline is remembered at least (6 h), so each job's own grant decides.
    const longGrantEnd = () => Date.now() + 8 * 3_600_000;
    service.recordPickup(pickedUp(1001), longGrantEnd(), '0000000000000001');
    await service.onModuleDestroy();
    service.recordPickup(pickedUp(1002), longGrantEnd() - 60_000, '0000000000000002');
    await service.onModuleDestroy();
    expect(store.pipelineWrites).toEqual([[501, 500]]);
    service.recordPickup(pickedUp(1003), longGrantEnd() + 600_000, '0000000000000003');
    await service.onModuleDestroy();
    expect(store.pipelineWrites).toEqual([
      [501, 500],
      [501, 500],
    ]);
    // Each pickup's queue wait is emitted whatever the pipelines needed.
    expect(store.enqueued.flat()).toHaveLength(3);
  });

  it("remembers a pipeline past its job's grant, as long as a pipeline is given to end, so its hooks still find it", async () => {
    // A job with a one-minute grant, in a pipeline whose untraced jobs or manual gate run for hours after it.
    service.recordPickup(pickedUp(1001), Date.now() + 60_000, '0000000000000001');
    await service.onModuleDestroy();
    expect(Math.min(...store.pipelineTtls)).toBeGreaterThanOrEqual(6 * 3600 * 1000);
  });

  it('finds a pickup still waiting in the batch when a webhook asks right after it', async () => {
    service.recordPickup(pickedUp(1001), grantEnd(), '0000000000000001');
    const outcome = await service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 500,
      projectId: 7,
      finishedJobs: [],
      activeJobIds: [],
      end: { status: 'success', createdAt: Date.now() - 60_000, finishedAt: Date.now() },
    });
    expect(outcome.queued).toBe(1);
  });

  it("finds a pipeline from its traced job when the hook reaches a replica before the pickup's replica wrote the pipeline", async () => {
    // The traced job is written with the grant at pickup; the pipeline's record still waits in another replica's batch.
    store.rememberTracedJob(pickedUp(1001), grantEnd());
    const outcome = await service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 501,
      projectId: 7,
      rootPipelineId: 500,
      finishedJobs: [{ jobId: 1001, pipelineId: 501, status: 'success', finishedAt: Date.now() - 1_000 }],
      activeJobIds: [],
      end: { status: 'success', createdAt: Date.now() - 60_000, finishedAt: Date.now() },
    });
    // Its pipeline span (hung on the root's) and its job's span.
    expect(outcome.queued).toBe(2);
    expect((await store.findTracedPipeline(501))?.traceId).toBe('a'.repeat(32));
  });

  it("tells of a child pipeline none of whose jobs was traced, in its traced root pipeline's trace", async () => {
    // The root's record, as its pickups wrote it; the child's jobs found the store away at pickup and were not traced.
    await store.recordTracedPipelines([{ value: { pipelineId: 500, rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32) }, ttlMs: 60_000 }]);
    const outcome = await service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 502,
      projectId: 7,
      rootPipelineId: 500,
      finishedJobs: [],
      activeJobIds: [],
      end: { status: 'failed', createdAt: Date.now() - 60_000, finishedAt: Date.now() },
    });
    expect(outcome.queued).toBe(1);
    expect((await store.findTracedPipeline(502))?.traceId).toBe('a'.repeat(32));
  });

  it('loses only these spans when the store is down: it counts and logs the failure, and throws nothing', async () => {
    store.failing = true;
    service.recordPickup(pickedUp(1001), grantEnd(), '0000000000000001');
    await expect(service.onModuleDestroy()).resolves.toBeUndefined();
    expect(await metrics.registry.getSingleMetricAsString('ci_job_telemetry_pipeline_spans_store_failures_total')).toContain(
      'ci_job_telemetry_pipeline_spans_store_failures_total{operation="record_pickup"} 1',
    );
    // A pipeline that was not written is not remembered as written: the next pickup writes it.
    store.failing = false;
    service.recordPickup(pickedUp(1002), grantEnd(), '0000000000000002');
    await service.onModuleDestroy();
    expect(store.pipelineWrites).toEqual([[501, 500]]);
  });

  describe("closing a job span from its runner's job_execution span (issue 29)", () => {
    // A traced job is written with its grant (the grant store does it); here straight into the store.
    const pickUp = (jobId: number) => {
      store.rememberTracedJob(pickedUp(jobId), grantEnd());
      service.recordPickup(pickedUp(jobId), grantEnd(), jobId.toString(16).padStart(16, '0'));
    };

    it('writes once per job: a job_execution sent again makes no store call, and another job still closes', async () => {
      pickUp(1001);
      pickUp(1002);
      await service.onModuleDestroy();
      const before = store.enqueued.length;
      const lookups = store.jobLookups;
      await Promise.all([service.closeJobFromRunner(1001, { endMs: Date.now() }), service.closeJobFromRunner(1001, { endMs: Date.now() })]);
      await service.closeJobFromRunner(1001, { endMs: Date.now(), status: 'failed' });
      expect(store.jobLookups).toBe(lookups + 1);
      expect(store.enqueued.length).toBe(before + 1);
      await service.closeJobFromRunner(1002, { endMs: Date.now() });
      expect(store.jobLookups).toBe(lookups + 2);
      expect(store.enqueued.length).toBe(before + 2);
    });

    it('tries again on the next job_execution when the store failed the first time', async () => {
      pickUp(1001);
      await service.onModuleDestroy();
      const before = store.enqueued.length;
      const lookups = store.jobLookups;
      store.failing = true;
      await service.closeJobFromRunner(1001, { endMs: Date.now() });
      store.failing = false;
      await service.closeJobFromRunner(1001, { endMs: Date.now() });
      expect(store.jobLookups).toBe(lookups + 2);
      expect(store.enqueued.length).toBe(before + 1);
    });
  });
});

describe('a failed attempt the decorator did not trace still tells its pipeline’s outcome (SPEC §11)', () => {
  // Its pickup found the store away (answered `degraded`); it failed, GitLab retried it, and the Pipeline Hook lists
  // only the retry's success: the failed attempt's Job Hook is the only word of the failure.
  const TRACE = 'c'.repeat(32);
  const ROOT = 700;
  const FAILED_ATTEMPT = 7001;
  let store: RecordingStore;
  let parking: MemoryParkingStore;
  let service: PipelineSpansService;

  beforeEach(() => {
    store = new RecordingStore();
    parking = new MemoryParkingStore();
    const config = loadConfig({ OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '300' });
    const deliverer = { register: () => undefined, kick: () => undefined } as unknown as OutboxDeliverer;
    const collector = { export: async () => ({ kind: 'accepted', status: 200 }) } as unknown as ConstructorParameters<typeof OutcomeSamplingService>[5];
    const metrics = new MetricsService();
    const outcomeSampling = new OutcomeSamplingService(
      config.outcomeSampling,
      config.outbox,
      config.webhooks,
      parking,
      store.outbox,
      collector,
      deliverer,
      new OutcomeSamplingMetrics(metrics),
    );
    service = pipelineSpansServiceOn(config, { store, outbox: store.outbox, deliverer, metrics, outcomeSampling });
  });
  afterEach(() => {
    store.close();
    store.outbox.close();
    parking.close();
  });

  const rootKnown = () =>
    store.recordTracedPipelines([
      { value: { pipelineId: ROOT, rootPipelineId: ROOT, projectId: 7, traceId: TRACE, outcomePolicy: DEFAULT_OUTCOME_POLICY }, ttlMs: 3_600_000 },
    ]);
  const attemptHook = (status: string) =>
    service.handleWebhook({ kind: 'job', jobId: FAILED_ATTEMPT, job: { jobId: FAILED_ATTEMPT, pipelineId: ROOT, status, finishedAt: Date.now() - 30_000 } });
  const rootSucceeded = () =>
    service.handleWebhook({
      kind: 'pipeline',
      pipelineId: ROOT,
      projectId: 7,
      finishedJobs: [{ jobId: FAILED_ATTEMPT + 1, pipelineId: ROOT, status: 'success', finishedAt: Date.now() - 1_000 }],
      activeJobIds: [],
      end: { status: 'success', createdAt: Date.now() - 120_000, finishedAt: Date.now() },
    });

  const attemptFailed = () => attemptHook('failed');
  it.each([
    ['before anything of its pipeline was recorded', [attemptFailed, rootKnown, rootSucceeded]],
    ['after its pipeline was recorded, before the end', [rootKnown, attemptFailed, rootSucceeded]],
    ["after the root's end", [rootKnown, rootSucceeded, attemptFailed]],
  ] as const)('keeps the pipeline when the Job Hook comes %s', async (_order, steps) => {
    for (const step of steps) await step();
    expect(await parking.findDecision(TRACE)).toEqual({ keep: true, reason: 'failed' });
  });

  it('leaves a pipeline whose untraced attempts succeeded to be dropped', async () => {
    await rootKnown();
    await attemptHook('success');
    await rootSucceeded();
    expect(await parking.findDecision(TRACE)).toBeNull();
    expect((await parking.readFacts(TRACE)).statuses).toEqual(['success']);
  });
});

describe('a pipeline that had finished runs again (SPEC §12 "final", issue 56 4b)', () => {
  let store: RecordingStore;
  let service: PipelineSpansService;
  const createdAt = Date.now() - 120_000;
  const firstEnd = Date.now() - 60_000;

  beforeEach(async () => {
    store = new RecordingStore();
    service = serviceOn(store);
    await store.recordTracedPipelines([{ value: { pipelineId: 500, rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32) }, ttlMs: 60_000 }]);
  });
  afterEach(() => {
    store.close();
    store.outbox.close();
  });

  const hook = (activeJobIds: number[], end?: { status: string; finishedAt: number }, finished = [1001]) =>
    service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 500,
      projectId: 7,
      finishedJobs: finished.map((jobId) => ({ jobId, pipelineId: 500, status: 'failed', finishedAt: firstEnd - 1_000 })),
      activeJobIds,
      ...(end === undefined ? {} : { end: { ...end, createdAt } }),
    });
  /** The pipeline span's versions in the outbox, by version: its status as readers take it. */
  const pipelineVersions = async () => {
    const claimed = await store.outbox.claim(100, 60_000);
    const versions = new Map<number, string>();
    for (const entry of claimed) {
      const span = (
        JSON.parse(entry.body.toString()) as {
          scopeSpans: Array<{ spans: Array<{ name: string; attributes: Array<{ key: string; value: Record<string, string> }> }> }>;
        }
      ).scopeSpans[0].spans[0];
      if (span.name !== 'pipeline') continue;
      const attribute = (key: string) => Object.values(span.attributes.find((kv) => kv.key === key)?.value ?? {})[0];
      versions.set(Number(attribute('ci.pipeline.span.version')), String(attribute('ci.pipeline.status')));
    }
    return [...versions].sort(([a], [b]) => a - b);
  };
  const statuses = async () => (await pipelineVersions()).map(([, status]) => status);

  it('draws a newer, running version at once when a retried job is pending, and the next end above it', async () => {
    await hook([], { status: 'failed', finishedAt: firstEnd });
    // GitLab retries the failed job: a new job id, pending.
    await hook([1002]);
    const [[, failed], [running, runningStatus]] = await pipelineVersions();
    expect([failed, runningStatus]).toEqual(['failed', 'running']);
    await hook([], { status: 'success', finishedAt: Date.now() }, [1002]);
    const [[again, status]] = await pipelineVersions();
    expect(status).toBe('success');
    expect(again).toBeGreaterThan(running);
  });

  it('reopens nothing for a running hook delivered late, whose jobs had all finished by the end', async () => {
    await hook([], { status: 'failed', finishedAt: firstEnd });
    await hook([1001]);
    expect(await statuses()).toEqual(['failed']);
  });

  it('reopens nothing for a pipeline that has not ended yet', async () => {
    await hook([1001], undefined, []);
    expect(await statuses()).toEqual([]);
  });
});

describe("one project's data on the memory store (SPEC §12 Trust, issue 56)", () => {
  const A = 7;
  const B = 8;
  let store: RecordingStore;
  let service: PipelineSpansService;

  beforeEach(async () => {
    store = new RecordingStore();
    service = serviceOn(store);
    // A's pipeline 500, traced from its own job's pickup.
    service.recordPickup(pickedUp(1001, { pipelineId: 500, rootPipelineId: 500, projectId: A }), Date.now() + 3_600_000, '0000000000000001');
    await service.onModuleDestroy();
  });
  afterEach(() => {
    store.close();
    store.outbox.close();
  });

  /**
   * GitLab's documented Pipeline Hook of a multi-project downstream pipeline (B's 700, triggered by A's job 5002 in
   * 500: `source_pipeline.project.id` is A's), as gitlab-webhook.ts parses it; test/e2e/one-project.e2e-spec.ts sends
   * the hook itself.
   */
  const downstreamHook = (): PipelineEvent => ({
    kind: 'pipeline',
    pipelineId: 700,
    projectId: B,
    source: { pipelineId: 500, jobId: 5002, projectId: A },
    finishedJobs: [{ jobId: 7001, pipelineId: 700, status: 'failed', failureReason: 'script_failure', name: 'deploy-b', finishedAt: Date.now() - 10_000 }],
    activeJobIds: [],
    end: {
      status: 'failed',
      failureReason: 'deploy-b: script_failure',
      createdAt: Date.now() - 60_000,
      finishedAt: Date.now() - 10_000,
      ref: 'master',
      url: 'http://gitlab.example.com/gitlab-org/project-8/-/pipelines/700',
      projectUrl: 'http://gitlab.example.com/gitlab-org/project-8',
      projectPath: 'gitlab-org/project-8',
    },
  });
  const emitted = async () =>
    (await store.outbox.claim(100, 60_000)).map((entry) => JSON.parse(entry.body.toString()) as { scopeSpans: Array<{ spans: Array<{ name: string }> }> });

  it("draws A's bridge, A's own, from B's hook, never B's pipeline, and never takes B's pipeline for A's", async () => {
    await store.outbox.claim(100, 60_000);
    await service.handleWebhook(downstreamHook());
    const spans = await emitted();
    expect(spans.map((resource) => resource.scopeSpans[0].spans[0].name)).toEqual(['bridge']);
    const text = JSON.stringify(spans);
    expect(text).toContain('"ci.downstream_project.id","value":{"stringValue":"8"}');
    for (const ofB of ['deploy-b', 'script_failure', 'project-8']) expect(text).not.toContain(ofB);
    expect(await store.findTracedPipeline(700)).toBeNull();
    expect((await store.findTracedPipeline(500))?.projectId).toBe(A);
  });

  it("keeps A's record when a pickup of B's job names A's pipeline as its root, on this process and after its memo", async () => {
    service.recordPickup(
      pickedUp(8001, { pipelineId: 800, rootPipelineId: 500, projectId: B, traceId: 'a'.repeat(32) }),
      Date.now() + 3_600_000,
      '0000000000000008',
    );
    await service.onModuleDestroy();
    // Another replica (no memo of A's record) does the same.
    const replica = serviceOn(store);
    replica.recordPickup(
      pickedUp(8002, { pipelineId: 800, rootPipelineId: 500, projectId: B, traceId: 'a'.repeat(32) }),
      Date.now() + 3_600_000,
      '0000000000000009',
    );
    await replica.onModuleDestroy();
    expect(await store.findTracedPipeline(500)).toMatchObject({ projectId: A });
    // A's end draws A's root, labelled A's.
    await store.outbox.claim(100, 60_000);
    await service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 500,
      projectId: A,
      finishedJobs: [],
      activeJobIds: [],
      end: { status: 'success', createdAt: Date.now() - 60_000, finishedAt: Date.now() },
    });
    const root = (await emitted()).find((resource) => resource.scopeSpans[0].spans[0].name === 'pipeline');
    expect(JSON.stringify(root)).toContain('"ci.project.id","value":{"intValue":"7"}');
  });
});

describe('the waits GitLab told, as the path written at the root pipeline’s end names them (SPEC §12, issue 56 5c)', () => {
  let store: RecordingStore;
  let service: PipelineSpansService;
  const createdAt = Date.now() - 600_000;
  const at = (seconds: number) => createdAt + seconds * 1000;

  beforeEach(async () => {
    store = new RecordingStore();
    service = serviceOn(store, { GITLAB_WEBHOOK_SECRET_FILE: '/unused' });
    await store.recordTracedPipelines([{ value: { pipelineId: 500, rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32) }, ttlMs: 60_000 }]);
    // build (0–60 s), then deploy: pending at 360 s, run by a runner at once, to 400 s.
    for (const [jobId, queuedAt] of [
      [1001, at(0)],
      [1002, at(360)],
    ])
      store.rememberTracedJob(pickedUp(jobId, { pipelineId: 500, rootPipelineId: 500, queuedAt, pickedUpAt: queuedAt }), Date.now() + 3_600_000);
  });
  afterEach(() => {
    store.close();
    store.outbox.close();
  });

  const builds = (deploy: { when?: string }) => [
    { jobId: 1001, pipelineId: 500, status: 'success', name: 'build', stage: 'build', startedAt: at(0), finishedAt: at(60) },
    { jobId: 1002, pipelineId: 500, status: 'success', name: 'deploy', stage: 'deploy', startedAt: at(360), finishedAt: at(400), ...deploy },
  ];
  const rootEnds = (deploy: { when?: string }) =>
    service.handleWebhook({
      kind: 'pipeline',
      pipelineId: 500,
      projectId: 7,
      finishedJobs: builds(deploy),
      activeJobIds: [],
      end: { status: 'success', createdAt, finishedAt: at(400) },
    });
  /** `ci.pipeline.critical_path.<part>_seconds` of the root pipeline span's latest version. */
  const writtenParts = async () => {
    const root = (await store.outbox.claim(100, 60_000))
      .map(
        (entry) =>
          JSON.parse(entry.body.toString()) as {
            scopeSpans: Array<{ spans: Array<{ name: string; attributes: Array<{ key: string; value: Record<string, unknown> }> }> }>;
          },
      )
      .map((resource) => resource.scopeSpans[0].spans[0])
      .filter((span) => span.name === 'pipeline')
      .at(-1)!;
    const parts: Record<string, number> = {};
    for (const { key, value } of root.attributes) {
      const part = /^ci\.pipeline\.critical_path\.(.+)_seconds$/.exec(key)?.[1];
      if (part !== undefined) parts[part] = Number(Object.values(value)[0]);
    }
    return parts;
  };

  it('names the wait before a `when: delayed` job a delayed wait, as the Pipeline Hook’s builds say (its Job Hook does not)', async () => {
    // GitLab's Job Hook of deploy comes first, with its times to the millisecond and no `when`.
    const [, deploy] = builds({});
    await service.handleWebhook({ kind: 'job', jobId: 1002, job: deploy });
    await rootEnds({ when: 'delayed' });
    expect(await writtenParts()).toMatchObject({ delay: 0, delayed_wait: 300 });
  });

  it('names the wait before a job GitLab said was waiting_for_resource a resource wait, remembered until the root’s end', async () => {
    await service.handleWebhook({ kind: 'job', jobId: 1002, status: 'waiting_for_resource' });
    await rootEnds({});
    expect(await writtenParts()).toMatchObject({ delay: 0, resource_wait: 300 });
  });

  it('leaves GitLab’s own delay as such when no hook said why the job waited', async () => {
    await rootEnds({});
    expect(await writtenParts()).toMatchObject({ delay: 300 });
  });
});
