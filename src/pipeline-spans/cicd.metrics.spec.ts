import fc from 'fast-check';
import type { Registry } from 'prom-client';
import { loadConfig } from '../config/app-config';
import { pipelineSpansServiceOn } from '../../test/helpers/pipeline-spans-service';
import { counted } from '../../test/helpers/metrics';
import { MetricsService } from '../observability/metrics.service';
import { MemoryOutboxStore } from '../outbox/memory-outbox-store';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { MemoryTracedWorkStore } from '../traced-work/memory-traced-work-store';
import { TracedJob } from '../traced-work/traced-work';
import type { FinishedJob, PipelineEvent } from './pipeline-events';
import { PipelineSpansService } from './pipeline-spans.service';

/**
 * SPEC §14: the OpenTelemetry CI/CD metrics as an operator reads them on /metrics, from Pipeline Hooks as GitLab
 * sends them: twice, late, out of order. (The same records reach the OTLP exporter: test/e2e/cicd-metrics.e2e-spec.ts.)
 */

const CREATED = Date.UTC(2026, 11, 7, 12, 0, 0);
const s = (seconds: number) => CREATED + seconds * 1000;

/** A job of the pipeline as its Pipeline Hook lists it once finished: created at 0, pending at `pendingAt`, started at `startedAt`. */
const job = (
  jobId: number,
  pipelineId: number,
  at: { pendingAt: number; startedAt: number; finishedAt: number },
  outcome: Partial<FinishedJob> = {},
): FinishedJob => ({
  jobId,
  pipelineId,
  status: 'success',
  startedAt: s(at.startedAt),
  finishedAt: s(at.finishedAt),
  queuedDuration: at.startedAt - at.pendingAt,
  ...outcome,
});

function hook(
  pipelineId: number,
  status: string,
  jobs: { finished?: FinishedJob[]; active?: number[] } = {},
  more: Partial<PipelineEvent> = {},
): PipelineEvent {
  const finishedJobs = jobs.finished ?? [];
  const finished = ['success', 'failed', 'canceled', 'skipped'].includes(status);
  return {
    kind: 'pipeline',
    pipelineId,
    projectId: 7,
    projectPath: 'group/app',
    status,
    createdAt: CREATED,
    finishedJobs,
    activeJobIds: jobs.active ?? [],
    ...(finished ? { end: { status, createdAt: CREATED, finishedAt: Math.max(...finishedJobs.map((done) => done.finishedAt)) } } : {}),
    ...more,
  };
}

interface Histogram {
  readonly count: number;
  readonly sum: number;
}

async function histogram(registry: Registry, name: string, labels: Record<string, string>): Promise<Histogram> {
  const values = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  const of = (suffix: string) =>
    values
      .filter(
        (value) =>
          (value as { metricName?: string }).metricName === `${name}${suffix}` &&
          Object.entries(labels).every(([label, wanted]) => String(value.labels[label]) === wanted),
      )
      .reduce((sum, value) => sum + value.value, 0);
  return { count: of('_count'), sum: of('_sum') };
}

