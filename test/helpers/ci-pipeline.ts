import type { TracingFeature } from '../../demo/stock-runner';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { internalApiHeaders } from './internal-api';
import type { ServiceProcess } from './service';

export interface PickedUpJob {
  readonly jobId: number;
  readonly tracing: TracingFeature;
  /** `CI_PIPELINE_ID` as the payload carries it: what the runner writes as `ci.pipeline.id`. */
  readonly pipelineVariable: string;
}

/** Job pickup as GitLab's job-request API does it: the decorated payload a runner would receive. */
export async function pickUpJob(
  service: ServiceProcess,
  job: { jobId: number; projectId: number; pipelineId: number; runnerId?: number },
): Promise<PickedUpJob> {
  const body = jobPayloadRequest({
    runner: { id: job.runnerId ?? 17 },
    job: { id: job.jobId, project_id: job.projectId, pipeline_id: job.pipelineId, root_pipeline_id: job.pipelineId, token: `glcbt-opaque-job-token-${job.jobId}` },
    payload: {
      id: job.jobId,
      token: 'payload-job-token',
      variables: [
        { key: 'CI_JOB_ID', value: String(job.jobId), public: true },
        { key: 'CI_PIPELINE_ID', value: String(job.pipelineId), public: true },
        { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
      ],
      features: { trace_sections: true },
    },
  });
  const response = await fetch(`${service.url}/internal/ci/telemetry/job_payload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(await internalApiHeaders(service.secrets.internalApiSecret)) },
    body: JSON.stringify(body),
  });
  const decorated = (await response.json()) as {
    payload: { features?: { tracing?: TracingFeature }; variables?: Array<{ key: string; value: string }> };
    telemetry: { enabled: boolean; reason: string };
  };
  const tracing = decorated.payload.features?.tracing;
  if (response.status !== 200 || tracing === undefined) {
    throw new Error(`job ${job.jobId} not enabled: ${response.status} ${JSON.stringify(decorated.telemetry)}`);
  }
  const pipelineVariable = decorated.payload.variables?.find((variable) => variable.key === 'CI_PIPELINE_ID')?.value ?? '';
  return { jobId: job.jobId, tracing, pipelineVariable };
}
