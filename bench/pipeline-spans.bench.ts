/**
 * What SPEC §10 promises GitLab and users, measured from outside on the built service with real Redis:
 *  - how fast a GitLab Job Hook is answered (GitLab disables webhooks that time out), with the collector
 *    up and with it down, beside `GET /-/liveness` of the same process in the same run (the floor of any
 *    answer on that port);
 *  - the outbox delay: from the webhook's answer to its job span reaching the collector;
 *  - how fast a Pipeline Hook is answered, running then ended, for each of the jobs' pipelines: where the CI/CD
 *    metrics (issue 59) record a run's states. Run this file from another checkout (copied there) to compare
 *    revisions: the service it starts is that checkout's build.
 *
 * Run (needs redis-server on PATH; the runner builds the service first):
 *
 *   npm run bench -- pipeline-spans        (--smoke: a few jobs, to check it still works; no verdict)
 *
 * Webhooks are sent one at a time, as one GitLab instance's hook worker does for one hook. Only ratios
 * within one run mean anything on a shared machine.
 */
import { deliverWebhook, jobHook, pipelineHook, WebhookPipeline } from '../simulator/gitlab-webhooks';
import { jobPayloadRequest } from '../test/fixtures/job-payload';
import { pickUpJob } from '../test/helpers/ci-job';
import { waitFor } from '../test/helpers/ports';
import { startWorld } from '../test/helpers/world';
import { percentile } from './lib/percentiles';
import { printTable } from './lib/table';
import { runBench } from './lib/bench-env';

const SMOKE = process.argv.includes('--smoke');
const JOBS = SMOKE ? 20 : 600;
const PROJECT = 7;

