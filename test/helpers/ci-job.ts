import { defaultTextMapGetter, ROOT_CONTEXT } from '@opentelemetry/api';
import { ExportResult, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { JobPayloadRequestBody, jobPayloadRequest, RUNNER_TOKEN } from '../fixtures/job-payload';
import { internalApiHeaders } from './internal-api';
import { GitLabKeys } from './job-tokens';
import { ServiceProcess } from './service';

export interface DecoratedJob {
  readonly status: number;
  readonly payload: { features: Record<string, unknown>; variables: Array<{ key: string; value: string; public?: boolean; masked?: boolean }> };
  readonly telemetry: { enabled: boolean; reason: string; trace_id: string; span_parent_id: string; traceparent: string; provisional?: boolean };
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

/** A job the decorator enabled, with the credentials its runner exports with (SPEC §5). */
export interface PickedUpJob {
  readonly jobId: number;
  readonly traceId: string;
  readonly traceparent: string;
  readonly jobToken: string;
  readonly runnerToken: string;
}

/** Job pickup as GitLab does it, for a job telemetry is enabled for; with the job token its runner holds. */
export async function pickUpTracedJob(
  service: ServiceProcess,
  keys: GitLabKeys,
  jobId: number,
  runner = { id: 17, token: RUNNER_TOKEN },
): Promise<PickedUpJob> {
  const { telemetry } = await pickUpJob(service, jobPayloadRequest({ job: { id: jobId, root_pipeline_id: jobId * 10 }, runner }));
  if (!telemetry.enabled) throw new Error(`job ${jobId} was not enabled: ${telemetry.reason}`);
  return { jobId, traceId: telemetry.trace_id, traceparent: telemetry.traceparent, jobToken: await keys.sign(jobId), runnerToken: runner.token };
}

/** Header credentials as a runner-side exporter sends them (SPEC §5). */
export function jobCredentials(job: PickedUpJob): Record<string, string> {
  return { Authorization: `Bearer ${job.jobToken}`, 'Runner-Token': job.runnerToken };
}

/** Spans as a job's instrumented program makes them: parented on the TRACEPARENT the decorator minted. */
export function recordSpans(traceparent: string, names: string[]): ReadableSpan[] {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'rspec' }),
    spanProcessors: [new SimpleSpanProcessor(memory)],
  });
  const parent = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, { traceparent }, defaultTextMapGetter);
  const tracer = provider.getTracer('ci-job');
  for (const name of names) tracer.startSpan(name, {}, parent).end();
  return memory.getFinishedSpans();
}

/** The SDK's OTLP/HTTP trace exporter pointed at the gateway, with nothing but the job's credentials set. */
export function gatewayTraceExporter(kind: 'proto' | 'json', gatewayUrl: string, job: PickedUpJob): ProtoTraceExporter | JsonTraceExporter {
  const options = { url: `${gatewayUrl}/v1/traces`, headers: jobCredentials(job) };
  return kind === 'proto' ? new ProtoTraceExporter(options) : new JsonTraceExporter(options);
}

export function exportSpans(exporter: ProtoTraceExporter | JsonTraceExporter, spans: ReadableSpan[]): Promise<ExportResult> {
  return new Promise((resolve) => exporter.export(spans, resolve));
}