describe('CI/CD metrics from the control plane (SPEC §14)', () => {
  let store: MemoryTracedWorkStore;
  let outbox: MemoryOutboxStore;
  let metrics: MetricsService;
  let service: PipelineSpansService;

  function start(env: Record<string, string> = {}): void {
    store = new MemoryTracedWorkStore();
    outbox = new MemoryOutboxStore();
    metrics = new MetricsService();
    service = pipelineSpansServiceOn(loadConfig(env), { store, outbox, metrics });
  }

  beforeEach(() => start());
  afterEach(() => {
    store.close();
    outbox.close();
  });

  /** The decorator enabled a job of `pipelineId` (a root pipeline): its pipeline is traced. */
  async function traced(pipelineId: number, projectId = 7): Promise<void> {
    const picked: TracedJob = {
      jobId: pipelineId * 10,
      pipelineId,
      rootPipelineId: pipelineId,
      projectId,
      runnerId: 17,
      runnerType: 'project_type',
      traceId: pipelineId.toString(16).padStart(32, 'a'),
      queuedAt: Date.now() - 1_000,
      pickedUpAt: Date.now(),
    };
    service.recordPickup(picked, Date.now() + 3_600_000, (pipelineId * 10).toString(16).padStart(16, '0'));
    await service.onModuleDestroy();
  }

  const active = (state: string, name = 'group/app') =>
    counted(metrics.registry, 'cicd_pipeline_run_active', { cicd_pipeline_name: name, cicd_pipeline_run_state: state });
  const duration = (labels: Record<string, string>) =>
    histogram(metrics.registry, 'cicd_pipeline_run_duration_seconds', { cicd_pipeline_name: 'group/app', ...labels });

  it('counts a run active as pending, then executing, and records its time in each state once it ends, with its result on the last', async () => {
    await traced(500);
    const build = job(5001, 500, { pendingAt: 20, startedAt: 30, finishedAt: 90 });
    const deploy = job(5002, 500, { pendingAt: 90, startedAt: 95, finishedAt: 130 });

    await service.handleWebhook(hook(500, 'pending', { active: [5001, 5002] }));
    expect(await active('pending')).toBe(1);
    await service.handleWebhook(hook(500, 'running', { active: [5001, 5002] }));
    expect([await active('pending'), await active('executing')]).toEqual([0, 1]);
    await service.handleWebhook(hook(500, 'success', { finished: [build, deploy] }));
    expect([await active('pending'), await active('executing')]).toEqual([0, 0]);

    // Pending from its creation to its first job's start; executing from there to its end; the result set in the last.
    expect(await duration({ cicd_pipeline_run_state: 'pending' })).toEqual({ count: 1, sum: 30 });
    expect(await duration({ cicd_pipeline_run_state: 'executing', cicd_pipeline_result: 'success' })).toEqual({ count: 1, sum: 100 });
    expect((await metrics.registry.getSingleMetric('cicd_pipeline_run_duration_seconds')!.get()).values.some((value) => 'error_type' in value.labels)).toBe(
      false,
    );
    // This project's extension: the pending time split into GitLab's delay and the first job's queue wait.
    const pendingPart = (part: string) => histogram(metrics.registry, 'ci_pipeline_run_pending_duration_seconds', { ci_pipeline_run_pending_part: part });
    expect(await pendingPart('gitlab_delay')).toEqual({ count: 1, sum: 20 });
    expect(await pendingPart('queue_wait')).toEqual({ count: 1, sum: 10 });
  });

  it('records nothing more for hooks delivered twice, late or out of order, and never counts a run below 0 or after its end', async () => {
    await traced(500);
    const finished = [job(5001, 500, { pendingAt: 5, startedAt: 10, finishedAt: 70 })];
    await service.handleWebhook(hook(500, 'running', { active: [5001] }));
    await service.handleWebhook(hook(500, 'running', { active: [5001] }));
    // A pending hook delivered after the running one does not send the run back.
    await service.handleWebhook(hook(500, 'pending', { active: [5001] }));
    expect([await active('pending'), await active('executing')]).toEqual([0, 1]);

    await service.handleWebhook(hook(500, 'success', { finished }));
    await service.handleWebhook(hook(500, 'success', { finished }));
    // Older hooks delivered after the end: the run stays ended.
    await service.handleWebhook(hook(500, 'running', { active: [5001] }));
    await service.handleWebhook(hook(500, 'pending', { active: [5001] }));

    expect([await active('pending'), await active('executing')]).toEqual([0, 0]);
    expect(await duration({ cicd_pipeline_run_state: 'pending' })).toEqual({ count: 1, sum: 10 });
    expect(await duration({ cicd_pipeline_run_state: 'executing' })).toEqual({ count: 1, sum: 60 });
  });

  it('counts an end that comes before any other hook, and a late running hook after it leaves nothing active', async () => {
    await traced(500);
    await service.handleWebhook(hook(500, 'success', { finished: [job(5001, 500, { pendingAt: 1, startedAt: 2, finishedAt: 12 })] }));
    await service.handleWebhook(hook(500, 'running', { active: [5001] }));
    expect(await duration({ cicd_pipeline_run_state: 'executing', cicd_pipeline_result: 'success' })).toEqual({ count: 1, sum: 10 });
    expect([await active('pending'), await active('executing')]).toEqual([0, 0]);
  });

  it("labels a failed run with its first failing job's reason, counts its error once, and tells a timeout and the system's error apart", async () => {
    await traced(500);
    await traced(600);
    await traced(700);
    const allowed = job(5001, 500, { pendingAt: 1, startedAt: 2, finishedAt: 5 }, { status: 'failed', failureReason: 'script_failure', allowFailure: true });
    const failing = job(5002, 500, { pendingAt: 1, startedAt: 2, finishedAt: 8 }, { status: 'failed', failureReason: 'script_failure' });
    const later = job(5003, 500, { pendingAt: 1, startedAt: 2, finishedAt: 9 }, { status: 'failed', failureReason: 'unknown_failure' });
    await service.handleWebhook(hook(500, 'failed', { finished: [allowed, failing, later] }));
    await service.handleWebhook(hook(500, 'failed', { finished: [allowed, failing, later] }));
    const timedOut = job(6001, 600, { pendingAt: 1, startedAt: 2, finishedAt: 3602 }, { status: 'failed', failureReason: 'job_execution_timeout' });
    await service.handleWebhook(hook(600, 'failed', { finished: [timedOut] }));
    const lostRunner = job(7001, 700, { pendingAt: 1, startedAt: 2, finishedAt: 40 }, { status: 'failed', failureReason: 'runner_system_failure' });
    await service.handleWebhook(hook(700, 'failed', { finished: [lostRunner] }));

    expect(await duration({ cicd_pipeline_run_state: 'executing', cicd_pipeline_result: 'failure', error_type: 'script_failure' })).toMatchObject({ count: 1 });
    expect(await duration({ cicd_pipeline_run_state: 'executing', cicd_pipeline_result: 'timeout', error_type: 'job_execution_timeout' })).toMatchObject({
      count: 1,
    });
    expect(await duration({ cicd_pipeline_run_state: 'executing', cicd_pipeline_result: 'error', error_type: 'runner_system_failure' })).toMatchObject({
      count: 1,
    });
    // The state before the result was set carries neither.
    expect(await duration({ cicd_pipeline_run_state: 'pending' })).toMatchObject({ count: 3 });
    const errors = (errorType: string) =>
      counted(metrics.registry, 'cicd_pipeline_run_errors_total', { cicd_pipeline_name: 'group/app', error_type: errorType });
    expect([await errors('script_failure'), await errors('job_execution_timeout'), await errors('runner_system_failure')]).toEqual([1, 1, 1]);
  });

  it('counts a run GitLab reopens (a retried job) active again, and its next end only for its error: its time was its first end', async () => {
    await traced(500);
    const failed = job(5001, 500, { pendingAt: 1, startedAt: 2, finishedAt: 30 }, { status: 'failed', failureReason: 'script_failure' });
    await service.handleWebhook(hook(500, 'failed', { finished: [failed] }));
    // A retry: a new job (5009) pending in the pipeline that had ended.
    await service.handleWebhook(hook(500, 'running', { active: [5009] }));
    expect(await active('executing')).toBe(1);
    const retried = job(5009, 500, { pendingAt: 40, startedAt: 41, finishedAt: 60 }, { status: 'failed', failureReason: 'script_failure' });
    await service.handleWebhook(hook(500, 'failed', { finished: [retried] }));
    expect(await active('executing')).toBe(0);
    expect(await duration({ cicd_pipeline_run_state: 'executing' })).toMatchObject({ count: 1 });
    expect(await counted(metrics.registry, 'cicd_pipeline_run_errors_total', { error_type: 'script_failure' })).toBe(2);
  });

  it('names runs by project path, child pipelines apart, and folds names past the cap into _OTHER', async () => {
    start({ CICD_METRICS_MAX_PIPELINE_NAMES: '2' });
    await traced(500);
    await traced(800, 8);
    await traced(900, 9);
    const end = (pipelineId: number, more: Partial<PipelineEvent>) =>
      service.handleWebhook(
        hook(pipelineId, 'success', { finished: [job(pipelineId * 10 + 1, pipelineId, { pendingAt: 1, startedAt: 2, finishedAt: 3 })] }, more),
      );
    await end(500, {});
    await end(800, { projectId: 8, projectPath: 'group/child-maker', source: { pipelineId: 799, jobId: 7990, projectId: 8 } });
    await end(900, { projectId: 9, projectPath: 'other/project' });
    const runs = (name: string) =>
      histogram(metrics.registry, 'cicd_pipeline_run_duration_seconds', { cicd_pipeline_name: name, cicd_pipeline_run_state: 'executing' });
    expect((await runs('group/app')).count).toBe(1);
    expect((await runs('group/child-maker (child)')).count).toBe(1);
    expect((await runs('_OTHER')).count).toBe(1);
    // No run's id, commit or ref on any series: only the conventions' attributes, and the extension's part.
    const labels = new Set<string>();
    for (const name of ['cicd_pipeline_run_duration_seconds', 'ci_pipeline_run_pending_duration_seconds', 'cicd_pipeline_run_active']) {
      for (const value of (await metrics.registry.getSingleMetric(name)!.get()).values) for (const label of Object.keys(value.labels)) labels.add(label);
    }
    expect([...labels].sort()).toEqual(['ci_pipeline_run_pending_part', 'cicd_pipeline_name', 'cicd_pipeline_result', 'cicd_pipeline_run_state', 'le']);
  });

  it("in GitLab's own trace-id scheme counts root pipelines only, whose span is the control plane's", async () => {
    start({ TRACE_ID_SCHEME: 'gitlab' });
    await traced(500);
    const child = { rootPipelineId: 500, source: { pipelineId: 500, jobId: 5000, projectId: 7 } };
    const finished = (pipelineId: number) => ({ finished: [job(pipelineId * 10 + 1, pipelineId, { pendingAt: 1, startedAt: 2, finishedAt: 20 })] });
    await service.handleWebhook(hook(501, 'running', { active: [5011] }, child));
    await service.handleWebhook(hook(501, 'success', finished(501), child));
    await service.handleWebhook(hook(500, 'running', { active: [5001] }));
    expect(await active('executing')).toBe(1);
    await service.handleWebhook(hook(500, 'success', finished(500)));
    expect(await active('executing')).toBe(0);
    expect((await duration({ cicd_pipeline_run_state: 'executing' })).count).toBe(1);
    expect((await histogram(metrics.registry, 'cicd_pipeline_run_duration_seconds', { cicd_pipeline_name: 'group/app (child)' })).count).toBe(0);
  });

  it("counts the control plane's own store failures as cicd.system.errors, not as a pipeline run's", async () => {
    const failing = new (class extends MemoryTracedWorkStore {
      override async recordTracedPipelines(): Promise<void> {
        throw new StoreUnavailableError('connection refused');
      }
    })();
    store.close();
    store = failing;
    metrics = new MetricsService();
    service = pipelineSpansServiceOn(loadConfig({}), { store, outbox, metrics });
    await traced(500);
    expect(await counted(metrics.registry, 'cicd_system_errors_total', { cicd_system_component: 'pipeline_spans', error_type: 'store_failure' })).toBe(1);
    expect(await counted(metrics.registry, 'cicd_pipeline_run_errors_total')).toBe(0);
  });
});

