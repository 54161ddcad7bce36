import { trustedSpans } from '../otlp/control-plane-mark';
import { Completeness, completenessOf } from './completeness';
import { CriticalPath, criticalPath, emptyTotals } from '../critical-path/critical-path';
import type { JobSummary } from './job-summary';
import { BASELINE_CANDIDATES, BaselineChoice, chooseBaseline, comparePipelines } from '../across/compare';
import { groupByPipeline, PipelineRuns } from '../across/pipeline-runs';
import { findRegressions } from '../across/regressions';
import { runnerQueue, whatIf } from '../across/runner-queue';
import { wasteLedger } from '../across/waste';
import type { Prices } from '../across/prices';
import { ofProject } from '../otlp/span-identity';
import { capped, jobSubtree, RUNNER_SPAN, spanRank, tracesData } from './trace-selection';
import type { StoredSpan, TimeWindow, TraceRead, TraceReads } from './trace-reads';

/**
 * The heavy half of every read of SPEC §12, one function of (backend, question): fetch the spans, keep the project's,
 * compute completeness and the critical path on all that was fetched, cap the answer at READS_MAX_SPANS and encode it
 * to JSON. It runs in a worker thread (src/reads/reads-pool.ts), never on the event loop that answers job pickups and
 * exports: a 100,000-span trace costs its reader seconds of CPU, not GitLab's job-request API. The answer leaves as
 * bytes, moved to the main thread without a copy.
 */

/** A question, as the service checked it (ids, window) and sends it to a worker: plain data, cloned across threads. */
export type ReadTask =
  | { readonly read: 'pipeline_trace'; readonly projectId: number; readonly pipelineId: number; readonly window: TimeWindow; readonly maxSpans: number }
  | { readonly read: 'job_trace'; readonly projectId: number; readonly jobId: number; readonly window: TimeWindow; readonly maxSpans: number }
  | { readonly read: 'critical_path'; readonly projectId: number; readonly pipelineId: number; readonly window: TimeWindow }
  | { readonly read: 'jobs'; readonly projectId: number; readonly window: TimeWindow; readonly ref: string | null }
  // SPEC §13: questions across pipelines, answered from the job-run rows (src/across/).
  | {
      readonly read: 'compare';
      readonly projectId: number;
      readonly pipelineId: number;
      readonly baselineId: number | null;
      readonly window: TimeWindow;
      /** How far before the target its default baseline's candidates are looked for. */
      readonly lookbackMs: number;
    }
  | { readonly read: 'regressions'; readonly projectId: number; readonly window: TimeWindow; readonly ref: string | null }
  | { readonly read: 'waste'; readonly projectId: number; readonly window: TimeWindow; readonly prices: Prices | null }
  | { readonly read: 'runner_queue'; readonly projectId: number; readonly window: TimeWindow }
  | { readonly read: 'what_if'; readonly projectId: number; readonly window: TimeWindow; readonly tags: string; readonly runners: number };

/** What a read comes to: the encoded answer, or that the project has no such pipeline or job (404). */
export type ReadOutcome =
  | { readonly kind: 'answer'; readonly body: Uint8Array }
  | { readonly kind: 'not_found'; readonly what: 'pipeline' | 'job' | 'baseline pipeline' }
  /** The question cannot be answered from what is recorded (no baseline to compare with): 422 with the reason. */
  | { readonly kind: 'unanswerable'; readonly reason: string };

export interface TraceAnswer {
  readonly trace: { resourceSpans: unknown[] };
  readonly completeness: Completeness;
}

export interface CriticalPathAnswer extends CriticalPath {
  readonly final: boolean;
}

export interface JobsAnswer {
  readonly from: string;
  readonly to: string;
  readonly ref: string | null;
  readonly jobs: JobSummary[];
}

// Its own ArrayBuffer (never a slice of Buffer's shared pool), so the worker can hand it over instead of copying it.
const encoded = (answer: unknown): ReadOutcome => ({ kind: 'answer', body: new TextEncoder().encode(JSON.stringify(answer)) });
const NOT_FOUND = (what: 'pipeline' | 'job' | 'baseline pipeline'): ReadOutcome => ({ kind: 'not_found', what });

