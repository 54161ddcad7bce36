import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signInternalApiToken } from '../src/internal-api/internal-api-token';
import { deliverWebhook, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from './gitlab-webhooks';
import { startLocalCollector } from './local-collector';
import { repoRoot } from './repo-root';
import { BUILD_STAGES, BuildStage, exportJobAsRunner, RunnerJob, TracingFeature } from './stock-runner';
import { formatDuration, latestVersions, renderWaterfall } from '../src/cli/waterfall';

const ROOT = repoRoot();
const PROJECT_ID = 7;
const PIPELINE_ID = 500;
const RUNNER = { id: 17, runner_type: 'project_type', token: 'glrt-demo-runner-token', features: { tracing: true } };
const RUNNER_DESCRIPTION = 'demo shell runner';
const WEBHOOK_SECRET = 'demo-webhook-secret';

/**
 * A three-job pipeline whose jobs run side by side (`needs: []`): how long each waited in the queue before
 * the runner picked it up, and what each build stage took (seconds).
 */
const PIPELINE: ReadonlyArray<{ jobId: number; name: string; stage: string; queuedSeconds: number; stageSeconds: Record<BuildStage, number> }> = [
  {
    jobId: 1001,
    name: 'build',
    stage: 'build',
    queuedSeconds: 14,
    stageSeconds: { prepare_executor: 4, get_sources: 3, restore_cache: 6, step_script: 48, after_script: 1, archive_cache: 5, upload_artifacts: 3 },
  },
  {
    jobId: 1002,
    name: 'test',
    stage: 'test',
    queuedSeconds: 12,
    stageSeconds: { prepare_executor: 4, get_sources: 2, restore_cache: 7, step_script: 95, after_script: 1, archive_cache: 2, upload_artifacts: 4 },
  },
  {
    jobId: 1003,
    name: 'lint',
    stage: 'test',
    queuedSeconds: 9,
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 1, step_script: 21, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
  },
];

/**
 * The demo's timeline, in seconds from the pickup (the one moment that is real: the decorator stamps it).
 * The pipeline was created before its jobs were queued; each runner starts its job a second after picking
 * it up; GitLab marks a job finished a second after the runner's last stage, and the pipeline a second
 * after its last job.
 */
const PIPELINE_CREATED = -15;
const RUNNER_STARTS = 1;
const GITLAB_SEES_THE_END = 1;
/** How much earlier than the timeline's pickup the decorator is called (see main). */
const PICKUP_EARLY_MS = 250;

const spanCount = (count: number) => `${count} span${count === 1 ? '' : 's'}`;

const say = (line = '') => process.stdout.write(`${line}\n`);

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no free port'))));
    });
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface Decorated {
  readonly payload: { features?: { tracing?: TracingFeature }; variables?: Array<{ key: string; value: string }> };
  readonly telemetry: { enabled: boolean; reason: string; trace_id?: string };
}

/** A job picked up through the decorator: its `features.tracing`, and its payload's variables. */
interface PickedUp {
  readonly tracing: TracingFeature;
  readonly variable: (key: string) => string;
}

