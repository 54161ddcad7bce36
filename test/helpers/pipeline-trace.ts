import { collectedSpans } from '../../src/otlp/collected-spans';
import { bridgeSpan, jobSpan, OtlpResourceSpans, pipelineSpan, queueWaitSpan } from '../../src/pipeline-spans/pipeline-span-model';
import type { StoredSpan } from '../../src/reads/trace-reads';
import { pipelineSpanIdFor, queueSpanIdFor, spanIdFor, traceIdFor } from '../../src/trace-context/trace-context';

/**
 * A pipeline's trace as the collector receives it, for tests and benches of the read side (SPEC §12): the
 * control plane's spans from the real span model (src/pipeline-spans/pipeline-span-model.ts), with the ids the
 * service derives, and the runner's spans as GitLab Runner makes them (resource `service.name=runner`, one
 * `job_execution` under the job span with the runner's span attributes, one child span per build stage).
 * Times are seconds after `createdAt`.
 */

const SERVICE = 'gitlab-ci';
const KEY = Buffer.alloc(32, 7);

/** Build stages as [span name, seconds], run back to back from the pickup. */
export type Stages = ReadonlyArray<readonly [string, number]>;

export const SCRIPT_ONLY = (seconds: number): Stages => [['step_script', seconds]];

export interface JobFacts {
  readonly jobId: number;
  readonly name: string;
  readonly stage?: string;
  /** Defaults to the builder's root pipeline. */
  readonly pipelineId?: number;
  readonly status?: 'success' | 'failed' | 'canceled';
  readonly queuedAt: number;
  readonly pickedUpAt: number;
  /** GitLab's finished_at; the runner's stages must fit before it. Undefined: still running (queue wait only). */
  readonly finishedAt?: number;
  /** The runner's stages; null: the runner's export never arrived. */
  readonly stages?: Stages | null;
  /** Played by a person (`CI_JOB_MANUAL`). */
  readonly manual?: boolean;
  /** GitLab's `when`, as a Pipeline Hook's `builds` say it (`manual`, `delayed`, …). */
  readonly when?: string;
  /** GitLab said it was `waiting_for_resource` before it became pending. */
  readonly waitedForResource?: boolean;
  /** GitLab's `retries_count`, as the Job Hook says it. */
  readonly retriesCount?: number;
  /**
   * The pickup got no `queued_at` (no queue-wait span): the job span's times are the Job Hook's, `queuedAt` through
   * its `build_queued_duration`.
   */
  readonly withoutQueuedAtAtPickup?: boolean;
  /** The runner GitLab's Job Hook names (`runner.id`, `runner_type`, `runner.tags`); runner 17, a project runner, by default. */
  readonly runner?: { readonly id: number; readonly type?: string; readonly tags?: readonly string[] };
  /** GitLab's `allow_failure` and `created_at` (seconds, like the other times) of the job, as its Job Hook says them. */
  readonly allowFailure?: boolean;
  readonly createdAt?: number;
  /** Spans a program in the job exported under the job span (TRACEPARENT), with their attributes. */
  readonly programSpans?: ReadonlyArray<{ readonly name: string; readonly attributes: Record<string, string | number | boolean> }>;
}

/** What a Pipeline Hook says of a pipeline's end (times in seconds after the root's creation). */
export interface PipelineFacts {
  readonly status: string;
  readonly finishedAt: number;
  readonly createdAt?: number;
  readonly ref?: string;
  readonly sha?: string;
  readonly source?: string;
}

const nanos = (epochMs: number) => `${BigInt(Math.round(epochMs)) * 1_000_000n}`;

export class PipelineTrace {
  readonly traceId: string;
  private readonly resourceSpansList: OtlpResourceSpans[] = [];
  private counter = 0;

  constructor(
    readonly projectId: number,
    readonly rootPipelineId: number,
    /** Epoch ms the root pipeline was created. */
    readonly createdAt = Date.parse('2026-11-25T10:00:00Z'),
    readonly tracestate?: string,
    readonly key = KEY,
  ) {
    this.traceId = traceIdFor(key, rootPipelineId);
  }

  at(seconds: number): number {
    return this.createdAt + seconds * 1000;
  }

  jobSpanId(jobId: number): string {
    return spanIdFor(this.key, jobId);
  }

  pipelineSpanId(pipelineId: number): string {
    return pipelineSpanIdFor(this.key, pipelineId);
  }

  private traced(pipelineId: number) {
    return {
      pipelineId,
      rootPipelineId: this.rootPipelineId,
      projectId: this.projectId,
      traceId: this.traceId,
      ...(this.tracestate === undefined ? {} : { tracestate: this.tracestate }),
    };
  }

