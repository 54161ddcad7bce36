import { JobPayloadRequestBody } from '../fixtures/job-payload';
import { internalApiHeaders } from './internal-api';

export interface DecoratedJob {
  readonly status: number;
  readonly payload: { features: Record<string, unknown>; variables: Array<{ key: string; value: string; public?: boolean; masked?: boolean }> };
  readonly telemetry: { enabled: boolean; reason: string; trace_id: string; span_parent_id: string; traceparent: string };
}

/** GitLab's job-request API picking a job up: the decorator call, signed as GitLab signs it. */
export async function pickUpJob(service: { url: string; secrets: { internalApiSecret: Buffer } }, request: JobPayloadRequestBody): Promise<DecoratedJob> {
  const response = await fetch(`${service.url}/internal/ci/telemetry/job_payload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(await internalApiHeaders(service.secrets.internalApiSecret)) },
    body: JSON.stringify(request),
  });
  const body = (await response.json()) as Omit<DecoratedJob, 'status'>;
  return { status: response.status, ...body };
}
