import { collectedSpans } from '../../src/otlp/collected-spans';
import { bridgeSpan, ControlPlaneSpan, jobSpan, OtlpResourceSpans, pipelineSpan, queueWaitSpan } from '../../src/pipeline-spans/pipeline-span-model';
import type { StoredSpan } from '../../src/reads/trace-reads';
import { pipelineSpanIdFor, queueSpanIdFor, spanIdFor, traceIdFor } from '../../src/trace-context/trace-context';
import type { ModelNode, ModelPipeline, ModelRun } from './gitlab-scheduler';

/**
 * The trace of a scheduler model's run as the collector holds it: the control plane's spans drawn with the real span
 * model (src/pipeline-spans/pipeline-span-model.ts) from the facts GitLab gives, as the service draws them (job spans
 * from the Job Hook's times, queue waits from the pickup's `queued_at` where it had one, pipeline spans from the
 * Pipeline Hook, trigger jobs from their child's hook), each in its latest version, and GitLab Runner's
 * `job_execution` with its stages. Also what the service draws at the root pipeline's end to write the path with:
 * only what had been told by then (the hooks of what ended before it).
 */

const SERVICE = 'gitlab-ci';
const KEY = Buffer.alloc(32, 11);
export const PROJECT = 42;

export interface ModelTrace {
  /** Every span, as a read returns them. */
  readonly spans: StoredSpan[];
  /** The control plane's spans of the trace as the service draws them when the root pipeline ends. */
  readonly drawnAtRootEnd: ControlPlaneSpan[];
}

const nanos = (epochMs: number) => `${BigInt(Math.round(epochMs)) * 1_000_000n}`;

export function traceOf(run: ModelRun): ModelTrace {
  const rootId = run.root.pipelineId;
  const traceId = traceIdFor(KEY, rootId);
  const traced = (pipelineId: number) => ({ pipelineId, rootPipelineId: rootId, projectId: PROJECT, traceId });
  const all: ControlPlaneSpan[] = [];
  const drawn: ControlPlaneSpan[] = [];
  const runner: OtlpResourceSpans[] = [];
  const toldByRootEnd = (end: number) => end <= run.root.end;

  for (const node of run.nodes) {
    if (node.kind === 'bridge') continue;
    const job = {
      ...traced(node.pipelineId),
      jobId: node.jobId,
      runnerId: 17 + node.tag,
      runnerType: 'project_type',
      ...(node.queuedAtAtPickup ? { queuedAt: node.pending } : {}),
      pickedUpAt: node.started,
    };
    const jobSpanId = spanIdFor(KEY, node.jobId);
    const end = {
      status: node.status,
      finishedAt: node.end,
      startedAt: node.started,
      queuedDuration: (node.started - node.pending) / 1000,
      name: node.name,
      stage: node.stage,
      when: node.when,
      manual: node.when === 'manual',
      ...(node.resourceGroup ? { waitedForResource: true } : {}),
      retriesCount: node.attempt - 1,
      ...(node.status === 'failed' ? { failureReason: 'script_failure' } : {}),
    };
    const spans = [jobSpan(SERVICE, { traceId, spanId: jobSpanId, parentSpanId: pipelineSpanIdFor(KEY, node.pipelineId) }, job, end)];
    if (node.queuedAtAtPickup) {
      spans.push(queueWaitSpan(SERVICE, { traceId, spanId: queueSpanIdFor(KEY, node.jobId), parentSpanId: jobSpanId }, { ...job, queuedAt: node.pending }));
    }
    all.push(...spans);
    if (toldByRootEnd(node.end)) drawn.push(...spans);
    runner.push(runnerSpans(traceId, node, jobSpanId));
  }

  for (const pipeline of run.pipelines) {
    const facts = { status: 'success', createdAt: pipeline.createdAt, finishedAt: pipeline.end, ref: 'main' };
    const bridge = pipeline.parent?.bridge;
    const place = {
      traceId,
      spanId: pipelineSpanIdFor(KEY, pipeline.pipelineId),
      ...(bridge === undefined ? {} : { parentSpanId: spanIdFor(KEY, bridge.jobId) }),
    };
    const span = pipelineSpan(SERVICE, place, traced(pipeline.pipelineId), facts);
    all.push(span);
    // The service draws the root's span and the trigger jobs at the root's end; a child's own span is not among them.
    if (bridge === undefined) drawn.push(span);
    else {
      const trigger = bridgeOf(traceId, bridge, pipeline, facts);
      all.push(trigger);
      if (toldByRootEnd(pipeline.end)) drawn.push(trigger);
    }
  }
  const spans = collectedSpans({ resourceSpans: [...all.map((span) => span.resourceSpans), ...runner] as unknown as Array<Record<string, unknown>> });
  return { spans, drawnAtRootEnd: drawn };
}

function bridgeOf(
  traceId: string,
  bridge: ModelNode,
  child: ModelPipeline,
  facts: { status: string; createdAt: number; finishedAt: number },
): ControlPlaneSpan {
  return bridgeSpan(
    SERVICE,
    { traceId, spanId: spanIdFor(KEY, bridge.jobId), parentSpanId: pipelineSpanIdFor(KEY, bridge.pipelineId) },
    { jobId: bridge.jobId, pipelineId: bridge.pipelineId, projectId: PROJECT, downstreamPipelineId: child.pipelineId },
    facts,
  );
}

/** GitLab Runner's spans of a run: `job_execution` from its pickup to a little before GitLab's end, with its stages. */
function runnerSpans(traceId: string, node: ModelNode, jobSpanId: string): OtlpResourceSpans {
  const executionId = `e${node.jobId.toString(16).padStart(15, '0')}`;
  const start = node.started;
  const stop = Math.max(start, node.end - (node.jobId % 7));
  const cut = (fraction: number) => start + Math.floor((stop - start) * fraction);
  const stages: Array<[string, number, number]> = [
    ['prepare_executor', start, cut(0.1)],
    ['get_sources', cut(0.1), cut(0.2)],
    ['step_script', cut(0.2), cut(0.9)],
    ['upload_artifacts_on_success', cut(0.9), stop],
  ];
  const span = (spanId: string, parentSpanId: string, name: string, from: number, to: number) => ({
    traceId,
    spanId,
    parentSpanId,
    name,
    kind: 1,
    startTimeUnixNano: nanos(from),
    endTimeUnixNano: nanos(to),
    attributes: [] as unknown[],
  });
  const execution = {
    ...span(executionId, jobSpanId, 'job_execution', start, stop),
    attributes: [
      { key: 'ci.job.id', value: { intValue: String(node.jobId) } },
      { key: 'ci.pipeline.id', value: { intValue: String(node.pipelineId) } },
      { key: 'ci.job.status', value: { stringValue: node.status } },
    ],
  };
  return {
    resource: {
      attributes: [
        { key: 'service.name', value: { stringValue: 'runner' } },
        { key: 'ci.job.id', value: { intValue: String(node.jobId) } },
        { key: 'ci.project.id', value: { intValue: String(PROJECT) } },
        { key: 'ci.pipeline.id', value: { intValue: String(node.pipelineId) } },
      ],
    },
    scopeSpans: [
      {
        scope: { name: 'gitlab-ci-runner' },
        spans: [
          execution,
          ...stages.map(([name, from, to], i) => span(`f${node.jobId.toString(16).padStart(14, '0')}${i}`, executionId, name, from, to)),
        ] as never[],
      },
    ],
  };
}