export async function answerRead(backend: TraceReads, task: ReadTask, signal?: AbortSignal): Promise<ReadOutcome> {
  switch (task.read) {
    case 'pipeline_trace': {
      const read = await backend.pipelineTrace(task.projectId, task.pipelineId, task.window, { limit: task.maxSpans, signal });
      const spans = ownSpans(read, task.projectId);
      if (spans.length === 0) return NOT_FOUND('pipeline');
      return encoded(traceAnswer(spans, completenessOf(spans), totalOf(read!, spans), task.maxSpans));
    }
    case 'job_trace': {
      const read = await backend.jobTrace(task.projectId, task.jobId, task.window, { limit: task.maxSpans, signal });
      const job = read === null ? null : jobSubtree(ownSpans(read, task.projectId), task.jobId);
      if (job === null) return NOT_FOUND('job');
      const completeness = completenessOf(job.spans);
      // The job span's own parent (its pipeline's span) is outside a job's read by design, not missing.
      const outside = job.spans.some((span) => span.spanId === job.jobSpanId) ? 1 : 0;
      const adjusted = {
        ...completeness,
        missing_parents: completeness.missing_parents - outside,
        final: job.closed && completeness.missing_parents - outside === 0,
      };
      return encoded(traceAnswer(job.spans, adjusted, totalOf(read!, job.spans), task.maxSpans));
    }
    case 'critical_path': {
      // The path and `final` need only the structural spans, which every bounded read holds whole.
      const spans = ownSpans(await backend.pipelineTrace(task.projectId, task.pipelineId, task.window, { limit: 0, signal }), task.projectId);
      if (spans.length === 0) return NOT_FOUND('pipeline');
      const path = criticalPath(spans);
      const final = completenessOf(spans).final;
      const answer: CriticalPathAnswer =
        path === null
          ? { duration_seconds: 0, final, totals: emptyTotals(), path: [], slack: [] }
          : { duration_seconds: path.duration_seconds, final, totals: path.totals, path: path.path, slack: path.slack };
      return encoded(answer);
    }
    case 'jobs': {
      const jobs = await backend.projectJobs(task.projectId, task.window, task.ref ?? undefined, signal);
      const answer: JobsAnswer = { from: new Date(task.window.fromMs).toISOString(), to: new Date(task.window.toMs).toISOString(), ref: task.ref, jobs };
      return encoded(answer);
    }
    case 'compare':
      return compareRead(backend, task, signal);
    case 'regressions': {
      const rows = await backend.jobRunRows(task.projectId, task.window, task.ref === null ? {} : { ref: task.ref }, signal);
      return encoded({ ...windowOf(task.window), ref: task.ref, ...findRegressions(rows) });
    }
    case 'waste': {
      const rows = await backend.jobRunRows(task.projectId, task.window, {}, signal);
      return encoded({ ...windowOf(task.window), ...wasteLedger(rows, task.prices ?? undefined) });
    }
    case 'runner_queue': {
      const rows = await backend.jobRunRows(task.projectId, task.window, {}, signal);
      return encoded(runnerQueue(rows, { from: task.window.fromMs, to: task.window.toMs }));
    }
    case 'what_if': {
      const rows = await backend.jobRunRows(task.projectId, task.window, {}, signal);
      return encoded({ ...windowOf(task.window), ...whatIf(rows, { tags: task.tags, runners: task.runners }) });
    }
    default: {
      const unknown: never = task;
      throw new Error(`no such read: ${JSON.stringify(unknown)}`);
    }
  }
}

/** Where a backend's spans enter the answer: the project's own, by its id or its ancestors' (SPEC §12 "Trust"). */
function ownSpans(read: TraceRead | null, projectId: number): StoredSpan[] {
  // SPEC §12 "Trust": GitLab's account of a job or pipeline only from the control plane's own spans.
  return read === null ? [] : ofProject(trustedSpans(read.spans), projectId);
}

/**
 * How many spans the read holds in all: those fetched and kept, and the others the backend counted but did not return
 * (it returns at most READS_MAX_SPANS of them).
 */
function totalOf(read: TraceRead, kept: readonly StoredSpan[]): number {
  const fetchedOthers = read.spans.length - structuralCount(read.spans);
  return kept.length + Math.max(0, read.others - fetchedOthers);
}

function structuralCount(spans: readonly StoredSpan[]): number {
  const runners = new Set(spans.filter((span) => span.name === RUNNER_SPAN).map((span) => span.spanId));
  return spans.filter((span) => spanRank(span, runners) < 3).length;
}

