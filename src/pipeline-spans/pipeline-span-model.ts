import type { TracedJob, TracedPipeline } from '../traced-work/traced-work';
import { CiJobIdentity, ciIdentityValues } from '../otlp/ci-identity';

/**
 * The control-plane spans of SPEC §10 as OTLP/JSON, from facts: pure functions, no I/O. Ids come from
 * trace-context/ (the caller derives them), so anything holding the trace key recomputes the same tree.
 *
 * Span names are fixed and few (`pipeline`, `job`, `queue_wait`, `bridge`), so that they group in a
 * trace viewer and in ClickHouse; what varies (job name, pipeline name) is in attributes.
 */

export const PIPELINE_SPAN = 'pipeline';
export const JOB_SPAN = 'job';
export const QUEUE_WAIT_SPAN = 'queue_wait';
export const BRIDGE_SPAN = 'bridge';
const SCOPE = { name: 'ci-job-telemetry/pipeline-spans' };

/** OTLP span kinds and status codes as OTLP/JSON writes them (integers). */
const KIND_INTERNAL = 1;
const KIND_SERVER = 2;
const STATUS_ERROR = 2;

export type AttributeValue = string | number | boolean;

/** One span ready for the outbox: its id and the OTLP/JSON `ResourceSpans` carrying it alone. */
export interface ControlPlaneSpan {
  readonly spanId: string;
  readonly resourceSpans: OtlpResourceSpans;
}

export interface OtlpResourceSpans {
  readonly resource: { readonly attributes: OtlpKeyValue[] };
  readonly scopeSpans: Array<{ readonly scope: { readonly name: string }; readonly spans: OtlpSpan[] }>;
}

interface OtlpKeyValue {
  readonly key: string;
  readonly value: { stringValue: string } | { intValue: string } | { boolValue: boolean } | { doubleValue: number };
}

interface OtlpSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly traceState?: string;
  readonly name: string;
  readonly kind: number;
  readonly startTimeUnixNano: string;
  readonly endTimeUnixNano: string;
  readonly attributes: OtlpKeyValue[];
  readonly status?: { readonly code: number; readonly message?: string };
}

/** Where a span sits: its trace, its id, its parent (none for the trace's root). */
export interface SpanPlace {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly tracestate?: string;
}

/** How a job or pipeline ended, as GitLab says it. */
export interface Outcome {
  /** GitLab's status: success, failed, canceled, skipped, … */
  readonly status: string;
  /** GitLab's failure reason (`script_failure`, …) or, for a pipeline, what failed. */
  readonly failureReason?: string;
}

/** What a finished job's webhook (or the gateway, without webhooks) tells. */
export interface JobEnd extends Outcome {
  readonly finishedAt: number;
  readonly startedAt?: number;
  readonly name?: string;
  readonly stage?: string;
  readonly runnerDescription?: string;
  readonly runnerType?: string;
  readonly runnerId?: number;
  readonly jobUrl?: string;
}

/** What a finished pipeline's webhook tells. */
export interface PipelineEnd extends Outcome {
  readonly createdAt: number;
  readonly finishedAt: number;
  readonly name?: string;
  readonly source?: string;
  readonly ref?: string;
  readonly tag?: boolean;
  readonly sha?: string;
  readonly url?: string;
  readonly projectUrl?: string;
  readonly projectPath?: string;
}

function value(raw: AttributeValue): OtlpKeyValue['value'] {
  if (typeof raw === 'string') return { stringValue: raw };
  if (typeof raw === 'boolean') return { boolValue: raw };
  return Number.isSafeInteger(raw) ? { intValue: String(raw) } : { doubleValue: raw };
}

function keyValues(attributes: Record<string, AttributeValue | undefined>): OtlpKeyValue[] {
  return Object.entries(attributes)
    .filter((entry): entry is [string, AttributeValue] => entry[1] !== undefined && entry[1] !== '')
    .map(([key, raw]) => ({ key, value: value(raw) }));
}

const nanos = (epochMs: number) => `${BigInt(Math.round(epochMs)) * 1_000_000n}`;

/** GitLab's status as the CI/CD semantic conventions' result (`cicd.pipeline.result`, `…task.run.result`). */
export function cicdResult(status: string): string | undefined {
  switch (status) {
    case 'success':
      return 'success';
    case 'failed':
      return 'failure';
    case 'canceled':
    case 'canceling':
      return 'cancellation';
    case 'skipped':
      return 'skip';
    default:
      return undefined;
  }
}

/**
 * One span in its own `ResourceSpans`: the resource says who emitted it (`service.name`, never the
 * runner's) and whose it is (the identity of SPEC §6 in the gateway's types: resource and span alike as the
 * runner's spans carry it; the ClickHouse view reads the resource's first).
 */