/**
 * The orders GitLab may deliver a pipeline's hooks in, generated (STYLE "Tests"): each hook once or twice, in any
 * order, to either of two replicas sharing one store. Whatever the order, each run's time by state is recorded once
 * across the replicas, no run stays active once all its hooks are in, and active runs never sum below 0 or above the
 * runs there are. PROPERTY_RUNS and PROPERTY_SEED as the property suites take them (seed 20261207 by default).
 */
describe('CI/CD metrics under generated hook orders (SPEC §14)', () => {
  const RUNS = Number(process.env.PROPERTY_RUNS ?? 60);
  const SEED = process.env.PROPERTY_SEED !== undefined ? Number(process.env.PROPERTY_SEED) : 20261207;

  /** A pipeline's hooks in the order GitLab made them: pending, running, its end, and maybe a retry and a second end. */
  function story(pipelineId: number, firstFails: boolean, retried: boolean, secondFails: boolean): PipelineEvent[] {
    const first = job(
      pipelineId * 10,
      pipelineId,
      { pendingAt: 5, startedAt: 8, finishedAt: 40 },
      firstFails ? { status: 'failed', failureReason: 'script_failure' } : {},
    );
    const hooks = [
      hook(pipelineId, 'pending', { active: [first.jobId] }),
      hook(pipelineId, 'running', { active: [first.jobId] }),
      hook(pipelineId, first.status, { finished: [first] }),
    ];
    if (!retried) return hooks;
    const retry = job(
      pipelineId * 10 + 1,
      pipelineId,
      { pendingAt: 50, startedAt: 52, finishedAt: 80 },
      secondFails ? { status: 'failed', failureReason: 'script_failure' } : {},
    );
    return [...hooks, hook(pipelineId, 'running', { finished: [first], active: [retry.jobId] }), hook(pipelineId, retry.status, { finished: [first, retry] })];
  }

  const stories = fc.array(fc.record({ firstFails: fc.boolean(), retried: fc.boolean(), secondFails: fc.boolean() }), { minLength: 1, maxLength: 3 });
  const deliveries = (hooks: number) =>
    fc
      .array(fc.record({ hook: fc.nat({ max: hooks - 1 }), replica: fc.nat({ max: 1 }), order: fc.double({ min: 0, max: 1, noNaN: true }) }), {
        maxLength: hooks,
      })
      // Every hook once (to some replica), some again: in an order of their own.
      .chain((again) =>
        fc
          .tuple(...Array.from({ length: hooks }, () => fc.record({ replica: fc.nat({ max: 1 }), order: fc.double({ min: 0, max: 1, noNaN: true }) })))
          .map((once) => [...once.map((delivery, hook) => ({ ...delivery, hook })), ...again].sort((a, b) => a.order - b.order)),
      );
  const world = stories.chain((pipelines) => {
    const hooks = pipelines.flatMap((pipeline, i) => story(500 + i, pipeline.firstFails, pipeline.retried, pipeline.secondFails));
    return deliveries(hooks.length).map((order) => ({ pipelines, hooks, order }));
  });

  it(`records each run once and leaves none active (${RUNS} runs, seed ${SEED})`, async () => {
    await fc.assert(
      fc.asyncProperty(world, async ({ pipelines, hooks, order }) => {
        const store = new MemoryTracedWorkStore();
        const outbox = new MemoryOutboxStore();
        const registries = [new MetricsService(), new MetricsService()];
        const replicas = registries.map((metrics) => pipelineSpansServiceOn(loadConfig({}), { store, outbox, metrics }));
        try {
          for (const [i] of pipelines.entries()) {
            const pipelineId = 500 + i;
            replicas[0].recordPickup(
              {
                jobId: pipelineId * 10,
                pipelineId,
                rootPipelineId: pipelineId,
                projectId: 7,
                runnerId: 17,
                runnerType: 'project_type',
                traceId: pipelineId.toString(16).padStart(32, 'a'),
                queuedAt: Date.now() - 1_000,
                pickedUpAt: Date.now(),
              },
              Date.now() + 3_600_000,
              (pipelineId * 10).toString(16).padStart(16, '0'),
            );
          }
          await replicas[0].onModuleDestroy();
          const sum = async (name: string, labels: Record<string, string> = {}) =>
            (await Promise.all(registries.map((metrics) => counted(metrics.registry, name, labels)))).reduce((a, b) => a + b, 0);
          const durations = async (state: string) =>
            (
              await Promise.all(
                registries.map((metrics) => histogram(metrics.registry, 'cicd_pipeline_run_duration_seconds', { cicd_pipeline_run_state: state })),
              )
            ).reduce((a, b) => a + b.count, 0);
          for (const delivery of order) {
            await replicas[delivery.replica].handleWebhook(hooks[delivery.hook]);
            const active = await sum('cicd_pipeline_run_active');
            expect(active).toBeGreaterThanOrEqual(0);
            expect(active).toBeLessThanOrEqual(pipelines.length);
          }
          expect(await durations('pending')).toBe(pipelines.length);
          expect(await durations('executing')).toBe(pipelines.length);
          expect(await sum('cicd_pipeline_run_active')).toBe(0);
          // An end that failed is counted unless a later end was told before it; the last end, if failed, always is.
          const errors = await sum('cicd_pipeline_run_errors_total');
          const lastFailed = pipelines.filter((p) => (p.retried ? p.secondFails : p.firstFails)).length;
          const failedEnds = pipelines.reduce((n, p) => n + (p.firstFails ? 1 : 0) + (p.retried && p.secondFails ? 1 : 0), 0);
          expect(errors).toBeGreaterThanOrEqual(lastFailed);
          expect(errors).toBeLessThanOrEqual(failedEnds);
        } finally {
          store.close();
          outbox.close();
        }
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });
});