/** The answer of a trace read: at most `maxSpans` spans, completeness computed on everything fetched, and what was cut. */
function traceAnswer(spans: readonly StoredSpan[], completeness: Completeness, total: number, maxSpans: number): TraceAnswer {
  const answered = capped(spans, maxSpans);
  return {
    trace: tracesData(answered),
    completeness: { ...completeness, spans: answered.length, total_spans: total, truncated: answered.length < total },
  };
}

const DAY_MS = 86_400_000;

const windowOf = (window: TimeWindow) => ({ from: new Date(window.fromMs).toISOString(), to: new Date(window.toMs).toISOString() });

/**
 * SPEC §13 "Compare": the pipeline against the baseline asked for, or by default against the median of the last 20
 * ended pipelines of its ref and source before it (src/across/compare.ts), found among the rows of the lookback
 * before its creation.
 */
async function compareRead(backend: TraceReads, task: Extract<ReadTask, { read: 'compare' }>, signal?: AbortSignal): Promise<ReadOutcome> {
  // A child's id gives its root's rows: what is compared is the root pipeline the child belongs to.
  const target = await backend.pipelineRunRows(task.projectId, task.pipelineId, task.window, signal);
  if (target === null || target.length === 0) return NOT_FOUND('pipeline');
  const [targetRuns] = groupByPipeline(target);
  if (task.baselineId !== null) {
    const window = { fromMs: task.window.fromMs - task.lookbackMs, toMs: task.window.toMs };
    const baseline = await backend.pipelineRunRows(task.projectId, task.baselineId, window, signal);
    if (baseline === null || baseline.length === 0) return NOT_FOUND('baseline pipeline');
    const [baselineRuns] = groupByPipeline(baseline);
    if (baselineRuns.pipelineId === targetRuns.pipelineId) return { kind: 'unanswerable', reason: 'the baseline is the pipeline itself (or its root)' };
    return encoded(comparePipelines(targetRuns.rows, baselineRuns.rows, `pipeline ${baselineRuns.pipelineId}, as asked`));
  }
  let candidates: PipelineRuns[] = [];
  let choice: BaselineChoice | null = null;
  let decided = false;
  // A backend that can list the latest ended pipelines of the ref reads only theirs (twice as many as a baseline is
  // chosen among: a listed one may turn out of another source, or without a path yet).
  if (backend.latestEndedRunRows !== undefined) {
    const window = { fromMs: targetRuns.createdAt - task.lookbackMs, toMs: targetRuns.createdAt };
    const latest = { ref: targetRuns.ref, source: targetRuns.source, except: targetRuns.pipelineId, count: 2 * BASELINE_CANDIDATES };
    const found = await backend.latestEndedRunRows(task.projectId, latest, window, signal);
    candidates = groupByPipeline(found.rows);
    choice = chooseBaseline(candidates, targetRuns);
    // All there were, or enough of them: the window's read would choose the same.
    decided = found.complete || (choice !== null && choice.among >= BASELINE_CANDIDATES);
  }
  // Otherwise the last 20 ended pipelines before it, usually within hours: looked for over a day first, then a week,
  // then the whole lookback, so a busy project's compare reads about a day of its rows, not a month of them.
  for (const since of decided ? [] : [DAY_MS, 7 * DAY_MS, task.lookbackMs].map((span) => Math.min(span, task.lookbackMs))) {
    const window = { fromMs: targetRuns.createdAt - since, toMs: targetRuns.createdAt };
    candidates = groupByPipeline(await backend.jobRunRows(task.projectId, window, targetRuns.ref === '' ? {} : { ref: targetRuns.ref }, signal));
    choice = chooseBaseline(candidates, targetRuns);
    if ((choice !== null && choice.among >= BASELINE_CANDIDATES) || since >= task.lookbackMs) break;
  }
  if (choice === null) {
    return {
      kind: 'unanswerable',
      reason: `no ended pipeline of the same ref and source before pipeline ${targetRuns.pipelineId} to compare with; name one as baseline`,
    };
  }
  const baselineRuns = candidates.find((pipeline) => pipeline.pipelineId === choice.pipelineId)!;
  const comparison = comparePipelines(targetRuns.rows, baselineRuns.rows, choice.description);
  return encoded({ ...comparison, baseline: { ...comparison.baseline, among: choice.among } });
}