function span(
  serviceName: string,
  place: SpanPlace,
  name: string,
  kind: number,
  startMs: number,
  endMs: number,
  identity: Partial<CiJobIdentity>,
  attributes: Record<string, AttributeValue | undefined>,
  outcome: Outcome | undefined,
): ControlPlaneSpan {
  const failed = outcome?.status === 'failed';
  return {
    spanId: place.spanId,
    resourceSpans: {
      resource: { attributes: keyValues({ 'service.name': serviceName, ...ciIdentityValues(identity, 'resource') }) },
      scopeSpans: [
        {
          scope: SCOPE,
          spans: [
            {
              traceId: place.traceId,
              spanId: place.spanId,
              ...(place.parentSpanId === undefined ? {} : { parentSpanId: place.parentSpanId }),
              ...(place.tracestate === undefined ? {} : { traceState: place.tracestate }),
              name,
              kind,
              startTimeUnixNano: nanos(startMs),
              // A span never ends before it starts, whatever clocks and rounding say.
              endTimeUnixNano: nanos(Math.max(startMs, endMs)),
              attributes: keyValues({ ...ciIdentityValues(identity, 'span'), ...attributes }),
              ...(failed ? { status: { code: STATUS_ERROR, message: outcome?.failureReason ?? 'failed' } } : {}),
            },
          ],
        },
      ],
    },
  };
}

function jobIdentity(job: TracedJob, runnerId?: number): Partial<CiJobIdentity> {
  return { jobId: job.jobId, projectId: job.projectId, pipelineId: job.pipelineId, runnerId: runnerId ?? job.runnerId };
}

/** How long a job waited for a runner: from `queued_at` to the pickup. Emitted at the pickup. */
export function queueWaitSpan(serviceName: string, place: SpanPlace, job: TracedJob & { queuedAt: number }): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    QUEUE_WAIT_SPAN,
    KIND_INTERNAL,
    job.queuedAt,
    job.pickedUpAt,
    jobIdentity(job),
    { 'ci.runner.type': job.runnerType, 'ci.job.queued_duration_seconds': Math.max(0, job.pickedUpAt - job.queuedAt) / 1000 },
    undefined,
  );
}

/**
 * The job's own span, whose id is the `span_parent_id` its runner's spans name: from when the job was
 * queued (the pickup's `queued_at`, else what the webhook tells, else the pickup) to its end.
 */
export function jobSpan(serviceName: string, place: SpanPlace, job: TracedJob, end: JobEnd): ControlPlaneSpan {
  const start = job.queuedAt ?? job.pickedUpAt;
  return span(
    serviceName,
    place,
    JOB_SPAN,
    KIND_INTERNAL,
    start,
    end.finishedAt,
    jobIdentity(job, end.runnerId),
    {
      'cicd.pipeline.task.name': end.name,
      'cicd.pipeline.task.run.result': cicdResult(end.status),
      'cicd.pipeline.task.run.url.full': end.jobUrl,
      'cicd.worker.name': end.runnerDescription,
      'ci.job.status': end.status,
      'ci.job.stage': end.stage,
      'ci.job.failure_reason': end.failureReason,
      'ci.runner.type': end.runnerType ?? job.runnerType,
      'ci.job.queued_duration_seconds': job.queuedAt === undefined ? undefined : Math.max(0, job.pickedUpAt - job.queuedAt) / 1000,
      'error.type': end.status === 'failed' ? (end.failureReason ?? 'failed') : undefined,
    },
    end,
  );
}

function pipelineAttributes(pipeline: TracedPipeline, end: PipelineEnd): Record<string, AttributeValue | undefined> {
  return {
    'cicd.pipeline.name': end.name,
    'cicd.pipeline.result': cicdResult(end.status),
    'cicd.pipeline.run.url.full': end.url,
    'cicd.pipeline.action.name': 'RUN',
    'ci.pipeline.status': end.status,
    'ci.pipeline.source': end.source,
    'ci.pipeline.failure_reason': end.failureReason,
    'ci.root_pipeline.id': String(pipeline.rootPipelineId),
    'vcs.ref.head.name': end.ref,
    'vcs.ref.head.type': end.ref === undefined ? undefined : end.tag === true ? 'tag' : 'branch',
    'vcs.ref.head.revision': end.sha,
    'vcs.repository.url.full': end.projectUrl,
    'vcs.repository.name': end.projectPath,
    'error.type': end.status === 'failed' ? (end.failureReason ?? 'failed') : undefined,
  };
}

/** A pipeline's span: the trace's root for the root pipeline, else under its bridge job or the root. */
export function pipelineSpan(serviceName: string, place: SpanPlace, pipeline: TracedPipeline, end: PipelineEnd): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    PIPELINE_SPAN,
    KIND_SERVER,
    end.createdAt,
    end.finishedAt,
    { projectId: pipeline.projectId, pipelineId: pipeline.pipelineId },
    pipelineAttributes(pipeline, end),
    end,
  );
}

/**
 * The trigger job that started a child pipeline. GitLab sends no Job Hook for trigger jobs, so its span
 * is drawn from the child pipeline it ran: it lasts as the child did, in the parent pipeline.
 */
export function bridgeSpan(
  serviceName: string,
  place: SpanPlace,
  bridge: { readonly jobId: number; readonly pipelineId: number; readonly projectId: number; readonly downstreamPipelineId: number },
  child: PipelineEnd,
): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    BRIDGE_SPAN,
    KIND_INTERNAL,
    child.createdAt,
    child.finishedAt,
    { jobId: bridge.jobId, projectId: bridge.projectId, pipelineId: bridge.pipelineId },
    { 'ci.job.kind': 'bridge', 'ci.downstream_pipeline.id': String(bridge.downstreamPipelineId), 'ci.job.status': child.status },
    child,
  );
}