async function main(): Promise<void> {
  const world = await startWorld({ redis: true, sink: true, webhookSecret: true, service: { LOG_LEVEL: 'warn' } });
  const { sink, webhookSecret: secret, service } = world;
  try {
    const pipelineOf = (jobId: number): WebhookPipeline => ({
      id: Math.floor(jobId / 4),
      projectId: PROJECT,
      status: 'running',
      createdAt: new Date(Date.now() - 60_000),
      jobs: [],
    });
    const pickUp = async (jobId: number) => {
      const pipelineId = Math.floor(jobId / 4);
      const { telemetry } = await pickUpJob(
        service,
        jobPayloadRequest({ job: { id: jobId, pipeline_id: pipelineId, root_pipeline_id: pipelineId, queued_at: new Date(Date.now() - 5000).toISOString() } }),
      );
      if (!telemetry.enabled) throw new Error(`job ${jobId} not enabled: ${telemetry.reason}`);
    };
    const finishedHook = (jobId: number) => {
      const now = Date.now();
      return jobHook(pipelineOf(jobId), {
        id: jobId,
        name: 'rspec',
        stage: 'test',
        status: 'success',
        createdAt: new Date(now - 60_000),
        startedAt: new Date(now - 30_000),
        finishedAt: new Date(now),
        queuedSeconds: 5.25,
        runner: { id: 17, runnerType: 'project_type', description: 'bench' },
      });
    };
    const liveness = async () => {
      const started = performance.now();
      await (await fetch(`${service.url}/-/liveness`)).text();
      return performance.now() - started;
    };

    /** Interleaves one webhook and one liveness call per job, so both see the same machine. */
    const run = async (firstJob: number) => {
      const webhook: number[] = [];
      const floor: number[] = [];
      const answeredAt = new Map<string, number>();
      for (let jobId = firstJob; jobId < firstJob + JOBS; jobId++) {
        const answer = await deliverWebhook(service.url, 'Job Hook', finishedHook(jobId), { token: secret.secret });
        if (answer.status !== 200 || answer.body.queued !== 1)
          throw new Error(`job ${jobId}: webhook answered ${answer.status} ${JSON.stringify(answer.body)}`);
        webhook.push(answer.elapsedMs);
        answeredAt.set(String(jobId), Date.now());
        floor.push(await liveness());
      }
      return { webhook, floor, answeredAt };
    };

    for (let jobId = 100_000; jobId < 100_000 + 2 * JOBS; jobId++) await pickUp(jobId);
    // Warm-up: the queue waits enqueued at pickup reach the collector first.
    await waitFor(
      'the queue waits',
      async () => (sink.controlPlaneSpans().filter((span) => span.name === 'queue_wait').length >= 2 * JOBS ? true : undefined),
      60_000,
    );

    const up = await run(100_000);
    const jobSpans = () =>
      sink.controlPlaneExports.flatMap((received) => received.spans.filter((span) => span.name === 'job').map((span) => ({ span, at: received.receivedAt })));
    await waitFor('every job span', async () => (jobSpans().length >= JOBS ? true : undefined), 60_000);
    const delay = jobSpans().map(({ span, at }) => at - up.answeredAt.get(String(span.attributes['ci.job.id']))!);

    await sink.stop();
    const down = await run(100_000 + JOBS);
    await sink.start();
    await waitFor('every job span after the outage', async () => (jobSpans().length >= 2 * JOBS ? true : undefined), 120_000);

    // Pipeline Hooks: each pipeline of the jobs above running, then its end, each answer beside a liveness call.
    const pipelineHooks = { running: [] as number[], ended: [] as number[], floor: [] as number[] };
    const firstPipeline = Math.floor(100_000 / 4);
    for (let pipelineId = firstPipeline; pipelineId < firstPipeline + (2 * JOBS) / 4; pipelineId++) {
      const createdAt = new Date(Date.now() - 120_000);
      for (const status of ['running', pipelineId % 10 === 0 ? 'failed' : 'success'] as const) {
        const ended = status !== 'running';
        const body = pipelineHook({ id: pipelineId, projectId: PROJECT, status, createdAt, ...(ended ? { finishedAt: new Date() } : {}), jobs: [] });
        const answer = await deliverWebhook(service.url, 'Pipeline Hook', body, { token: secret.secret });
        if (answer.status !== 200) throw new Error(`pipeline ${pipelineId}: webhook answered ${answer.status} ${JSON.stringify(answer.body)}`);
        pipelineHooks[ended ? 'ended' : 'running'].push(answer.elapsedMs);
        pipelineHooks.floor.push(await liveness());
      }
    }

    const row = (name: string, samples: number[]) => [name, ...[50, 95, 99].map((p) => percentile(samples, p).toFixed(2))];
    const ratio = (name: string, samples: number[], floor: number[]) => [
      name,
      ...[50, 95, 99].map((p) => (percentile(samples, p) / percentile(floor, p)).toFixed(2)),
    ];
    console.log(
      `${JOBS} Job Hooks with the collector up, ${JOBS} with it down, then ${(2 * JOBS) / 4} Pipeline Hooks running and as many ended; Redis store; one at a time`,
    );
    printTable([
      ['ms', 'p50', 'p95', 'p99'],
      row('webhook answer, collector up', up.webhook),
      row('webhook answer, collector down', down.webhook),
      row('GET /-/liveness (floor)', [...up.floor, ...down.floor]),
      row('outbox delay, answer → collector', delay),
      row('Pipeline Hook answer, running', pipelineHooks.running),
      row('Pipeline Hook answer, ended', pipelineHooks.ended),
      row('GET /-/liveness beside them (floor)', pipelineHooks.floor),
    ]);
    console.log();
    printTable([
      ['ratio to the floor', 'p50', 'p95', 'p99'],
      ratio('webhook answer, collector up', up.webhook, up.floor),
      ratio('webhook answer, collector down', down.webhook, down.floor),
      ratio('Pipeline Hook answer, running', pipelineHooks.running, pipelineHooks.floor),
      ratio('Pipeline Hook answer, ended', pipelineHooks.ended, pipelineHooks.floor),
    ]);
    if (SMOKE) console.log('smoke run: no verdict');
  } finally {
    await world.stop();
  }
}

runBench(main);