  /** A job: its queue wait (at pickup), its span (at its end), its runner's spans, what programs in it exported. */
  job(facts: JobFacts): this {
    const pipelineId = facts.pipelineId ?? this.rootPipelineId;
    const tracedJob = {
      ...this.traced(pipelineId),
      jobId: facts.jobId,
      runnerId: facts.runner?.id ?? 17,
      runnerType: facts.runner?.type ?? 'project_type',
      ...(facts.withoutQueuedAtAtPickup === true ? {} : { queuedAt: this.at(facts.queuedAt) }),
      pickedUpAt: this.at(facts.pickedUpAt),
    };
    const jobSpanId = this.jobSpanId(facts.jobId);
    if (facts.withoutQueuedAtAtPickup !== true) {
      const queue = queueWaitSpan(
        SERVICE,
        { traceId: this.traceId, spanId: queueSpanIdFor(this.key, facts.jobId), parentSpanId: jobSpanId, tracestate: this.tracestate },
        { ...tracedJob, queuedAt: this.at(facts.queuedAt) },
      );
      this.push(facts.manual === true ? withAttribute(queue.resourceSpans, 'ci.job.manual', true) : queue.resourceSpans);
    }
    if (facts.finishedAt !== undefined) {
      const job = jobSpan(
        SERVICE,
        { traceId: this.traceId, spanId: jobSpanId, parentSpanId: this.pipelineSpanId(pipelineId), tracestate: this.tracestate },
        tracedJob,
        {
          status: facts.status ?? 'success',
          finishedAt: this.at(facts.finishedAt),
          startedAt: this.at(facts.pickedUpAt),
          ...(facts.withoutQueuedAtAtPickup === true ? { queuedDuration: facts.pickedUpAt - facts.queuedAt } : {}),
          name: facts.name,
          stage: facts.stage ?? facts.name,
          ...(facts.when === undefined ? {} : { when: facts.when, manual: facts.when === 'manual' }),
          ...(facts.waitedForResource === undefined ? {} : { waitedForResource: facts.waitedForResource }),
          ...(facts.retriesCount === undefined ? {} : { retriesCount: facts.retriesCount }),
          ...(facts.status === 'failed' ? { failureReason: 'script_failure' } : {}),
          ...(facts.runner?.tags === undefined ? {} : { runnerTags: facts.runner.tags }),
          ...(facts.allowFailure === undefined ? {} : { allowFailure: facts.allowFailure }),
          ...(facts.createdAt === undefined ? {} : { createdAt: this.at(facts.createdAt) }),
        },
      );
      this.push(facts.manual === true ? withAttribute(job.resourceSpans, 'ci.job.manual', true) : job.resourceSpans);
    }
    const stages = facts.stages === undefined ? SCRIPT_ONLY((facts.finishedAt ?? facts.pickedUpAt) - facts.pickedUpAt) : facts.stages;
    if (stages !== null && facts.finishedAt !== undefined) this.runnerSpans(facts, pipelineId, jobSpanId, stages);
    if (facts.programSpans !== undefined && facts.programSpans.length > 0) this.programSpans(facts, pipelineId, jobSpanId);
    return this;
  }

  /** A pipeline's span as its terminal Pipeline Hook makes it; a child's hangs on its bridge. */
  pipeline(pipelineId: number, end: PipelineFacts, bridgeJobId?: number): this {
    this.push(this.pipelineSpan(pipelineId, end, bridgeJobId).resourceSpans);
    return this;
  }

  /** A pipeline's span as the control plane draws it (`end.status` running: a reopened pipeline's, see reopenedPipelineEnd). */
  pipelineSpan(pipelineId: number, end: PipelineFacts, bridgeJobId?: number) {
    const place = {
      traceId: this.traceId,
      spanId: this.pipelineSpanId(pipelineId),
      tracestate: this.tracestate,
      ...(pipelineId === this.rootPipelineId
        ? {}
        : { parentSpanId: bridgeJobId === undefined ? this.pipelineSpanId(this.rootPipelineId) : this.jobSpanId(bridgeJobId) }),
    };
    const facts = {
      status: end.status,
      createdAt: this.at(end.createdAt ?? 0),
      finishedAt: this.at(end.finishedAt),
      ref: end.ref ?? 'main',
      ...(end.sha === undefined ? {} : { sha: end.sha }),
      ...(end.source === undefined ? {} : { source: end.source }),
    };
    return pipelineSpan(SERVICE, place, this.traced(pipelineId), facts);
  }

  /** The trigger job of a child pipeline: it lasts as the child does. */
  bridge(jobId: number, parentPipelineId: number, childPipelineId: number, child: { createdAt: number; finishedAt: number; status?: string }): this {
    const span = bridgeSpan(
      SERVICE,
      { traceId: this.traceId, spanId: this.jobSpanId(jobId), parentSpanId: this.pipelineSpanId(parentPipelineId), tracestate: this.tracestate },
      { jobId, pipelineId: parentPipelineId, projectId: this.projectId, downstreamPipelineId: childPipelineId },
      { status: child.status ?? 'success', createdAt: this.at(child.createdAt), finishedAt: this.at(child.finishedAt) },
    );
    this.push(span.resourceSpans);
    return this;
  }