/** What GitLab's job-request API does when a runner picks a job up: the job, queued at `queuedAt`, through the decorator. */
async function pickUp(
  internalUrl: string,
  internalApiSecret: Buffer,
  jobId: number,
  name: string,
  queuedAt: Date,
  pipelineId = PIPELINE_ID,
): Promise<PickedUp> {
  const response = await fetch(`${internalUrl}/internal/ci/telemetry/job_payload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'gitlab-ci-telemetry-api-request': await signInternalApiToken(internalApiSecret, 'gitlab') },
    body: JSON.stringify({
      runner: RUNNER,
      job: {
        id: jobId,
        project_id: PROJECT_ID,
        pipeline_id: pipelineId,
        root_pipeline_id: pipelineId,
        timeout: 3600,
        token: `glcbt-demo-${jobId}`,
        queued_at: queuedAt.toISOString(),
      },
      payload: {
        id: jobId,
        token: `glcbt-demo-${jobId}`,
        variables: [
          { key: 'CI_JOB_NAME', value: name, public: true },
          { key: 'CI_PIPELINE_ID', value: String(pipelineId), public: true },
          { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
        ],
        features: { trace_sections: true },
      },
    }),
  });
  if (response.status !== 200) throw new Error(`job ${jobId}: the decorator answered ${response.status}: ${await response.text()}`);
  const decorated = (await response.json()) as Decorated;
  const tracing = decorated.payload.features?.tracing;
  if (!decorated.telemetry.enabled || tracing === undefined) throw new Error(`job ${jobId}: telemetry not enabled (${decorated.telemetry.reason})`);
  return { tracing, variable: (key) => decorated.payload.variables?.find((entry) => entry.key === key)?.value ?? '' };
}

/** The next whole second at which a pickup can be stamped (see main), not before `notBefore`; waits until just before it. */
async function pickupMoment(notBefore = 0): Promise<number> {
  const pickup = Math.max(notBefore, Math.ceil((Date.now() + PICKUP_EARLY_MS + 1) / 1000) * 1000);
  while (Date.now() < pickup - PICKUP_EARLY_MS) await new Promise((resolve) => setTimeout(resolve, Math.max(1, pickup - PICKUP_EARLY_MS - Date.now())));
  return pickup;
}

const RETRIED_PIPELINE_ID = 501;
/** Short jobs, so that the retry is picked up a few real seconds after the failure. */
const quickStages = (script: number): Record<BuildStage, number> => ({
  prepare_executor: 0.25,
  get_sources: 0.25,
  restore_cache: 0.25,
  step_script: script,
  after_script: 0.25,
  archive_cache: 0.25,
  upload_artifacts: 0.25,
});

/**
 * The second pipeline: its `test` job fails, the pipeline with it; someone retries it (GitLab makes a new
 * job, same name, `retries_count` 1, and puts the pipeline back to running), the retry passes, and the
 * pipeline finishes again, `success`. Its span is sent again, same id, as a newer version (SPEC §10);
 * printed is the final picture, each span in its latest version.
 */
async function retriedPipeline(demo: {
  internalUrl: string;
  internalApiSecret: Buffer;
  collector: Awaited<ReturnType<typeof startLocalCollector>>;
  deliver: (what: string, event: 'Job Hook' | 'Pipeline Hook', body: Record<string, unknown>) => Promise<void>;
}): Promise<void> {
  say();
  say(`Then a flaky test: pipeline ${RETRIED_PIPELINE_ID}'s test job fails, is retried, and passes.`);
  say();
  const pickup = await pickupMoment();
  const at = (seconds: number) => new Date(pickup + seconds * 1000);
  const runner = { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER_DESCRIPTION };
  const run = async (jobId: number, name: string, status: 'success' | 'failed', queuedAt: Date, script: number, retriesCount = 0): Promise<WebhookJob> => {
    const picked = await pickUp(demo.internalUrl, demo.internalApiSecret, jobId, name, queuedAt, RETRIED_PIPELINE_ID);
    const startedAt = new Date(Math.round(Date.now() / 1000) * 1000);
    const stages = quickStages(script);
    await exportJobAsRunner(picked.tracing, {
      jobId,
      projectId: PROJECT_ID,
      runnerId: RUNNER.id,
      pipelineId: picked.variable('CI_PIPELINE_ID'),
      pipelineSource: picked.variable('CI_PIPELINE_SOURCE'),
      executor: 'shell',
      status,
      startedAt,
      stageSeconds: stages,
    });
    const seconds = BUILD_STAGES.reduce((sum, stage) => sum + stages[stage], 0);
    return {
      id: jobId,
      name,
      stage: name,
      status,
      createdAt: queuedAt,
      startedAt,
      finishedAt: new Date(startedAt.getTime() + seconds * 1000),
      queuedSeconds: (pickup - queuedAt.getTime()) / 1000,
      retriesCount,
      runner,
      ...(status === 'failed' ? { failureReason: 'script_failure' } : {}),
    };
  };
  // GitLab marks the pipeline finished on the whole second after its last job, as Pipeline Hooks write times.
  const pipeline = (status: string, jobs: WebhookJob[], lastJobEnd?: Date): WebhookPipeline => ({
    id: RETRIED_PIPELINE_ID,
    projectId: PROJECT_ID,
    status,
    createdAt: at(-2),
    finishedAt: lastJobEnd === undefined ? undefined : new Date(Math.ceil(lastJobEnd.getTime() / 1000 + GITLAB_SEES_THE_END) * 1000),
    jobs,
  });

  const [build, test] = await Promise.all([run(2001, 'build', 'success', at(-2), 2), run(2002, 'test', 'failed', at(-2), 1)]);
  for (const job of [test, build])
    await demo.deliver(`job ${job.id} (${job.name}) ${job.status}`, 'Job Hook', jobHook(pipeline('running', [build, test]), job));
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} failed`, 'Pipeline Hook', pipelineHook(pipeline('failed', [build, test], build.finishedAt)));

  // Retried when the pipeline had failed: a new job, queued then, picked up a second later.
  const retryQueued = build.finishedAt!;
  await pickupMoment(retryQueued.getTime() + 1000);
  const running = { ...test, id: 2003, status: 'running', createdAt: retryQueued, startedAt: undefined, finishedAt: undefined, retriesCount: 1 };
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} running again`, 'Pipeline Hook', pipelineHook(pipeline('running', [build, running])));
  const retry = await run(2003, 'test', 'success', retryQueued, 1, 1);
  await demo.deliver(`job ${retry.id} (${retry.name}, retry 1) ${retry.status}`, 'Job Hook', jobHook(pipeline('running', [build, retry]), retry));
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} success`, 'Pipeline Hook', pipelineHook(pipeline('success', [build, retry], retry.finishedAt)));

  // Two versions of the pipeline span: 8 of the runners' spans, a job and a queue_wait span per job.
  const traceOf = demo.collector.spans.find((span) => span.attributes['ci.job.id'] === 2001)?.traceId ?? '';
  const expected = 3 * (1 + BUILD_STAGES.length) + 2 * 3 + 2;
  const inTrace = () => demo.collector.spans.filter((span) => span.traceId === traceOf);
  await until(`${expected} spans of pipeline ${RETRIED_PIPELINE_ID} at the collector`, () => (inTrace().length >= expected ? true : undefined));
  const versions = inTrace()
    .filter((span) => span.name === 'pipeline')
    .sort((a, b) => Number(a.attributes['ci.pipeline.span.version']) - Number(b.attributes['ci.pipeline.span.version']));
  const spans = latestVersions(inTrace());
  const first = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
  const last = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
  say();
  say(
    `pipeline ${RETRIED_PIPELINE_ID}'s span reached the collector ${versions.length} times, one span id, each a newer version: ${versions.map((span) => span.attributes['ci.pipeline.status']).join(', then ')}`,
  );
  say(
    `pipeline ${RETRIED_PIPELINE_ID} of project ${PROJECT_ID}, final picture: trace ${traceOf}, 3 jobs (test twice), ${spans.length} spans, ${formatDuration(last - first)}`,
  );
  say();
  for (const line of renderWaterfall(spans)) say(line);
}

