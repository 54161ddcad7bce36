import { BUILD_STAGES, BuildStage, exportJobAsRunner } from '../../simulator/stock-runner';
import { deliverWebhook, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from '../../simulator/gitlab-webhooks';
import { pickUpPipelineJob, PickedUpJob } from './ci-pipeline';
import { OtelTracesRow, otelTracesRows } from './clickhouse-exporter';
import { WebhookSecret } from './gitlab-webhooks';
import type { OtlpSink } from './otlp-sink';
import { waitFor } from './ports';
import type { ServiceProcess } from './service';

/**
 * Pipelines as users see them in ClickHouse: run for real through the service (the decorator's pickups,
 * each job exported as a stock runner through the gateway, GitLab's Job and Pipeline Hooks), so that
 * otel_traces gets exactly the rows the Collector's exporter would write for the runner's spans and the
 * control plane's own (pipeline, job, queue_wait). For the view's and the dashboard's tests.
 */

export interface PlannedJob {
  readonly jobId: number;
  readonly name: string;
  readonly runnerId: number;
  readonly runnerType: 'instance_type' | 'group_type' | 'project_type';
  /** How long the job waits for a runner: its `queued_at` is this long before its pickup. */
  readonly queuedSeconds: number;
  /** Its step_script stage; the other build stages take {@link stageSeconds}. */
  readonly scriptSeconds: number;
  readonly status: 'success' | 'failed';
}

export interface PlannedPipeline {
  readonly pipelineId: number;
  readonly projectId: number;
  readonly status: 'success' | 'failed';
  /** Whole seconds, as Pipeline Hooks write times. */
  readonly createdAt: Date;
  readonly finishedAt: Date;
  readonly jobs: readonly PlannedJob[];
}

/** What the run made of one job. */
export interface RunJob {
  readonly planned: PlannedJob;
  readonly pipeline: PlannedPipeline;
  readonly picked: PickedUpJob;
  readonly queuedAt: Date;
  /** The decorator picked the job up between these two instants (epoch ms): its queue wait is within. */
  readonly pickedUpBetween: readonly [number, number];
  readonly startedAt: Date;
  readonly finishedAt: Date;
}

export interface PipelinesRun {
  readonly jobs: readonly RunJob[];
  /** The otel_traces rows of every trace export the collector received, runner's and control plane's. */
  readonly rows: OtelTracesRow[];
}

export const stageSeconds = (script: number): Record<BuildStage, number> => ({
  prepare_executor: 3,
  get_sources: 2,
  restore_cache: 4,
  step_script: script,
  after_script: 1,
  archive_cache: 2,
  upload_artifacts: 1,
});

const totalSeconds = (script: number) => BUILD_STAGES.reduce((sum, stage) => sum + stageSeconds(script)[stage], 0);

function webhookJob(run: RunJob): WebhookJob {
  return {
    id: run.planned.jobId,
    name: run.planned.name,
    stage: 'test',
    status: run.planned.status,
    createdAt: run.queuedAt,
    startedAt: run.startedAt,
    finishedAt: run.finishedAt,
    queuedSeconds: run.planned.queuedSeconds,
    ...(run.planned.status === 'failed' ? { failureReason: 'script_failure' } : {}),
    runner: { id: run.planned.runnerId, runnerType: run.planned.runnerType, description: `${run.planned.runnerType}-runner-${run.planned.runnerId}` },
  };
}

/**
 * Runs the pipelines: every job picked up `queuedSeconds` after its `queued_at`, exported as a stock
 * runner starting at its pickup, then its Job Hook; then each Pipeline Hook, finished. Waits until the
 * collector has every span: the runner's (job_execution and its stages) and, per job, `job` and
 * `queue_wait`, per pipeline `pipeline`.
 */
export async function runPipelines(
  service: ServiceProcess,
  sink: OtlpSink,
  secret: WebhookSecret,
  pipelines: readonly PlannedPipeline[],
): Promise<PipelinesRun> {
  const jobs: RunJob[] = [];
  for (const pipeline of pipelines) {
    for (const planned of pipeline.jobs) {
      const before = Date.now();
      const queuedAt = new Date(before - planned.queuedSeconds * 1000);
      const picked = await pickUpPipelineJob(service, {
        jobId: planned.jobId,
        projectId: pipeline.projectId,
        pipelineId: pipeline.pipelineId,
        runnerId: planned.runnerId,
        runnerType: planned.runnerType,
        queuedAt,
      });
      const after = Date.now();
      const startedAt = new Date(after);
      jobs.push({
        planned,
        pipeline,
        picked,
        queuedAt,
        pickedUpBetween: [before, after],
        startedAt,
        finishedAt: new Date(after + totalSeconds(planned.scriptSeconds) * 1000),
      });
    }
  }
  for (const run of jobs) {
    await exportJobAsRunner(run.picked.tracing, {
      jobId: run.planned.jobId,
      projectId: run.pipeline.projectId,
      runnerId: run.planned.runnerId,
      pipelineId: run.picked.pipelineVariable,
      pipelineSource: 'push',
      executor: 'shell',
      status: run.planned.status,
      startedAt: run.startedAt,
      stageSeconds: stageSeconds(run.planned.scriptSeconds),
    });
  }
  const hookOf = (pipeline: PlannedPipeline): WebhookPipeline => ({
    id: pipeline.pipelineId,
    projectId: pipeline.projectId,
    status: pipeline.status,
    createdAt: pipeline.createdAt,
    finishedAt: pipeline.finishedAt,
    jobs: jobs.filter((run) => run.pipeline === pipeline).map(webhookJob),
  });
  for (const run of jobs) {
    const delivered = await deliverWebhook(service.url, 'Job Hook', jobHook(hookOf(run.pipeline), webhookJob(run)), { token: secret.secret });
    if (delivered.status !== 200) throw new Error(`Job Hook of job ${run.planned.jobId}: ${delivered.status} ${JSON.stringify(delivered.body)}`);
  }
  for (const pipeline of pipelines) {
    const delivered = await deliverWebhook(service.url, 'Pipeline Hook', pipelineHook(hookOf(pipeline)), { token: secret.secret });
    if (delivered.status !== 200) throw new Error(`Pipeline Hook of pipeline ${pipeline.pipelineId}: ${delivered.status} ${JSON.stringify(delivered.body)}`);
  }

  const expected = {
    runner: jobs.length * (1 + BUILD_STAGES.length),
    job: jobs.length,
    queue_wait: jobs.length,
    pipeline: pipelines.length,
  };
  const counts = () => {
    const spans = sink.allSpans();
    return {
      runner: spans.filter((span) => span.resource['service.name'] === 'runner').length,
      job: spans.filter((span) => span.name === 'job').length,
      queue_wait: spans.filter((span) => span.name === 'queue_wait').length,
      pipeline: spans.filter((span) => span.name === 'pipeline').length,
    };
  };
  await waitFor(
    `the runner's and the control plane's spans at the collector (${JSON.stringify(expected)})`,
    async () => {
      const now = counts();
      return (Object.keys(expected) as Array<keyof typeof expected>).every((kind) => now[kind] >= expected[kind]) ? true : undefined;
    },
    20_000,
  );
  const rows = sink
    .allExports()
    .filter((received) => received.signal === 'traces')
    .flatMap((received) => otelTracesRows(received.body, received.contentType));
  return { jobs, rows };
}
