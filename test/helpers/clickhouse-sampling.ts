import { CONTROL_PLANE_MARK } from '../../src/otlp/control-plane-mark';
import { tracestateFor } from '../../src/trace-context/trace-context';
import { dateTime64, otelSpanRow, OtelTracesRow } from './clickhouse-exporter';

/**
 * otel_traces rows of pipelines as outcome-based sampling (SPEC §11) delivers them to the Collector: the
 * control plane's root pipeline span, carrying the pipeline's tracestate and its `ci.sampling.reason`, and a
 * stock runner's job_execution span under it, which carries no tracestate (the runner builds its parent from
 * trace_id and span_parent_id only) but the reason the gateway stamps on its resource.
 */
export interface SampledPipeline {
  readonly pipelineId: number;
  readonly projectId: number;
  readonly status: 'success' | 'failed';
  /** The pipeline span's TraceState as the Collector's exporter stores it. */
  readonly traceState: string;
  readonly reason: 'head' | 'failed' | 'slow' | 'queued' | 'no_outcome';
  readonly createdAt: Date;
  readonly seconds: number;
}

/** 10 % head sampling as the decorator hands it out (`ot=th:e6666666666666`): each such pipeline stands for 10. */
export const HEAD_10_PERCENT = tracestateFor(10)!;
/** Kept by outcome: with probability 1, whatever the trace's randomness. */
export const KEPT_BY_OUTCOME = 'ot=th:0';

const hex = (value: number, digits: number) => value.toString(16).padStart(digits, '0');

/** The trace id of a {@link SampledPipeline}'s rows. */
export const sampledTraceId = (pipelineId: number) => hex(pipelineId, 32);

export function sampledPipelineRows(pipeline: SampledPipeline): OtelTracesRow[] {
  const traceId = sampledTraceId(pipeline.pipelineId);
  const pipelineSpanId = hex(pipeline.pipelineId, 16);
  const start = BigInt(pipeline.createdAt.getTime()) * 1_000_000n;
  const duration = (BigInt(pipeline.seconds) * 1_000_000_000n).toString();
  const identity = { 'ci.project.id': String(pipeline.projectId), 'ci.pipeline.id': String(pipeline.pipelineId) };
  const failed = pipeline.status === 'failed';
  const jobId = pipeline.pipelineId * 10 + 1;
  return [
    otelSpanRow({
      Timestamp: dateTime64(start),
      TraceId: traceId,
      SpanId: pipelineSpanId,
      TraceState: pipeline.traceState,
      SpanName: 'pipeline',
      ResourceAttributes: {
        'service.name': 'gitlab-ci',
        ...identity,
        'ci.sampling.reason': pipeline.reason,
        [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value,
      },
      SpanAttributes: { ...identity, 'ci.pipeline.status': pipeline.status, 'ci.pipeline.span.version': '1024' },
      Duration: duration,
      StatusCode: failed ? 'Error' : 'Unset',
      StatusMessage: failed ? 'rspec: script_failure' : '',
    }),
    otelSpanRow({
      Timestamp: dateTime64(start + 10_000_000_000n),
      TraceId: traceId,
      SpanId: hex(jobId, 16),
      ParentSpanId: pipelineSpanId,
      SpanName: 'job_execution',
      ResourceAttributes: { 'service.name': 'runner', ...identity, 'ci.job.id': String(jobId), 'ci.runner.id': '17', 'ci.sampling.reason': pipeline.reason },
      SpanAttributes: { 'ci.job.status': pipeline.status },
      Duration: (BigInt(pipeline.seconds - 20) * 1_000_000_000n).toString(),
      StatusCode: failed ? 'Error' : 'Unset',
    }),
  ];
}

/**
 * What ClickHouse holds of 23 pipelines of project 7 at 10 % head sampling with failed pipelines kept by
 * outcome: the 3 that failed, all kept whole (100 s each), and 2 of the 20 that succeeded, head-sampled
 * (300 s each). Its failure rate is 3/23; a count of rows would say 3/5.
 */
export function tenPercentSample(createdAt: Date): SampledPipeline[] {
  const at = (minutes: number) => new Date(createdAt.getTime() + minutes * 60_000);
  return [
    ...[1, 2, 3].map((index) => ({
      pipelineId: 2800 + index,
      projectId: 7,
      status: 'failed' as const,
      traceState: KEPT_BY_OUTCOME,
      reason: 'failed' as const,
      createdAt: at(index),
      seconds: 100,
    })),
    ...[4, 5].map((index) => ({
      pipelineId: 2800 + index,
      projectId: 7,
      status: 'success' as const,
      traceState: HEAD_10_PERCENT,
      reason: 'head' as const,
      createdAt: at(index),
      seconds: 300,
    })),
  ];
}
