import { SAMPLING_REASON_ATTRIBUTE, FINISHED_STATUSES } from '../otlp/ci-identity';
import { adjustedCountOf } from '../otlp/span-identity';
import type { StoredSpan } from './trace-reads';

/**
 * How complete a trace read is (SPEC §12), so a caller never mistakes a partial trace for a whole one: how many
 * spans, how many roots (a whole trace has one, its pipeline), how many name a parent that is not there, how many
 * jobs have no runner spans, whether the pipeline has finished, and why it was kept (SPEC §11) with the count it
 * stands for. Pure.
 */
export interface Completeness {
  /** Spans in the answer: all of them, or READS_MAX_SPANS of them when `truncated`. */
  readonly spans: number;
  /** Spans the trace holds for this read, whether answered or not. */
  readonly total_spans: number;
  /** The answer was cut at READS_MAX_SPANS (SPEC §12 "a read is bounded"); the rest of the fields still speak of the whole. */
  readonly truncated: boolean;
  readonly roots: number;
  readonly missing_parents: number;
  /** Jobs that ran (or were meant to) whose runner's `job_execution` span is not in the trace. */
  readonly jobs_without_runner_spans: number;
  /**
   * Every pipeline of the trace has ended (the root and each child seen through a bridge, a job or a queue wait has a
   * pipeline span whose status GitLab said is finished; a reopened one, `running` again, is not), there is one root,
   * no span's parent is missing and no job is unreported (picked up or run, its job span not closed by GitLab).
   */
  readonly final: boolean;
  /** `ci.sampling.reason` of the pipeline's spans: head, failed, slow, queued, no_outcome; null when none says. */
  readonly sampling_reason: string | null;
  /** How many pipelines this one stands for, from its tracestate's `ot=th` (SPEC §11): 1 when kept whole. */
  readonly adjusted_count: number;
}

/** A job that never ran has no runner spans to miss. */
const NEVER_RAN = new Set(['canceled', 'skipped']);
/** Spans the control plane emits, which carry the pipeline's tracestate (a runner's carry none: it is never told). */
const CONTROL_PLANE = new Set(['pipeline', 'bridge', 'job', 'queue_wait']);

/** The pipeline span at the top of `spans`: the one whose parent is not among them (the root, or a child read alone). */
export function topPipelineSpan(spans: readonly StoredSpan[], ids: ReadonlySet<string> = new Set(spans.map((span) => span.spanId))): StoredSpan | undefined {
  return spans.find((span) => span.name === 'pipeline' && !ids.has(span.parentSpanId));
}

export function completenessOf(spans: readonly StoredSpan[]): Completeness {
  const ids = new Set(spans.map((span) => span.spanId));
  const withRunner = new Set<string>();
  let roots = 0;
  let missingParents = 0;
  let unreported = 0;
  for (const span of spans) {
    if (span.parentSpanId === '') roots += 1;
    else if (!ids.has(span.parentSpanId)) missingParents += 1;
    if (span.name === 'job_execution') withRunner.add(span.parentSpanId);
    // A job picked up (its queue wait) or run (its runner's span) whose job span GitLab has not closed yet.
    if ((span.name === 'queue_wait' || span.name === 'job_execution') && !ids.has(span.parentSpanId)) unreported += 1;
  }
  let withoutRunner = 0;
  for (const span of spans) {
    if (span.name !== 'job' || withRunner.has(span.spanId)) continue;
    if (!NEVER_RAN.has(String(span.attributes['ci.job.status'] ?? ''))) withoutRunner += 1;
  }
  const pipeline = topPipelineSpan(spans, ids);
  const controlPlane = pipeline ?? spans.find((span) => CONTROL_PLANE.has(span.name));
  const reason =
    pipeline?.resource[SAMPLING_REASON_ATTRIBUTE] ??
    spans.find((span) => span.resource[SAMPLING_REASON_ATTRIBUTE] !== undefined)?.resource[SAMPLING_REASON_ATTRIBUTE];
  return {
    spans: spans.length,
    total_spans: spans.length,
    truncated: false,
    roots,
    missing_parents: missingParents,
    jobs_without_runner_spans: withoutRunner,
    final: roots === 1 && missingParents === 0 && unreported === 0 && everyPipelineEnded(spans),
    sampling_reason: reason === undefined || reason === '' ? null : String(reason),
    adjusted_count: controlPlane === undefined ? 1 : adjustedCountOf(controlPlane.traceState),
  };
}

/**
 * Whether every pipeline the trace names has a pipeline span GitLab said finished: the pipelines of its pipeline
 * spans, of its jobs and queue waits (`ci.pipeline.id`), and the children its bridges started in its own project. A child pipeline still
 * running (no `strategy: depend`: its parent ended without it) or a pipeline reopened by a retry or a played job
 * (its span's newer version says `running`) leaves the trace unfinished. Pipeline spans drawn without webhooks carry
 * no GitLab status, so such a trace is never final: only GitLab knows a pipeline has finished.
 */
function everyPipelineEnded(spans: readonly StoredSpan[]): boolean {
  const named = new Set<string>();
  const ended = new Set<string>();
  let pipelines = 0;
  for (const span of spans) {
    if (span.name === 'pipeline') {
      pipelines += 1;
      const pipelineId = String(span.attributes['ci.pipeline.id'] ?? span.resource['ci.pipeline.id'] ?? '');
      named.add(pipelineId);
      if (FINISHED_STATUSES.has(String(span.attributes['ci.pipeline.status'] ?? ''))) ended.add(pipelineId);
    } else if (span.name === 'bridge') {
      // A multi-project downstream pipeline is its own project's trace, never this one's (SPEC §12 "Trust"): its
      // bridge, this project's own job, has ended when its span says so, and names no pipeline this trace must hold.
      const child = span.attributes['ci.downstream_pipeline.id'];
      const downstreamProject = span.attributes['ci.downstream_project.id'];
      const ownProject = span.attributes['ci.project.id'] ?? span.resource['ci.project.id'];
      const sameProject = downstreamProject === undefined || String(downstreamProject) === String(ownProject);
      if (child !== undefined && sameProject) named.add(String(child));
    } else if (span.name === 'job' || span.name === 'queue_wait') {
      const pipelineId = span.attributes['ci.pipeline.id'] ?? span.resource['ci.pipeline.id'];
      if (pipelineId !== undefined) named.add(String(pipelineId));
    }
  }
  if (pipelines === 0) return false;
  for (const pipelineId of named) if (!ended.has(pipelineId)) return false;
  return true;
}
