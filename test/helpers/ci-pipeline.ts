import type { WebhookJob } from '../../simulator/gitlab-webhooks';
import { BuildStage, exportJobAsRunner, TracingFeature } from '../../simulator/stock-runner';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { pickUpJob } from './ci-job';
import type { ServiceProcess } from './service';

export interface PickedUpJob {
  readonly jobId: number;
  readonly tracing: TracingFeature;
  /** `CI_PIPELINE_ID` as the payload carries it: what the runner writes as `ci.pipeline.id`. */
  readonly pipelineVariable: string;
}

/**
 * One job of a pipeline picked up (project, pipeline and runner as given; its own job token), with
 * the payload variables a runner reads its span attributes from. `queuedAt` is the job request's
 * `queued_at` (the fixture's fixed time otherwise), `runnerType` the runner's `runner_type`
 * (`project_type` otherwise), `rootPipelineId` the job's root pipeline (its own pipeline otherwise).
 */
export async function pickUpPipelineJob(
  service: ServiceProcess,
  job: { jobId: number; projectId: number; pipelineId: number; runnerId?: number; runnerType?: string; queuedAt?: Date; rootPipelineId?: number },
): Promise<PickedUpJob> {
  const request = jobPayloadRequest({
    runner: { id: job.runnerId ?? 17, ...(job.runnerType === undefined ? {} : { runner_type: job.runnerType }) },
    job: {
      id: job.jobId,
      project_id: job.projectId,
      pipeline_id: job.pipelineId,
      root_pipeline_id: job.rootPipelineId ?? job.pipelineId,
      token: jobToken(job.jobId),
      ...(job.queuedAt === undefined ? {} : { queued_at: job.queuedAt.toISOString() }),
    },
  });
  (request.payload.variables as unknown[]).push(
    { key: 'CI_PIPELINE_ID', value: String(job.pipelineId), public: true },
    { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
  );
  const decorated = await pickUpJob(service, request);
  const tracing = decorated.payload.features.tracing as TracingFeature | undefined;
  if (decorated.status !== 200 || tracing === undefined) {
    throw new Error(`job ${job.jobId} not enabled: ${decorated.status} ${JSON.stringify(decorated.telemetry)}`);
  }
  const pipelineVariable = decorated.payload.variables.find((variable) => variable.key === 'CI_PIPELINE_ID')?.value ?? '';
  return { jobId: job.jobId, tracing, pipelineVariable };
}

/** The opaque job token each job of {@link pickUpPipelineJob} was picked up with. */
export const jobToken = (jobId: number) => `glcbt-opaque-job-token-${jobId}`;

/** One job as it runs: picked up at its `queuedAt` plus a moment, run by runner 17 from `startedAt` for its stages. */
export interface JobRun {
  readonly jobId: number;
  readonly projectId: number;
  readonly pipelineId: number;
  readonly rootPipelineId?: number;
  readonly name: string;
  readonly status: 'success' | 'failed';
  readonly queuedAt: Date;
  readonly startedAt: Date;
  readonly stageSeconds: Readonly<Record<BuildStage, number>>;
  readonly retriesCount?: number;
}

/**
 * A job picked up (the decorator call), exported as a stock runner does (job_execution and its build stages, to the
 * endpoint the payload names), and what GitLab's hooks then say of it.
 */
export async function runJobAsStockRunner(
  service: ServiceProcess,
  run: JobRun,
  running: () => Promise<void> = async () => undefined,
): Promise<{ picked: PickedUpJob; hook: WebhookJob }> {
  const picked = await pickUpPipelineJob(service, {
    jobId: run.jobId,
    projectId: run.projectId,
    pipelineId: run.pipelineId,
    rootPipelineId: run.rootPipelineId,
    queuedAt: run.queuedAt,
  });
  // Between its pickup and its export: a test that runs the job in real time waits here.
  await running();
  await exportJobAsRunner(picked.tracing, {
    jobId: run.jobId,
    projectId: run.projectId,
    runnerId: 17,
    pipelineId: picked.pipelineVariable,
    pipelineSource: 'push',
    executor: 'shell',
    status: run.status,
    startedAt: run.startedAt,
    stageSeconds: run.stageSeconds,
  });
  const runMs = Object.values(run.stageSeconds).reduce((sum, seconds) => sum + seconds, 0) * 1000;
  const hook: WebhookJob = {
    id: run.jobId,
    name: run.name,
    stage: run.name,
    status: run.status,
    createdAt: run.queuedAt,
    startedAt: run.startedAt,
    finishedAt: new Date(run.startedAt.getTime() + runMs),
    queuedSeconds: (run.startedAt.getTime() - run.queuedAt.getTime()) / 1000,
    retriesCount: run.retriesCount ?? 0,
    runner: { id: 17, runnerType: 'project_type', description: 'runner-17' },
    ...(run.status === 'failed' ? { failureReason: 'script_failure' } : {}),
  };
  return { picked, hook };
}
