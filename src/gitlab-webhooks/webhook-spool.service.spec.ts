import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/app-config';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { MetricsService } from '../observability/metrics.service';
import type { WebhookEvent } from '../pipeline-spans/pipeline-events';
import { PipelineSpansService, WebhookOutcome } from '../pipeline-spans/pipeline-spans.service';
import { WebhookSpoolMetrics } from './webhook-spool.metrics';
import { WebhookSpoolService } from './webhook-spool.service';

/** The store behind PipelineSpansService, as the spool sees it: up, down, hung, or failing on one hook. */
class FakePipelineSpans {
  constructor(public store: 'up' | 'down' | 'hung' = 'up') {}

  failing = new Set<string>();
  readonly recorded: string[] = [];

  async handleWebhook(event: WebhookEvent): Promise<WebhookOutcome> {
    const told = event.kind === 'pipeline' ? `pipeline ${event.pipelineId}` : `job ${event.jobId}`;
    if (this.store === 'down') throw new StoreUnavailableError(new Error('connect ECONNREFUSED'));
    if (this.store === 'hung') await new Promise(() => undefined);
    if (this.failing.has(told)) throw new TypeError('a bug');
    this.recorded.push(told);
    return { queued: 1, duplicates: 0, refused: 0, parked: 0, dropped: 0 };
  }
}

const jobHook = (pipelineId: number, jobId: number) => ({
  event: 'Job Hook',
  uuid: `uuid-${jobId}`,
  receivedAt: 1_700_000_000_000,
  body: { object_kind: 'build', build_id: jobId, pipeline_id: pipelineId, build_status: 'success', build_finished_at: '2023-11-14 22:13:20 UTC' },
});
const pipelineHook = (pipelineId: number) => ({
  event: 'Pipeline Hook',
  uuid: `uuid-p${pipelineId}`,
  receivedAt: 1_700_000_000_000,
  body: { object_kind: 'pipeline', object_attributes: { id: pipelineId, status: 'running' }, project: { id: 7 }, builds: [] },
});

/**
 * Waits until `check` holds. Wait for the state the test then asserts, not for an earlier step of the same work: the
 * spool counts a replay after it removed the hook's entry, so a test that waited for the hook to be recorded and then
 * read the counter read it a moment too soon, once in CI (issue 56).
 */
