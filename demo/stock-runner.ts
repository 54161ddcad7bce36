import { context, ROOT_CONTEXT, SpanStatusCode, trace, TraceFlags } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

/** `features.tracing` of a decorated job payload, with the field names GitLab Runner reads (common/spec/spec.go). */
export interface TracingFeature {
  readonly trace_id: string;
  readonly span_parent_id: string;
  readonly otel_endpoints?: ReadonlyArray<{
    readonly url: string;
    readonly auth?: { readonly type: string; readonly http_bearer_gcp_oidc?: { readonly audience: string } };
  }>;
}

/** The build stages a runner goes through for a shell-executor job, in order. */
export const BUILD_STAGES = [
  'prepare_executor',
  'get_sources',
  'restore_cache',
  'step_script',
  'after_script',
  'archive_cache',
  'upload_artifacts',
] as const;

export type BuildStage = (typeof BUILD_STAGES)[number];

/** One job as the runner ran it: identity from the payload, and what each stage took. */
export interface RunnerJob {
  readonly jobId: number;
  readonly projectId: number;
  readonly runnerId: number;
  /** `CI_PIPELINE_ID` and `CI_PIPELINE_SOURCE` from the payload's variables: the runner reads them there. */
  readonly pipelineId: string;
  readonly pipelineSource: string;
  readonly executor: string;
  readonly status: 'success' | 'failed';
  readonly startedAt: Date;
  readonly stageSeconds: Readonly<Record<BuildStage, number>>;
}

/**
 * The OTLP/HTTP URL a stock GitLab Runner exports to for this endpoint, or why it skips it
 * (gitlab-runner commands/tracing.go): the scheme picks the transport, the path is used verbatim
 * (empty means /v1/traces), no `auth` means no credentials at all, `http_bearer_gcp_oidc` needs its
 * nested object and Google credentials, any other auth type is skipped.
 */
export function runnerExportUrl(endpoint: NonNullable<TracingFeature['otel_endpoints']>[number]): { url: string } | { skipped: string } {
  let url: URL;
  try {
    url = new URL(endpoint.url);
  } catch {
    return { skipped: `unparsable URL ${endpoint.url}` };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { skipped: `scheme ${url.protocol} is not OTLP/HTTP` };
  if (endpoint.auth !== undefined) {
    if (endpoint.auth.type !== 'http_bearer_gcp_oidc') return { skipped: `unsupported auth type ${endpoint.auth.type}` };
    return { skipped: 'http_bearer_gcp_oidc needs Google credentials, which this runner does not have' };
  }
  if (url.pathname === '' || url.pathname === '/') url.pathname = '/v1/traces';
  return { url: url.toString() };
}

/**
 * Exports one job's spans the way a stock runner does: resource `service.name=runner`, one
 * `job_execution` span parented on the payload's `span_parent_id` with the runner's span attributes,
 * and one child span per build stage, through the OpenTelemetry JS OTLP/HTTP protobuf exporter to
 * the first endpoint, with no headers of its own. Times come from `job`, so a demo pipeline has fixed
 * durations.
 */
export async function exportJobAsRunner(tracing: TracingFeature, job: RunnerJob): Promise<void> {
  const endpoint = tracing.otel_endpoints?.[0];
  if (endpoint === undefined) throw new Error(`job ${job.jobId}: the payload has no otel_endpoints`);
  const target = runnerExportUrl(endpoint);
  if ('skipped' in target) throw new Error(`job ${job.jobId}: a stock runner skips ${endpoint.url}: ${target.skipped}`);

  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'runner', 'service.version': '18.6.0' }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: target.url }))],
  });
  const tracer = provider.getTracer('gitlab-ci-runner');
  const parent = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: tracing.trace_id,
    spanId: tracing.span_parent_id,
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  });

  const end = new Date(job.startedAt.getTime() + BUILD_STAGES.reduce((sum, stage) => sum + job.stageSeconds[stage], 0) * 1000);
  const jobSpan = tracer.startSpan(
    'job_execution',
    {
      startTime: job.startedAt,
      attributes: {
        'ci.job.id': job.jobId,
        'ci.project.id': job.projectId,
        'ci.pipeline.id': job.pipelineId,
        'ci.pipeline.source': job.pipelineSource,
        'ci.runner.id': job.runnerId,
        'ci.runner.executor': job.executor,
      },
    },
    parent,
  );
  const inJob = trace.setSpan(context.active(), jobSpan);
  let stageStart = job.startedAt.getTime();
  for (const stage of BUILD_STAGES) {
    const stageEnd = stageStart + job.stageSeconds[stage] * 1000;
    tracer.startSpan(stage, { startTime: new Date(stageStart) }, inJob).end(new Date(stageEnd));
    stageStart = stageEnd;
  }
  jobSpan.setAttribute('ci.job.status', job.status);
  if (job.status === 'failed') jobSpan.setStatus({ code: SpanStatusCode.ERROR, message: 'job failed' });
  jobSpan.end(end);
  // Shutdown flushes the batch, as the runner does when the job ends.
  await provider.shutdown();
}
