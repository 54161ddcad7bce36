import { context, ROOT_CONTEXT, SpanStatusCode, trace, TraceFlags } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { readTracingAsRunner } from './runner-tracing';

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
export const BUILD_STAGES = ['prepare_executor', 'get_sources', 'restore_cache', 'step_script', 'after_script', 'archive_cache', 'upload_artifacts'] as const;

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
 * Exports one job's spans the way a stock runner does: reads the payload with the runner's rules
 * (runner-tracing.ts, written from gitlab-runner's source), then resource
 * `service.name=runner`, one `job_execution` span parented on the payload's `span_parent_id` with the
 * runner's span attributes, and one child span per build stage, through the OpenTelemetry JS
 * OTLP/HTTP protobuf exporter to the endpoint's URL, with no headers of its own. Times come from `job`, so a demo pipeline has fixed
 * durations.
 */
export async function exportJobAsRunner(tracing: TracingFeature, job: RunnerJob): Promise<void> {
  const view = readTracingAsRunner({ tracing });
  const plan = view.plans[0];
  if (plan === undefined || view.parent === undefined) {
    throw new Error(`job ${job.jobId}: a stock runner would not export this payload (${view.warnings.join('; ') || 'no endpoint'})`);
  }
  if (plan.transport !== 'otlp-http-protobuf' || plan.credentials.kind !== 'none') {
    throw new Error(`job ${job.jobId}: this emulation exports over OTLP/HTTP without credentials only, not ${plan.transport}/${plan.credentials.kind}`);
  }

  // No headers: a runner adds no credentials to an endpoint without auth.
  const exporter = new OTLPTraceExporter({ url: plan.target });
  const failures: string[] = [];
  const exportSpans = exporter.export.bind(exporter);
  exporter.export = (spans, done) =>
    exportSpans(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) failures.push(result.error?.message ?? 'export failed');
      done(result);
    });
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'runner', 'service.version': '18.6.0' }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer('gitlab-ci-runner');
  const parent = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: view.parent.traceId,
    spanId: view.parent.spanId,
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
  if (failures.length > 0) throw new Error(`job ${job.jobId}: export to ${plan.target} failed: ${failures.join('; ')}`);
}
