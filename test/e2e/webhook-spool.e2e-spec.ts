import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD_STAGES, exportJobAsRunner } from '../../simulator/stock-runner';
import { Delivered, deliverWebhook, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from '../../simulator/gitlab-webhooks';
import { pickUpPipelineJob, PickedUpJob } from '../helpers/ci-pipeline';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { expectMatchesOpenApi } from '../helpers/openapi';
import type { OtlpSink } from '../helpers/otlp-sink';
import { freePort, waitFor } from '../helpers/ports';
import type { RedisServer } from '../helpers/redis';
import { ServiceOptions, ServiceProcess, startService, metric } from '../helpers/service';
import { startWorld, World } from '../helpers/world';
import { traceShape } from '../helpers/trace-shape';

/**
 * SPEC §10 delivery, GitLab's side: GitLab never resends a failed hook and disables a webhook after four
 * failures in a row, so a store outage must cost no hook. Redis goes away for a minute while a pipeline's
 * hooks arrive, and the service restarts in the middle of it; every hook is answered 2xx and the trace at
 * the collector is whole afterwards, each span once. A full spool is the one 503.
 */

const PROJECT = 7;
const RUNNER_ID = 17;
const OUTAGE_MS = 60_000;

async function readiness(service: ServiceProcess): Promise<{ status: number; checks: Record<string, string> }> {
  const response = await fetch(`${service.url}/-/readiness`);
  return { status: response.status, checks: ((await response.json()) as { checks: Record<string, string> }).checks };
}

/** Started while the store is down: live (liveness answers) but not ready, as an operator's probe sees it. */
async function startWithoutStore(start: (notReady: ServiceOptions) => Promise<ServiceProcess>): Promise<ServiceProcess> {
  const service = await start({ waitReady: false });
  await waitFor(`service on ${service.url} to be live (output: ${service.output()})`, async () => {
    const response = await fetch(`${service.url}/-/liveness`).catch(() => undefined);
    return response?.status === 200 ? true : undefined;
  });
  return service;
}

/** Until the service has logged `text` (its output reaches the test a little after the answers). */
const logged = (service: ServiceProcess, text: string) =>
  waitFor(`the log to say ${JSON.stringify(text)}`, async () => (service.output().includes(text) ? true : undefined), 5000);

/** Every webhook answer of this file, checked against the OpenAPI document after each test. */
const answered: Delivered[] = [];
afterEach(() => {
  for (const answer of answered.splice(0)) expectMatchesOpenApi('/webhooks/gitlab', 'post', answer.status, answer.contentType, answer.body);
});

describe('GitLab webhooks across a store outage and a restart (SPEC §10 delivery)', () => {
  let redis: RedisServer;
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let world: World;
  const spooling = {
    WEBHOOK_SPOOL_DIR: join(mkdtempSync(join(tmpdir(), 'cjt-e2e-spool-')), 'webhook-spool'),
    // Replays every second once the store is down, so the test does not wait out a 30 s backoff.
    WEBHOOK_REPLAY_MAX_BACKOFF_SECONDS: '1',
    OUTBOX_MAX_BACKOFF_SECONDS: '1',
  };

  beforeAll(async () => {
    // Persistent, as a failover to a replica keeps what the primary had: the pickups' traced work survives.
    world = await startWorld({ redis: { persistent: true }, sink: true, webhookSecret: true, service: spooling });
    ({ redis, sink, webhookSecret: secret, service } = world);
  }, 60_000);
  afterAll(() => world?.stop());

  const deliver = async (event: 'Pipeline Hook' | 'Job Hook', body: unknown, uuid: string) => {
    const answer = await deliverWebhook(service.url, event, body, { token: secret.secret, uuid });
    answered.push(answer);
    return answer;
  };

  it('answers every hook 2xx while Redis is down for a minute, and delivers the whole trace once after it is back', async () => {
    const PIPELINE = 99_100;
    const plan = [
      { jobId: 991_001, name: 'build', stage: 'build', status: 'success', queuedSeconds: 20 },
      { jobId: 991_002, name: 'test', stage: 'test', status: 'failed', queuedSeconds: 8 },
      { jobId: 991_003, name: 'lint', stage: 'test', status: 'success', queuedSeconds: 3 },
    ] as const;
    const jobs: Array<{ picked: PickedUpJob; webhook: WebhookJob }> = [];
    for (const job of plan) {
      const queuedAt = new Date(Date.now() - job.queuedSeconds * 1000);
      const picked = await pickUpPipelineJob(service, { jobId: job.jobId, projectId: PROJECT, pipelineId: PIPELINE, runnerId: RUNNER_ID, queuedAt });
      const startedAt = new Date();
      const finishedAt = new Date(startedAt.getTime() + 9000);
      jobs.push({
        picked,
        webhook: {
          id: job.jobId,
          name: job.name,
          stage: job.stage,
          status: job.status,
          createdAt: queuedAt,
          startedAt,
          finishedAt,
          queuedSeconds: job.queuedSeconds,
          ...(job.status === 'failed' ? { failureReason: 'script_failure' } : {}),
          runner: { id: RUNNER_ID, runnerType: 'project_type', description: 'runner-17' },
        },
      });
      await exportJobAsRunner(picked.tracing, {
        jobId: job.jobId,
        projectId: PROJECT,
        runnerId: RUNNER_ID,
        pipelineId: picked.pipelineVariable,
        pipelineSource: 'push',
        executor: 'shell',
        status: job.status,
        startedAt,
        stageSeconds: { prepare_executor: 1, get_sources: 1, restore_cache: 1, step_script: 4, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
      });
    }
    const traceId = jobs[0].picked.tracing.trace_id;
    const spansOfTrace = () => sink.allSpans().filter((span) => span.traceId === traceId);
    const runnerAndQueueSpans = jobs.length * (1 + BUILD_STAGES.length) + jobs.length;
    await waitFor('the runner spans and the queue waits', async () => (spansOfTrace().length >= runnerAndQueueSpans ? true : undefined));

    const createdAt = new Date(jobs[0].webhook.createdAt.getTime() - 1000);
    const running: WebhookPipeline = {
      id: PIPELINE,
      projectId: PROJECT,
      status: 'running',
      createdAt,
      jobs: jobs.map(({ webhook }) => ({ ...webhook, status: 'running', finishedAt: undefined })),
    };
    const finished: WebhookPipeline = {
      ...running,
      status: 'failed',
      finishedAt: new Date(Math.max(...jobs.map(({ webhook }) => webhook.finishedAt!.getTime())) + 1000),
      jobs: jobs.map(({ webhook }) => webhook),
    };
    // Before the outage the store takes hooks as usual.
    expect(await deliver('Pipeline Hook', pipelineHook(running), 'pipeline-running')).toMatchObject({ status: 200, body: { status: 'accepted' } });

    await redis.stop();
    const outageStarted = Date.now();
    const answers: Delivered[] = [];
    // The first job's hooks as GitLab sends them: running, then finished. A running job's hook needs no
    // store (it closes no span) and may be answered 200; every later hook of the pipeline waits behind the
    // first one spooled, so they are told in order.
    answers.push(await deliver('Job Hook', jobHook(running, { ...jobs[0].webhook, status: 'running', finishedAt: undefined }), 'build-running'));
    answers.push(await deliver('Job Hook', jobHook(finished, jobs[0].webhook), 'build-finished'));
    const spooled = () => answers.filter((answer) => answer.status === 202).length;
    expect(answers[1]).toMatchObject({ status: 202, body: { status: 'spooled' } });
    await waitFor('readiness to say hooks wait in the spool', async () => {
      const { checks } = await readiness(service);
      return checks.webhook_spool === 'degraded' && checks.store === 'failing' ? true : undefined;
    });
    expect(await metric(service, 'ci_job_telemetry_webhook_spool_hooks')).toBe(spooled());
    await logged(service, 'webhooks are being spooled to');

    // The service restarts in the middle of the outage, with the store still down: its spool is kept.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    await service.stop();
    service = await startWithoutStore((notReady) => world.startService(spooling, notReady));
    expect(await metric(service, 'ci_job_telemetry_webhook_spool_hooks')).toBe(spooled());
    await logged(service, `${spooled()} GitLab webhook(s) left in the spool`);

    const afterRestart = answers.length;
    for (const { webhook } of jobs.slice(1)) {
      answers.push(await deliver('Job Hook', jobHook(running, { ...webhook, status: 'running', finishedAt: undefined }), `job-${webhook.id}-running`));
      answers.push(await deliver('Job Hook', jobHook(finished, webhook), `job-${webhook.id}-finished`));
    }
    answers.push(await deliver('Pipeline Hook', pipelineHook(finished), 'pipeline-finished'));
    // GitLab's redelivery of the same event, with the same UUID.
    answers.push(await deliver('Pipeline Hook', pipelineHook(finished), 'pipeline-finished'));
    for (const answer of answers) expect([200, 202]).toContain(answer.status);
    for (const answer of answers.slice(afterRestart)) expect(answer).toMatchObject({ status: 202, body: { status: 'spooled' } });
    // Answered at once, far inside GitLab's 10 s webhook timeout.
    for (const answer of answers) expect(answer.elapsedMs).toBeLessThan(3000);
    expect(await metric(service, 'ci_job_telemetry_webhook_spool_hooks')).toBe(spooled());
    expect(readdirSync(spooling.WEBHOOK_SPOOL_DIR).filter((name) => name.endsWith('.hook.json'))).toHaveLength(spooled());
    expect((await readiness(service)).checks.webhook_spool).toBe('degraded');
    expect((await fetch(`${service.url}/-/liveness`)).status).toBe(200);
    // Nothing of the pipeline reached the collector while the store was away.
    expect(spansOfTrace()).toHaveLength(runnerAndQueueSpans);

    await new Promise((resolve) => setTimeout(resolve, Math.max(0, outageStarted + OUTAGE_MS - Date.now())));
    await redis.start();
    await waitFor(
      'the spool to be replayed',
      async () => ((await metric(service, 'ci_job_telemetry_webhook_spool_hooks')) === 0 && (await readiness(service)).status === 200 ? true : undefined),
      30_000,
      200,
    );
    expect((await readiness(service)).checks).toMatchObject({ webhook_spool: 'ok', store: 'ok' });
    expect(await metric(service, 'ci_job_telemetry_webhooks_replayed_total')).toBe(spooled());
    expect(await metric(service, 'ci_job_telemetry_webhooks_dropped_total')).toBe(0);
    await logged(service, `webhook spool empty: ${spooled()} spooled webhook(s) recorded in the store`);
    expect(readdirSync(spooling.WEBHOOK_SPOOL_DIR)).toEqual([]);

    const expected = runnerAndQueueSpans + jobs.length /* job */ + 1; /* pipeline */
    await waitFor(`${expected} spans at the collector`, async () => (spansOfTrace().length >= expected ? true : undefined), 30_000);
    await waitFor('the outbox to be delivered', async () => ((await metric(service, 'ci_job_telemetry_outbox_spans')) === 0 ? true : undefined), 30_000);
    const spans = spansOfTrace();
    expect(traceShape(spans)).toEqual({ roots: [expect.stringMatching(/^pipeline /)], orphans: [], duplicates: [] });
    // Each span once by id; a job span may come twice, unversioned from its Job Hook and again at the pipeline's end
    // with the critical path written on it (a newer version, which readers keep).
    expect(new Set(spans.map((span) => span.spanId)).size).toBe(expected);
    expect(spans.filter((span) => span.name === 'job' && span.attributes['ci.job.critical_path'] !== undefined)).toHaveLength(jobs.length);
    const pipelineSpan = spans.find((span) => span.name === 'pipeline')!;
    expect(pipelineSpan).toMatchObject({ statusCode: 2, attributes: expect.objectContaining({ 'cicd.pipeline.result': 'failure' }) });
    expect(pipelineSpan.statusMessage).toContain('test: script_failure');
    for (const { picked, webhook } of jobs) {
      const jobSpan = spans.find((span) => span.name === 'job' && span.attributes['ci.job.id'] === webhook.id)!;
      expect(jobSpan.spanId).toBe(picked.tracing.span_parent_id);
      expect(jobSpan.parentSpanId).toBe(pipelineSpan.spanId);
      expect(jobSpan.attributes['ci.job.status']).toBe(webhook.status);
      // GitLab writes whole seconds in some hooks.
      expect(Math.abs(Number(jobSpan.endNanos / 1_000_000n) - webhook.finishedAt!.getTime())).toBeLessThan(1000);
    }
  }, 180_000);
});

describe('a full webhook spool (SPEC §10 delivery)', () => {
  it('answers 503 only when the spool is full, counts it, and keeps its 4xx for bad input while the store is down', async () => {
    const secret = makeWebhookSecret();
    // Nothing listens there: the store is down from the start.
    const redisUrl = `redis://127.0.0.1:${await freePort()}`;
    const service = await startWithoutStore((notReady) =>
      startService(
        {
          REDIS_URL: redisUrl,
          OTLP_UPSTREAM_URL: 'http://127.0.0.1:9',
          GITLAB_WEBHOOK_SECRET_FILE: secret.file,
          WEBHOOK_SPOOL_DIR: join(mkdtempSync(join(tmpdir(), 'cjt-e2e-spool-')), 'webhook-spool'),
          WEBHOOK_SPOOL_MAX_HOOKS: '2',
        },
        notReady,
      ),
    );
    try {
      const pipeline: WebhookPipeline = { id: 99_200, projectId: PROJECT, status: 'running', createdAt: new Date(Date.now() - 60_000), jobs: [] };
      const job = (id: number): WebhookJob => ({
        id,
        name: `job-${id}`,
        stage: 'test',
        status: 'success',
        createdAt: pipeline.createdAt,
        startedAt: pipeline.createdAt,
        finishedAt: new Date(),
      });
      const deliver = async (body: unknown, token = secret.secret) => {
        const answer = await deliverWebhook(service.url, 'Job Hook', body, { token });
        answered.push(answer);
        return answer;
      };
      const answers = [
        await deliver(jobHook(pipeline, job(992_001))),
        await deliver(jobHook(pipeline, job(992_002))),
        await deliver(jobHook(pipeline, job(992_003))),
      ];
      expect(answers.map((answer) => answer.status)).toEqual([202, 202, 503]);
      expect(answers[2].body.error).toContain('spool is full');
      expect(await metric(service, 'ci_job_telemetry_webhook_spool_refusals_total{reason="full"}')).toBe(1);
      expect(await metric(service, 'ci_job_telemetry_webhooks_total{event="Job Hook",outcome="unavailable"}')).toBe(1);
      expect(await metric(service, 'ci_job_telemetry_webhooks_spooled_total')).toBe(2);
      await logged(service, 'the webhook spool is full (WEBHOOK_SPOOL_MAX_HOOKS=2');

      // Bad input is refused as before, and takes no room in the spool.
      expect((await deliver('{"object_kind": "build",')).status).toBe(400);
      expect((await deliver({ object_kind: 'build' })).status).toBe(400);
      expect((await deliver(jobHook(pipeline, job(992_004)), 'not-the-secret')).status).toBe(401);
      expect(await metric(service, 'ci_job_telemetry_webhook_spool_hooks')).toBe(2);
    } finally {
      await service.stop();
    }
  }, 60_000);
});