  /** Any ResourceSpans, as given (a span of another shape, a copy sent twice). */
  push(resourceSpans: OtlpResourceSpans): this {
    this.resourceSpansList.push(resourceSpans);
    return this;
  }

  /** Each export as the collector got it: one OTLP/JSON `ExportTraceServiceRequest` a ResourceSpans. */
  resourceSpans(): OtlpResourceSpans[] {
    return [...this.resourceSpansList];
  }

  /** The spans as a backend returns them. */
  spans(): StoredSpan[] {
    return collectedSpans({ resourceSpans: this.resourceSpansList });
  }

  private nextSpanId(): string {
    this.counter += 1;
    return `${this.rootPipelineId.toString(16).padStart(8, '0')}${this.counter.toString(16).padStart(8, '0')}`.slice(-16);
  }

  private runnerSpans(facts: JobFacts, pipelineId: number, jobSpanId: string, stages: Stages): void {
    const executionId = this.nextSpanId();
    let at = this.at(facts.pickedUpAt);
    const stageSpans = stages.map(([name, seconds]) => {
      const span = {
        traceId: this.traceId,
        spanId: this.nextSpanId(),
        parentSpanId: executionId,
        name,
        kind: 1,
        startTimeUnixNano: nanos(at),
        endTimeUnixNano: nanos(at + seconds * 1000),
        attributes: [],
      };
      at += seconds * 1000;
      return span;
    });
    const execution = {
      traceId: this.traceId,
      spanId: executionId,
      parentSpanId: jobSpanId,
      name: 'job_execution',
      kind: 1,
      startTimeUnixNano: nanos(this.at(facts.pickedUpAt)),
      endTimeUnixNano: nanos(at),
      attributes: [
        { key: 'ci.job.id', value: { intValue: String(facts.jobId) } },
        { key: 'ci.project.id', value: { intValue: String(this.projectId) } },
        { key: 'ci.pipeline.id', value: { stringValue: String(pipelineId) } },
        { key: 'ci.pipeline.source', value: { stringValue: 'push' } },
        { key: 'ci.runner.id', value: { intValue: String(facts.runner?.id ?? 17) } },
        { key: 'ci.runner.executor', value: { stringValue: 'docker' } },
        { key: 'ci.job.status', value: { stringValue: facts.status ?? 'success' } },
      ],
      ...(facts.status === 'failed' ? { status: { code: 2, message: 'job failed' } } : {}),
    };
    this.push({
      resource: { attributes: this.stampedResource('runner', facts.jobId, pipelineId, facts.runner?.id) },
      scopeSpans: [{ scope: { name: 'gitlab-ci-runner' }, spans: [execution, ...stageSpans] as never[] }],
    });
  }

  private programSpans(facts: JobFacts, pipelineId: number, jobSpanId: string): void {
    const start = this.at(facts.pickedUpAt);
    const spans = facts.programSpans!.map(({ name, attributes }) => ({
      traceId: this.traceId,
      spanId: this.nextSpanId(),
      parentSpanId: jobSpanId,
      name,
      kind: 1,
      startTimeUnixNano: nanos(start),
      endTimeUnixNano: nanos(start + 100),
      attributes: Object.entries(attributes).map(([key, value]) => ({
        key,
        value: typeof value === 'string' ? { stringValue: value } : typeof value === 'boolean' ? { boolValue: value } : { intValue: String(value) },
      })),
    }));
    this.push({
      resource: { attributes: this.stampedResource('rspec', facts.jobId, pipelineId, facts.runner?.id) },
      scopeSpans: [{ scope: { name: 'ci-job' }, spans: spans as never[] }],
    });
  }

  /** The identity the gateway stamps on a resource (SPEC §6). */
  private stampedResource(serviceName: string, jobId: number, pipelineId: number, runnerId = 17) {
    return [
      { key: 'service.name', value: { stringValue: serviceName } },
      { key: 'ci.job.id', value: { intValue: String(jobId) } },
      { key: 'ci.project.id', value: { intValue: String(this.projectId) } },
      { key: 'ci.pipeline.id', value: { intValue: String(pipelineId) } },
      { key: 'ci.runner.id', value: { intValue: String(runnerId) } },
      { key: 'ci.sampling.reason', value: { stringValue: 'head' } },
    ] as OtlpResourceSpans['resource']['attributes'];
  }
}

function withAttribute(resourceSpans: OtlpResourceSpans, key: string, value: boolean): OtlpResourceSpans {
  const [scopeSpans] = resourceSpans.scopeSpans;
  const [span] = scopeSpans.spans;
  return { ...resourceSpans, scopeSpans: [{ ...scopeSpans, spans: [{ ...span, attributes: [...span.attributes, { key, value: { boolValue: value } }] }] }] };
}
