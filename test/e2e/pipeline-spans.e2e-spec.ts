import { createHash, createHmac } from 'node:crypto';
import { BUILD_STAGES, exportJobAsRunner, TracingFeature } from '../../simulator/stock-runner';
import { Delivered, deliverWebhook as deliver, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from '../../simulator/gitlab-webhooks';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { pickUpJob } from '../helpers/ci-job';
import { writeFlagsFile } from '../helpers/flags-file';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { OtlpSink, ReceivedSpan, startOtlpSink } from '../helpers/otlp-sink';
import { waitFor } from '../helpers/ports';
import { DecodedSpan, ScriptedAnswer, ScriptedCollector, startScriptedCollector } from '../helpers/scripted-collector';
import { RedisServer, startRedis } from '../helpers/redis';
import { ServiceProcess, startService, metric } from '../helpers/service';
import { startWorld, World } from '../helpers/world';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { traceShape } from '../helpers/trace-shape';

/**
 * SPEC §10 from outside: a pipeline with a child pipeline picked up through the decorator, each job
 * exported as a stock GitLab Runner does, GitLab's Pipeline and Job hooks delivered twice each and out of
 * order; what reaches the collector must be one whole trace.
 */

const PROJECT = 7;
const RUNNER = { id: 17, runner_type: 'group_type', description: 'shared-runner-1' };
const seconds = (n: number) => n * 1000;
const hmacHex = (key: Buffer, message: string, bytes: number) => createHmac('sha256', key).update(message).digest().subarray(0, bytes).toString('hex');

interface PickedUp {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly tracing: TracingFeature;
  readonly queuedAt: Date;
  /** The pickup call was made between these two instants. */
  readonly pickedUpBetween: readonly [number, number];
}

/** GitLab's job-request API picking a job up, `waitedSeconds` after it was queued. */
async function pickUp(service: ServiceProcess, job: { jobId: number; pipelineId: number; rootPipelineId: number; waitedSeconds: number; projectId?: number }) {
  const queuedAt = new Date(Date.now() - seconds(job.waitedSeconds));
  const before = Date.now();
  const decorated = await pickUpJob(
    service,
    jobPayloadRequest({
      runner: { id: RUNNER.id, runner_type: RUNNER.runner_type },
      job: {
        id: job.jobId,
        project_id: job.projectId ?? PROJECT,
        pipeline_id: job.pipelineId,
        root_pipeline_id: job.rootPipelineId,
        queued_at: queuedAt.toISOString(),
        token: `glcbt-job-${job.jobId}`,
      },
    }),
  );
  const after = Date.now();
  return {
    decorated,
    picked: {
      jobId: job.jobId,
      pipelineId: job.pipelineId,
      tracing: decorated.payload.features.tracing as TracingFeature,
      queuedAt,
      pickedUpBetween: [before, after] as const,
    },
  };
}

/** The job run by a stock runner: its spans exported to the URL the payload names, as GitLab Runner does. */
async function runAsRunner(job: PickedUp, status: 'success' | 'failed', startedAt: Date) {
  await exportJobAsRunner(job.tracing, {
    jobId: job.jobId,
    projectId: PROJECT,
    runnerId: RUNNER.id,
    pipelineId: String(job.pipelineId),
    pipelineSource: 'push',
    executor: 'docker',
    status,
    startedAt,
    stageSeconds: { prepare_executor: 1, get_sources: 1, restore_cache: 1, step_script: 3, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
  });
}

/** What GitLab knows of a job once it ran: times around the runner's, its status, its runner. */
function finished(job: PickedUp, name: string, stage: string, status: string, failureReason?: string): WebhookJob {
  const startedAt = new Date(job.pickedUpBetween[1] + 1000);
  return {
    id: job.jobId,
    name,
    stage,
    status,
    createdAt: job.queuedAt,
    startedAt,
    finishedAt: new Date(startedAt.getTime() + seconds(9)),
    queuedSeconds: (job.pickedUpBetween[0] - job.queuedAt.getTime()) / 1000,
    failureReason,
    runner: { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER.description },
  };
}

/** Until the outbox of every replica is empty: everything enqueued so far has reached the collector. */
async function outboxDrained(service: ServiceProcess): Promise<void> {
  await waitFor(
    'the outbox to be delivered',
    async () => {
      const readiness = (await (await fetch(`${service.url}/-/readiness`)).json()) as { checks: Record<string, string> };
      if (readiness.checks.outbox !== 'ok') return undefined;
      return (await metric(service, 'ci_job_telemetry_outbox_spans')) === 0 ? true : undefined;
    },
    30_000,
    100,
  );
}

/** Every webhook answer of this file, checked against the OpenAPI document after each test. */
const answered: Delivered[] = [];
async function deliverWebhook(...args: Parameters<typeof deliver>): Promise<Delivered> {
  const answer = await deliver(...args);
  answered.push(answer);
  return answer;
}

const spansOf = (sink: OtlpSink, traceId: string) => sink.allSpans().filter((span) => span.traceId === traceId);
const named = (spans: ReceivedSpan[], name: string, jobId?: number) =>
  spans.filter((span) => span.name === name && (jobId === undefined || span.attributes['ci.job.id'] === jobId));

/** GitLab's account of a pipeline: succeeded, created a second before its first job was queued, ending 20 s from now. */
const succeeded = (id: number, first: { queuedAt: Date }, jobs: WebhookPipeline['jobs']): WebhookPipeline => ({
  id,
  projectId: PROJECT,
  status: 'success',
  createdAt: new Date(first.queuedAt.getTime() - 1000),
  finishedAt: new Date(Date.now() + 20_000),
  jobs,
});

describe('control-plane spans: a whole, connected pipeline trace (SPEC §10)', () => {
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let flagsFile: string;
  let world: World;

  beforeAll(async () => {
    // Project 66 is left out by the flag, as an operator rolling out project by project would.
    flagsFile = writeFlagsFile({ constraints: [{ contextName: 'projectId', operator: 'NOT_IN', values: ['66'] }] });
    world = await startWorld({ redis: true, sink: true, webhookSecret: true, service: { FLAGS_FILE: flagsFile } });
    ({ sink, webhookSecret: secret, service } = world);
  }, 60_000);
  afterAll(() => world?.stop());

  const hook = (event: 'Pipeline Hook' | 'Job Hook', body: unknown, uuid?: string) => deliverWebhook(service.url, event, body, { token: secret.secret, uuid });

  afterEach(() => {
    // Every answer the webhook route gave is the one openapi/openapi.yaml documents.
    for (const answer of answered.splice(0)) expectMatchesOpenApi('/webhooks/gitlab', 'post', answer.status, answer.contentType, answer.body);
  });

  it('gives a pipeline with a child pipeline exactly one root, no missing parent, no duplicate, the queue waits and the failures', async () => {
    const ROOT = 91_000;
    const CHILD = 91_001;
    const BRIDGE = 910_003;
    // Jobs queued seconds before their pickup; the child's jobs after the trigger job started it.
    const build = (await pickUp(service, { jobId: 910_001, pipelineId: ROOT, rootPipelineId: ROOT, waitedSeconds: 30 })).picked;
    const test = (await pickUp(service, { jobId: 910_002, pipelineId: ROOT, rootPipelineId: ROOT, waitedSeconds: 12 })).picked;
    const unit = (await pickUp(service, { jobId: 910_011, pipelineId: CHILD, rootPipelineId: ROOT, waitedSeconds: 5 })).picked;
    const lint = (await pickUp(service, { jobId: 910_012, pipelineId: CHILD, rootPipelineId: ROOT, waitedSeconds: 3 })).picked;
    const jobs = [build, test, unit, lint];
    const traceId = build.tracing.trace_id;
    for (const job of jobs) expect(job.tracing.trace_id).toBe(traceId);

    for (const job of jobs) await runAsRunner(job, job === test ? 'failed' : 'success', new Date(job.pickedUpBetween[1] + 1000));

    const createdAt = new Date(build.queuedAt.getTime() - 1000);
    const rootJobs: WebhookJob[] = [
      finished(build, 'build-image', 'build', 'success'),
      finished(test, 'test-build', 'test', 'failed', 'script_failure'),
      // Never ran: no runner, null times (GitLab's own example shapes).
      { id: 910_004, name: 'production', stage: 'deploy', status: 'skipped', createdAt },
      { id: 910_005, name: 'staging', stage: 'deploy', status: 'manual', createdAt },
    ];
    const childJobs = [finished(unit, 'unit', 'test', 'success'), finished(lint, 'lint', 'test', 'success')];
    const end = new Date(Math.max(...[...rootJobs, ...childJobs].map((job) => job.finishedAt?.getTime() ?? 0)) + 2000);
    const root: WebhookPipeline = { id: ROOT, projectId: PROJECT, status: 'failed', createdAt, finishedAt: end, jobs: rootJobs };
    // A newer GitLab: the child's hook names its root too.
    const child: WebhookPipeline = {
      id: CHILD,
      projectId: PROJECT,
      status: 'success',
      createdAt: new Date(createdAt.getTime() + 500),
      finishedAt: new Date(end.getTime() - 1000),
      jobs: childJobs,
      source: { pipelineId: ROOT, jobId: BRIDGE },
      rootPipelineId: ROOT,
    };

    // Out of order: the pipelines' ends before their jobs', the root's before the child's; each
    // delivered twice (GitLab's redelivery keeps X-Gitlab-Event-UUID), with status changes in between.
    const deliveries: Array<['Pipeline Hook' | 'Job Hook', unknown, string]> = [
      ['Pipeline Hook', pipelineHook({ ...root, status: 'running', finishedAt: undefined }), 'root-running'],
      ['Pipeline Hook', pipelineHook(root), 'root-final'],
      ['Job Hook', jobHook(root, { ...rootJobs[0], status: 'running', finishedAt: undefined }), 'build-running'],
      ['Pipeline Hook', pipelineHook(child), 'child-final'],
      ...rootJobs.slice(0, 2).map((job): ['Job Hook', unknown, string] => ['Job Hook', jobHook(root, job), `job-${job.id}`]),
      ...childJobs.map((job): ['Job Hook', unknown, string] => ['Job Hook', jobHook(child, job), `job-${job.id}`]),
    ];
    const answers = [];
    for (const [event, body, uuid] of [...deliveries, ...deliveries.slice().reverse()]) answers.push(await hook(event, body, uuid));
    for (const answer of answers) expect(answer).toMatchObject({ status: 200, body: { status: 'accepted' } });

    // Each job span comes twice: when the job ends, and with the critical path written on it at the root pipeline's end.
    const expected = jobs.length * (1 + BUILD_STAGES.length) + 2 /* pipelines */ + 1 /* bridge */ + jobs.length * 3; /* job twice + queue_wait */
    await waitFor(`${expected} spans at the collector`, async () => (spansOf(sink, traceId).length >= expected ? true : undefined), 20_000);
    await outboxDrained(service);
    const spans = spansOf(sink, traceId);

    expect(traceShape(spans)).toEqual({ roots: [expect.stringMatching(/^pipeline /)], orphans: [], duplicates: [] });
    expect(spans).toHaveLength(expected);
    const [rootSpan] = named(spans, 'pipeline').filter((span) => span.parentSpanId === '');
    expect(rootSpan.attributes['ci.pipeline.id']).toBe(String(ROOT));

    for (const job of jobs) {
      // The job span is exactly the parent the decorator handed the runner; its later version says whether the job
      // was on the critical path, the child pipeline's jobs too.
      const copies = named(spans, 'job', job.jobId);
      expect(copies.map((span) => typeof span.attributes['ci.job.critical_path']).sort()).toEqual(['boolean', 'undefined']);
      const [jobSpan] = copies;
      expect(jobSpan.spanId).toBe(job.tracing.span_parent_id);
      expect(named(spans, 'job_execution', job.jobId)[0].parentSpanId).toBe(jobSpan.spanId);
      // The queue wait: from queued_at to the pickup.
      const [queue] = named(spans, 'queue_wait', job.jobId);
      expect(queue.parentSpanId).toBe(jobSpan.spanId);
      expect(queue.startNanos).toBe(BigInt(job.queuedAt.getTime()) * 1_000_000n);
      expect(Number(queue.endNanos / 1_000_000n)).toBeGreaterThanOrEqual(job.pickedUpBetween[0]);
      expect(Number(queue.endNanos / 1_000_000n)).toBeLessThanOrEqual(job.pickedUpBetween[1]);
      expect(jobSpan.startNanos).toBe(queue.startNanos);
      for (const span of [jobSpan, queue]) {
        expect(span.resource['service.name']).toBe('gitlab-ci');
        expect(span.attributes).toMatchObject({
          'ci.job.id': job.jobId,
          'ci.project.id': PROJECT,
          'ci.pipeline.id': String(job.pipelineId),
          'ci.runner.type': 'group_type',
        });
      }
    }
    // Error with GitLab's failure reason on the failed job and on the pipeline it failed.
    expect(named(spans, 'job', test.jobId)[0]).toMatchObject({
      statusCode: 2,
      statusMessage: 'script_failure',
      attributes: expect.objectContaining({ 'ci.job.status': 'failed' }),
    });
    expect(rootSpan).toMatchObject({ statusCode: 2, attributes: expect.objectContaining({ 'cicd.pipeline.result': 'failure' }) });
    expect(rootSpan.statusMessage).toContain('test-build: script_failure');
    expect(named(spans, 'job', build.jobId)[0].statusCode).toBe(0);

    // The child pipeline hangs on its trigger job, which hangs on the root pipeline.
    const [childSpan] = named(spans, 'pipeline').filter((span) => span.attributes['ci.pipeline.id'] === String(CHILD));
    const [bridge] = named(spans, 'bridge');
    expect(childSpan.parentSpanId).toBe(bridge.spanId);
    // Anyone holding the trace key recomputes every id.
    expect(bridge.spanId).toBe(hmacHex(service.secrets.traceKey, `job:${BRIDGE}`, 8));
    expect(rootSpan.spanId).toBe(hmacHex(service.secrets.traceKey, `pipeline-span:${ROOT}`, 8));
    expect(named(spans, 'queue_wait', build.jobId)[0].spanId).toBe(hmacHex(service.secrets.traceKey, `queue:${build.jobId}`, 8));
    expect(bridge.parentSpanId).toBe(rootSpan.spanId);
    expect(named(spans, 'job', unit.jobId)[0].parentSpanId).toBe(childSpan.spanId);
    expect(named(spans, 'job', build.jobId)[0].parentSpanId).toBe(rootSpan.spanId);
    // Jobs that never ran are not ours to tell of.
    expect(spans.filter((span) => [910_004, 910_005].includes(Number(span.attributes['ci.job.id'])))).toEqual([]);
    // Nothing the service emits claims to be the runner.
    expect(
      spans
        .filter((span) => span.resource['service.name'] === 'runner')
        .map((span) => span.name)
        .sort(),
    ).toEqual(jobs.flatMap(() => ['job_execution', ...BUILD_STAGES]).sort());
  }, 90_000);

  it('emits nothing for a pipeline the flag left off, nor for one never picked up', async () => {
    const { decorated } = await pickUp(service, { jobId: 920_001, pipelineId: 92_000, rootPipelineId: 92_000, waitedSeconds: 4, projectId: 66 });
    expect(decorated.telemetry).toEqual({ enabled: false, reason: 'flag_disabled' });
    const off = { id: 92_000, projectId: 66, status: 'success', createdAt: new Date(Date.now() - 60_000), finishedAt: new Date(), jobs: [] };
    const offJob: WebhookJob = {
      id: 920_001,
      name: 'build',
      stage: 'build',
      status: 'success',
      createdAt: off.createdAt,
      startedAt: off.createdAt,
      finishedAt: off.finishedAt,
    };
    const never = { ...off, id: 93_000, projectId: PROJECT, jobs: [{ ...offJob, id: 930_001 }] };
    const answers = [
      await hook('Pipeline Hook', pipelineHook({ ...off, jobs: [offJob] })),
      await hook('Job Hook', jobHook(off, offJob)),
      await hook('Pipeline Hook', pipelineHook(never)),
      await hook('Job Hook', jobHook(never, never.jobs[0])),
    ];
    for (const answer of answers) expect(answer).toMatchObject({ status: 200, body: { status: 'accepted', queued: 0 } });
    await outboxDrained(service);
    const untraced = sink.allSpans().filter((span) => ['92000', '93000'].includes(String(span.attributes['ci.pipeline.id'])));
    expect(untraced).toEqual([]);
  });

  it('answers GitLab as GitLab expects: 401 without the secret, 400 for bad JSON, 2xx for events it does not read', async () => {
    const body = pipelineHook({ id: 94_000, projectId: PROJECT, status: 'success', createdAt: new Date(), finishedAt: new Date(), jobs: [] });
    expect((await deliverWebhook(service.url, 'Pipeline Hook', body)).status).toBe(401);
    expect(await deliverWebhook(service.url, 'Pipeline Hook', body, { token: 'not-the-secret' })).toMatchObject({
      status: 401,
      body: { error: 'invalid X-Gitlab-Token' },
    });
    expect((await hook('Pipeline Hook', '{"object_kind": "pipeline",')).status).toBe(400);
    expect(await hook('Pipeline Hook', { object_kind: 'pipeline' })).toMatchObject({
      status: 400,
      body: { error: expect.stringContaining('object_attributes') },
    });
    expect(await deliverWebhook(service.url, 'Push Hook', { object_kind: 'push' }, { token: secret.secret })).toMatchObject({
      status: 200,
      body: { status: 'ignored' },
    });
    // The secret is never echoed or logged.
    expect(service.output()).not.toContain(secret.secret);
  });
});

describe('control-plane spans across a collector outage and a restart (SPEC §10 delivery)', () => {
  let sink: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let world: World;

  beforeAll(async () => {
    world = await startWorld({ redis: true, sink: true, webhookSecret: true, service: { OUTBOX_MAX_BACKOFF_SECONDS: '1' } });
    ({ sink, webhookSecret: secret, service } = world);
  }, 60_000);
  afterAll(() => world?.stop());

  it('answers webhooks at once while the collector is down, and delivers everything once after a restart', async () => {
    const PIPELINE = 95_000;
    const jobs = [
      (await pickUp(service, { jobId: 950_001, pipelineId: PIPELINE, rootPipelineId: PIPELINE, waitedSeconds: 7 })).picked,
      (await pickUp(service, { jobId: 950_002, pipelineId: PIPELINE, rootPipelineId: PIPELINE, waitedSeconds: 2 })).picked,
    ];
    for (const job of jobs) await runAsRunner(job, 'success', new Date(job.pickedUpBetween[1] + 1000));
    const traceId = jobs[0].tracing.trace_id;
    await waitFor('the runner spans and queue waits', async () => (spansOf(sink, traceId).length >= 2 * (1 + BUILD_STAGES.length) + 2 ? true : undefined));

    await sink.stop();
    const webhookJobs = jobs.map((job, i) => finished(job, `job-${i}`, 'test', 'success'));
    const pipeline = succeeded(PIPELINE, jobs[0], webhookJobs);
    const deliver = (event: 'Pipeline Hook' | 'Job Hook', body: unknown, uuid: string) =>
      deliverWebhook(service.url, event, body, { token: secret.secret, uuid });
    const answers = [
      await deliver('Pipeline Hook', pipelineHook(pipeline), 'p'),
      ...(await Promise.all(webhookJobs.map((job) => deliver('Job Hook', jobHook(pipeline, job), `j${job.id}`)))),
      await deliver('Pipeline Hook', pipelineHook(pipeline), 'p'),
    ];
    for (const answer of answers) expect(answer.status).toBe(200);
    // The pipeline span, the two job spans, and the job spans again with the critical path written on them.
    expect(answers.map((answer) => answer.body.queued)).toEqual([5, 0, 0, 0]);
    // The collector cannot be reached: the spans wait in the store, and the attempts are counted.
    await waitFor('a failed delivery', async () => ((await metric(service, 'ci_job_telemetry_outbox_delivery_failures_total')) > 0 ? true : undefined));
    expect(await metric(service, 'ci_job_telemetry_outbox_spans')).toBe(5);

    // The service restarts (same keys, same store) before the collector comes back, and a second replica
    // joins it: both deliver the one outbox.
    await service.stop();
    service = await world.startService({ OUTBOX_MAX_BACKOFF_SECONDS: '1' });
    const replica = await world.startService({ OUTBOX_MAX_BACKOFF_SECONDS: '1' });
    try {
      // A redelivery to either process is still recognised.
      expect((await deliver('Pipeline Hook', pipelineHook(pipeline), 'p')).body).toMatchObject({ queued: 0, duplicates: 5 });
      expect((await deliverWebhook(replica.url, 'Job Hook', jobHook(pipeline, webhookJobs[0]), { token: secret.secret })).body).toMatchObject({
        queued: 0,
        duplicates: 1,
      });
      await sink.start();
      await outboxDrained(service);
      await outboxDrained(replica);
    } finally {
      await replica.stop();
    }

    const spans = spansOf(sink, traceId);
    expect(traceShape(spans)).toEqual({ roots: [expect.stringMatching(/^pipeline /)], orphans: [], duplicates: [] });
    expect(spans).toHaveLength(2 * (1 + BUILD_STAGES.length) + 1 + 2 * 2 + 2);
  }, 90_000);
});

describe('control-plane spans through a collector that refuses, then recovers (issue 56 item 7)', () => {
  let redis: RedisServer;
  let collector: ScriptedCollector;
  let secret: WebhookSecret;
  let service: ServiceProcess | undefined;
  /** The job whose spans the collector cannot decode, whatever else a request carries. */
  const UNDECODABLE = 'undecodable-job';
  const taskOf = (span: DecodedSpan) => span.attributes?.find((attribute) => attribute.key === 'cicd.pipeline.task.name')?.value.stringValue;
  let answer: (spans: readonly DecodedSpan[]) => ScriptedAnswer = () => 500;

  beforeAll(async () => {
    [redis, collector] = await Promise.all([startRedis(), startScriptedCollector((_names, _request, spans) => answer(spans))]);
    secret = makeWebhookSecret();
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await collector?.stop();
    await redis?.stop();
  });

  const readiness = async () => {
    const response = await fetch(`${service!.url}/-/readiness`);
    return { status: response.status, checks: ((await response.json()) as { checks: Record<string, string> }).checks };
  };
  const failuresWith = (reason: string) =>
    waitFor(`a delivery answered ${reason}`, async () =>
      (await metric(service!, `ci_job_telemetry_outbox_delivery_failures_total{reason="${reason}"}`)) > 0 ? true : undefined,
    );

  it('keeps every span through 500, 401 and 404, splits on 413, drops only what it cannot decode on 400, and delivers the rest once each', async () => {
    service = await startService({
      REDIS_URL: redis.url,
      OTLP_UPSTREAM_URL: collector.url,
      GITLAB_WEBHOOK_SECRET_FILE: secret.file,
      OUTBOX_MAX_BACKOFF_SECONDS: '1',
    });
    const PIPELINE = 97_000;
    const jobs = [];
    for (const [i, waitedSeconds] of [5, 3, 1].entries())
      jobs.push((await pickUp(service, { jobId: 970_001 + i, pipelineId: PIPELINE, rootPipelineId: PIPELINE, waitedSeconds })).picked);
    const queueWaits = jobs.length;

    // A collector failing (500): the queue waits stay in the outbox; readiness says so and stays ready.
    answer = () => 500;
    await failuresWith('500');
    expect(await metric(service, 'ci_job_telemetry_outbox_spans')).toBe(queueWaits);
    expect(await readiness()).toEqual({ status: 200, checks: expect.objectContaining({ outbox_delivery: 'degraded' }) });

    // GitLab's hooks come meanwhile: answered at once, their spans wait too.
    const webhookJobs = [
      finished(jobs[0], 'build', 'build', 'success'),
      finished(jobs[1], UNDECODABLE, 'test', 'success'),
      finished(jobs[2], 'deploy', 'deploy', 'success'),
    ];
    const pipeline = succeeded(PIPELINE, jobs[0], webhookJobs);
    const answers = [
      await deliverWebhook(service.url, 'Pipeline Hook', pipelineHook(pipeline), { token: secret.secret }),
      ...(await Promise.all(webhookJobs.map((job) => deliverWebhook(service!.url, 'Job Hook', jobHook(pipeline, job), { token: secret.secret })))),
    ];
    for (const delivered of answers) expect(delivered.status).toBe(200);
    const enqueued = queueWaits + answers.reduce((sum, delivered) => sum + (delivered.body.queued as number), 0);

    // Credentials rotated (401), then an ingress mid-deploy (404): still nothing given up.
    answer = () => 401;
    await failuresWith('401');
    answer = () => 404;
    await failuresWith('404');
    expect(await metric(service, 'ci_job_telemetry_outbox_spans')).toBe(enqueued);
    expect(collector.deliveredSpans).toEqual([]);

    // The collector is back, taking at most two spans a request (413 beyond), and cannot decode one job's spans (400).
    answer = (spans) => (spans.some((span) => taskOf(span) === UNDECODABLE) ? 400 : spans.length > 2 ? 413 : 'ok');
    await outboxDrained(service);
    await waitFor('readiness ready again', async () => ((await readiness()).checks.outbox_delivery === 'ok' ? true : undefined));

    const delivered = collector.deliveredSpans;
    const dropped = await metric(service, 'ci_job_telemetry_outbox_dropped_spans_total{status="400"}');
    // Every span once (a version of a span is a span of its own), none of the undecodable job's, and nothing else lost.
    expect(new Set(delivered.map((span) => JSON.stringify(span))).size).toBe(delivered.length);
    expect(delivered.filter((span) => taskOf(span) === UNDECODABLE)).toEqual([]);
    expect(dropped).toBeGreaterThan(0);
    expect(delivered.length + dropped).toBe(enqueued);
    expect(delivered.filter((span) => span.name === 'queue_wait')).toHaveLength(queueWaits);
    expect(await metric(service, 'ci_job_telemetry_outbox_dropped_spans_total{status="413"}')).toBe(0);
    // Each dropped span said once, with the collector's words; no job token in the log.
    expect(service.output().match(/alone with 400 \(cannot decode it: cannot decode span \w+\); dropped/g)).toHaveLength(dropped);
    expect(service.output()).not.toContain('glcbt-job-');
  }, 90_000);
});

describe('a full outbox (SPEC §10)', () => {
  it('refuses new spans and says so in the answer, the metric, readiness and the log, and never stops a pickup', async () => {
    const secret = makeWebhookSecret();
    // Nothing listens there: every span stays in the outbox.
    const service = await startService({ OTLP_UPSTREAM_URL: 'http://127.0.0.1:9', GITLAB_WEBHOOK_SECRET_FILE: secret.file, OUTBOX_MAX_SPANS: '2' });
    try {
      const jobs = [];
      for (const jobId of [980_001, 980_002, 980_003]) {
        const { decorated, picked } = await pickUp(service, { jobId, pipelineId: 98_000, rootPipelineId: 98_000, waitedSeconds: 2 });
        expect(decorated.telemetry).toMatchObject({ enabled: true });
        jobs.push(picked);
      }
      const webhookJob = finished(jobs[0], 'build', 'build', 'success');
      const pipeline: WebhookPipeline = { id: 98_000, projectId: PROJECT, status: 'running', createdAt: jobs[0].queuedAt, jobs: [] };
      expect((await deliverWebhook(service.url, 'Job Hook', jobHook(pipeline, webhookJob), { token: secret.secret })).body).toEqual({
        status: 'accepted',
        queued: 0,
        duplicates: 0,
        refused: 1,
        parked: 0,
        dropped: 0,
      });
      await waitFor('readiness to say the outbox is full', async () => {
        const response = await fetch(`${service.url}/-/readiness`);
        const body = (await response.json()) as { checks: Record<string, string> };
        return response.status === 200 && body.checks.outbox === 'degraded' ? true : undefined;
      });
      expect(await metric(service, 'ci_job_telemetry_pipeline_spans_total{source="pickup",outcome="refused"}')).toBe(1);
      expect(await metric(service, 'ci_job_telemetry_pipeline_spans_total{source="job_hook",outcome="refused"}')).toBe(1);
      expect(service.output()).toContain('outbox full (OUTBOX_MAX_SPANS=2)');
    } finally {
      await service.stop();
    }
  }, 60_000);
});

describe('control-plane spans without webhooks, and in the gitlab scheme', () => {
  let sink: OtlpSink;
  beforeAll(async () => (sink = await startOtlpSink()));
  afterAll(() => sink?.stop());

  it("closes each job span from its runner's job_execution span when no webhook secret is configured", async () => {
    const service = await startService({ OTLP_UPSTREAM_URL: sink.url });
    try {
      const job = (await pickUp(service, { jobId: 960_001, pipelineId: 96_000, rootPipelineId: 96_000, waitedSeconds: 9 })).picked;
      const startedAt = new Date(job.pickedUpBetween[1] + 1000);
      await runAsRunner(job, 'failed', startedAt);
      const spans = await waitFor('the job span', async () => {
        const received = spansOf(sink, job.tracing.trace_id);
        return named(received, 'job').length > 0 && named(received, 'queue_wait').length > 0 && named(received, 'pipeline').length > 0 ? received : undefined;
      });
      const [jobSpan] = named(spans, 'job');
      const [execution] = named(spans, 'job_execution');
      // A connected job subtree: queue wait and the runner's spans under the job span, which ends with the runner's.
      expect(jobSpan.spanId).toBe(job.tracing.span_parent_id);
      expect(execution.parentSpanId).toBe(jobSpan.spanId);
      expect(named(spans, 'queue_wait')[0].parentSpanId).toBe(jobSpan.spanId);
      expect(jobSpan.endNanos).toBe(execution.endNanos);
      expect(jobSpan).toMatchObject({ statusCode: 2, attributes: expect.objectContaining({ 'ci.job.status': 'failed' }) });
      // And the trace its root (issue 27): a pipeline span drawn from the jobs its runners reported, no orphan.
      const [pipeline] = named(spans, 'pipeline');
      expect(jobSpan.parentSpanId).toBe(pipeline.spanId);
      expect(pipeline).toMatchObject({ parentSpanId: '', startNanos: jobSpan.startNanos, endNanos: jobSpan.endNanos, statusCode: 2 });
      expect(traceShape(spans).orphans).toEqual([]);
      // No webhook is accepted without a secret.
      expect(await deliverWebhook(service.url, 'Pipeline Hook', {}, { token: 'anything' })).toMatchObject({
        status: 401,
        body: { error: expect.stringContaining('GITLAB_WEBHOOK_SECRET_FILE') },
      });
    } finally {
      await service.stop();
    }
  }, 60_000);

  it('emits only the root pipeline span in the gitlab scheme, with the id Rails gives its phantom parent', async () => {
    const secret = makeWebhookSecret();
    const service = await startService({ OTLP_UPSTREAM_URL: sink.url, TRACE_ID_SCHEME: 'gitlab', GITLAB_WEBHOOK_SECRET_FILE: secret.file });
    try {
      const ROOT = 97_000;
      const job = (await pickUp(service, { jobId: 970_001, pipelineId: ROOT, rootPipelineId: ROOT, waitedSeconds: 3 })).picked;
      const traceId = ROOT.toString(16).padStart(32, '0');
      expect(job.tracing.trace_id).toBe(traceId);
      const webhookJob = finished(job, 'build', 'build', 'success');
      const pipeline: WebhookPipeline = {
        id: ROOT,
        projectId: PROJECT,
        status: 'success',
        createdAt: job.queuedAt,
        finishedAt: new Date(),
        jobs: [webhookJob],
      };
      await deliverWebhook(service.url, 'Job Hook', jobHook(pipeline, webhookJob), { token: secret.secret });
      await deliverWebhook(service.url, 'Pipeline Hook', pipelineHook(pipeline), { token: secret.secret });
      const [span] = await waitFor('the pipeline span', async () => {
        const received = spansOf(sink, traceId);
        return received.length > 0 ? received : undefined;
      });
      expect(span).toMatchObject({
        name: 'pipeline',
        parentSpanId: '',
        traceState: '',
        spanId: createHash('sha256').update(`pipeline:${ROOT}`).digest('hex').slice(0, 16),
      });
      await outboxDrained(service);
      expect(spansOf(sink, traceId)).toHaveLength(1);
    } finally {
      await service.stop();
    }
  }, 60_000);
});
