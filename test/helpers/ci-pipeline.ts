import type { TracingFeature } from '../../demo/stock-runner';
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