async function main(): Promise<void> {
  const entry = join(ROOT, 'dist', 'main.js');
  if (!existsSync(entry)) throw new Error('dist/main.js is missing: run `npm run demo`, which builds it first');

  // The service runs on its embedded defaults (in-memory store, the flag file, secrets generated on
  // first start) in a scratch directory, so the demo leaves nothing behind in the clone.
  const workDir = mkdtempSync(join(tmpdir(), 'ci-job-telemetry-demo-'));
  // GitLab's webhooks close the job and pipeline spans (SPEC §10): the secret their X-Gitlab-Token carries.
  const webhookSecretFile = join(workDir, 'gitlab_webhook_secret');
  writeFileSync(webhookSecretFile, `${WEBHOOK_SECRET}\n`, { mode: 0o600 });
  const collector = await startLocalCollector();
  const [internalPort, gatewayPort] = [await freePort(), await freePort()];
  const gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
  let output = '';
  const service: ChildProcess = spawn(process.execPath, [entry], {
    cwd: workDir,
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      INTERNAL_PORT: String(internalPort),
      GATEWAY_PORT: String(gatewayPort),
      GATEWAY_PUBLIC_URL: gatewayUrl,
      OTLP_UPSTREAM_URL: collector.url,
      GITLAB_WEBHOOK_SECRET_FILE: webhookSecretFile,
      FLAGS_FILE: join(ROOT, 'config', 'flags.json'),
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  service.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  service.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const internalUrl = `http://127.0.0.1:${internalPort}`;

  try {
    await until('the service to be ready', async () => {
      if (service.exitCode !== null) throw new Error(`the service exited with ${service.exitCode}:\n${output}`);
      return (await fetch(`${internalUrl}/-/readiness`)).status === 200 ? true : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}\n${output}`);
    });
    const internalApiSecret = Buffer.from(readFileSync(join(workDir, '.secrets', 'internal_api_secret'), 'utf8').trim(), 'base64');
    say(`ci-job-telemetry on ${internalUrl} (internal API) and ${gatewayUrl} (OTLP gateway); local collector on ${collector.url}`);
    say();

    // The timeline counts from a whole second, so that the Pipeline Hook's times (GitLab writes them to the
    // second) fall exactly on it and every duration printed is the same on every run. The decorator stamps
    // the pickup as it answers, tens to hundreds of milliseconds after it is called: called a quarter second
    // before that second, a pickup taking up to 750 ms lands within half a second of it, so each queue wait,
    // printed to the second, reads as planned.
    const pickup = await pickupMoment();
    const at = (seconds: number) => new Date(pickup + seconds * 1000);
    const runSeconds = (job: (typeof PIPELINE)[number]) => BUILD_STAGES.reduce((sum, stage) => sum + job.stageSeconds[stage], 0);

    // The runners pick the three jobs up together, each after its own wait in the queue (`queued_at`).
    const decorated = await Promise.all(PIPELINE.map((job) => pickUp(internalUrl, internalApiSecret, job.jobId, job.name, at(-job.queuedSeconds))));
    const traceId = decorated[0].tracing.trace_id;
    for (const [i, job] of PIPELINE.entries()) {
      const { tracing } = decorated[i];
      // The endpoint URL carries the job's capability, a credential: shown without it.
      const shownUrl = (tracing.otel_endpoints?.[0]?.url ?? '').replace(/\/jobs\/(\d+)\/[^/]+\//, '/jobs/$1/…/');
      say(
        `job ${job.jobId} (${job.name}) picked up after ${job.queuedSeconds}s in the queue: trace ${tracing.trace_id}, parent span ${tracing.span_parent_id}, export to ${shownUrl}`,
      );
    }

    // Each runner runs its job and exports it as a stock GitLab Runner does, to its job's capability URL.
    await Promise.all(
      PIPELINE.map((job, i) =>
        exportJobAsRunner(decorated[i].tracing, {
          jobId: job.jobId,
          projectId: PROJECT_ID,
          runnerId: RUNNER.id,
          pipelineId: decorated[i].variable('CI_PIPELINE_ID'),
          pipelineSource: decorated[i].variable('CI_PIPELINE_SOURCE'),
          executor: 'shell',
          status: 'success',
          startedAt: at(RUNNER_STARTS),
          stageSeconds: job.stageSeconds,
        } satisfies RunnerJob),
      ),
    );

    // GitLab tells of each job's end (Job Hook) as it finishes, then of the pipeline's (Pipeline Hook). The
    // runners' spans above are stamped with the timeline's times, not run for real, so the demo delivers
    // the webhooks at once rather than two minutes from now, with the same times.
    const jobs: WebhookJob[] = PIPELINE.map((job) => ({
      id: job.jobId,
      name: job.name,
      stage: job.stage,
      status: 'success',
      createdAt: at(PIPELINE_CREATED),
      startedAt: at(0),
      finishedAt: at(RUNNER_STARTS + runSeconds(job) + GITLAB_SEES_THE_END),
      queuedSeconds: job.queuedSeconds,
      runner: { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER_DESCRIPTION },
    }));
    const lastJobEnd = Math.max(...jobs.map((job) => job.finishedAt!.getTime()));
    const pipeline: WebhookPipeline = {
      id: PIPELINE_ID,
      projectId: PROJECT_ID,
      status: 'success',
      createdAt: at(PIPELINE_CREATED),
      finishedAt: new Date(lastJobEnd + GITLAB_SEES_THE_END * 1000),
      jobs,
    };
    const deliver = async (what: string, event: 'Job Hook' | 'Pipeline Hook', body: Record<string, unknown>) => {
      const answer = await deliverWebhook(internalUrl, event, body, { token: WEBHOOK_SECRET });
      if (answer.status !== 200 || answer.body.status !== 'accepted')
        throw new Error(`${what}: the service answered ${answer.status} ${JSON.stringify(answer.body)}`);
      const { queued, duplicates } = answer.body as { queued: number; duplicates: number };
      // A Pipeline Hook lists its finished jobs again: their spans, sent from the Job Hooks, are dropped as duplicates.
      const dropped = duplicates > 0 ? `, ${duplicates} duplicate${duplicates === 1 ? '' : 's'} dropped` : '';
      say(`GitLab ${event} for ${what}: accepted, ${spanCount(queued)} queued${dropped}`);
    };
    say();
    for (const job of [...jobs].sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime())) {
      await deliver(`job ${job.id} (${job.name}) ${job.status}`, 'Job Hook', jobHook({ ...pipeline, status: 'running', finishedAt: undefined }, job));
    }
    await deliver(`pipeline ${PIPELINE_ID} ${pipeline.status}`, 'Pipeline Hook', pipelineHook(pipeline));

    // The runners' spans, and the control plane's: a pipeline span, and a job and a queue_wait span per job.
    const expected = PIPELINE.length * (1 + BUILD_STAGES.length) + 1 + 2 * PIPELINE.length;
    const inTrace = () => collector.spans.filter((span) => span.traceId === traceId);
    await until(`${expected} spans at the collector`, () => (inTrace().length >= expected ? true : undefined), 15_000).catch(() => {
      const received = inTrace().map((span) => span.name);
      throw new Error(`the collector received ${received.length} of ${expected} spans (${received.join(', ')})\n${output}`);
    });

    const spans = inTrace();
    const first = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
    const last = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
    say();
    say(`pipeline ${PIPELINE_ID} of project ${PROJECT_ID}: trace ${traceId}, ${PIPELINE.length} jobs, ${spans.length} spans, ${formatDuration(last - first)}`);
    say();
    for (const line of renderWaterfall(spans)) say(line);

    await retriedPipeline({ internalUrl, internalApiSecret, collector, deliver });
  } finally {
    if (service.exitCode === null) service.kill('SIGTERM');
    await new Promise((resolve) => (service.exitCode !== null ? resolve(undefined) : service.once('exit', resolve)));
    await collector.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`demo failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