async function until<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('WebhookSpoolService', () => {
  const started: WebhookSpoolService[] = [];
  afterEach(async () => {
    for (const service of started.splice(0)) await service.onModuleDestroy();
  });

  async function start(spans: FakePipelineSpans, env: Record<string, string> = {}, dir = mkdtempSync(join(tmpdir(), 'cjt-spool-'))) {
    const config = loadConfig({
      GITLAB_WEBHOOK_SECRET_FILE: '/unused',
      WEBHOOK_SPOOL_DIR: dir,
      WEBHOOK_REPLAY_MAX_BACKOFF_SECONDS: '1',
      WEBHOOK_STORE_TIMEOUT_MS: '100',
      ...env,
    });
    const metrics = new MetricsService();
    const service = new WebhookSpoolService(config.webhooks, config.process, spans as unknown as PipelineSpansService, new WebhookSpoolMetrics(metrics));
    await service.onModuleInit();
    started.push(service);
    const metric = async (name: string) => (await metrics.registry.getSingleMetricAsString(name)).split('\n').filter((line) => !line.startsWith('#'));
    return { service, dir, metric };
  }

  it('spools every hook while the store is down, and records them in arrival order once it is back', async () => {
    const spans = new FakePipelineSpans('down');
    const { service, metric } = await start(spans);
    const intakes = [
      await service.take(jobHook(1, 11)),
      await service.take(jobHook(2, 21)),
      await service.take(jobHook(1, 12)),
      await service.take(pipelineHook(1)),
    ];
    expect(intakes.map((intake) => intake.kind)).toEqual(['spooled', 'spooled', 'spooled', 'spooled']);
    // Behind its pipeline's first hook, a hook is not even offered to the store.
    expect(intakes.map((intake) => (intake.kind === 'spooled' ? intake.reason : ''))).toEqual([
      'store_unavailable',
      'store_unavailable',
      'behind_spooled',
      'behind_spooled',
    ]);
    expect(await metric('ci_job_telemetry_webhook_spool_hooks')).toEqual(['ci_job_telemetry_webhook_spool_hooks 4']);

    spans.store = 'up';
    const replayed = async () => (await metric('ci_job_telemetry_webhooks_replayed_total'))[0]?.endsWith(' 4');
    const empty = async () => (await metric('ci_job_telemetry_webhook_spool_hooks'))[0]?.endsWith(' 0');
    await until('the spool to be replayed and emptied', async () => (await replayed()) && (await empty()));
    expect(spans.recorded).toEqual(['job 11', 'job 21', 'job 12', 'pipeline 1']);
    expect(await metric('ci_job_telemetry_webhooks_replayed_total')).toEqual(['ci_job_telemetry_webhooks_replayed_total 4']);
    expect(await metric('ci_job_telemetry_webhook_spool_hooks')).toEqual(['ci_job_telemetry_webhook_spool_hooks 0']);
    // The spool empty: hooks go to the store again at once.
    expect(await service.take(jobHook(1, 13))).toEqual({ kind: 'recorded', outcome: { queued: 1, duplicates: 0, refused: 0, parked: 0, dropped: 0 } });
  });

  it('spools a hook the store does not answer in time, so GitLab is answered before its own timeout', async () => {
    const spans = new FakePipelineSpans('hung');
    const { service } = await start(spans);
    const before = Date.now();
    expect(await service.take(jobHook(3, 31))).toEqual({ kind: 'spooled', reason: 'store_timeout' });
    expect(Date.now() - before).toBeLessThan(1000);
    spans.store = 'up';
    await until('the hook to be replayed', () => spans.recorded.length === 1);
  });

  it('spools a hook whose handling fails unexpectedly, retries it, then drops it without holding other pipelines back', async () => {
    const spans = new FakePipelineSpans();
    spans.failing.add('job 41');
    const { service, metric } = await start(spans);
    expect(await service.take(jobHook(4, 41))).toEqual({ kind: 'spooled', reason: 'error' });
    expect(await service.take(jobHook(4, 42))).toEqual({ kind: 'spooled', reason: 'behind_spooled' });
    expect((await service.take(jobHook(5, 51))).kind).toBe('recorded');
    expect(spans.recorded).toEqual(['job 51']);
    // Five attempts a backoff apart (at most 1 s here), then the first is given up on and the second follows.
    await until(
      'the failing hook to be dropped and the next replayed',
      async () => spans.recorded.includes('job 42') && (await metric('ci_job_telemetry_webhooks_dropped_total')).some((line) => line.endsWith(' 1')),
      15_000,
    );
    expect(spans.recorded).toEqual(['job 51', 'job 42']);
    expect(await metric('ci_job_telemetry_webhooks_dropped_total')).toEqual(['ci_job_telemetry_webhooks_dropped_total{reason="failed_repeatedly"} 1']);
    expect(await metric('cicd_system_errors_total')).toEqual(['cicd_system_errors_total{cicd_system_component="webhooks",error_type="failed_repeatedly"} 1']);
  }, 20_000);

  it('refuses only when the spool is full, and counts it', async () => {
    const spans = new FakePipelineSpans('down');
    const { service, metric } = await start(spans, { WEBHOOK_SPOOL_MAX_HOOKS: '2' });
    const kinds = [];
    for (const jobId of [61, 62, 63]) kinds.push((await service.take(jobHook(6, jobId))).kind);
    expect(kinds).toEqual(['spooled', 'spooled', 'refused']);
    expect(await metric('ci_job_telemetry_webhook_spool_refusals_total')).toEqual(['ci_job_telemetry_webhook_spool_refusals_total{reason="full"} 1']);
  });

  it('replays after a restart what the previous process spooled', async () => {
    const down = new FakePipelineSpans('down');
    const first = await start(down);
    await first.service.take(jobHook(7, 71));
    await first.service.take(pipelineHook(7));
    await first.service.onModuleDestroy();

    const up = new FakePipelineSpans();
    await start(up, {}, first.dir);
    await until('the previous process’s hooks to be replayed', () => up.recorded.length === 2);
    expect(up.recorded).toEqual(['job 71', 'pipeline 7']);
  });

  it('keeps its 4xx for bad input and ignores events it does not read, spooling neither', async () => {
    const spans = new FakePipelineSpans('down');
    const { service, metric } = await start(spans);
    expect(await service.take({ event: 'Pipeline Hook', receivedAt: Date.now(), body: { object_kind: 'pipeline' } })).toMatchObject({ kind: 'invalid' });
    expect(await service.take({ event: 'Push Hook', receivedAt: Date.now(), body: {} })).toEqual({ kind: 'ignored' });
    expect(await metric('ci_job_telemetry_webhook_spool_hooks')).toEqual(['ci_job_telemetry_webhook_spool_hooks 0']);
  });
});
