import { criticalPathWalk, RUNNER_PARTS } from '../critical-path/critical-path';
import { collectedSpans } from '../otlp/collected-spans';
import { trustedSpans } from '../otlp/control-plane-mark';
import type { AttributeValue, ControlPlaneSpan } from './pipeline-span-model';

/**
 * What the control plane writes of a pipeline's critical path when its root pipeline ends (SPEC §12, docs/reads.md
 * "Attributes"), so that dashboards aggregate it without the read API. Computed by the one critical path function
 * (src/critical-path), over the control plane's own spans of the trace: its job spans, queue waits, bridges and
 * pipeline spans, which fix every job's pending, pickup and end, and so the path and the slack exactly as the reads
 * find them. The runner's stages are not among them: the run of each job on the path is written whole, as `run`,
 * and the reads split it by stage.
 *
 * Each job span also gets the walk's figures for it (SPEC §13's row of a job run, src/across/job-run.ts): its wait
 * and what for, its queue and run (the path's own, clamped, for a job on it), which attempt it is and whether a later
 * one replaced it. A reader across pipelines sums these instead of walking every trace again: ClickHouse's
 * ci_job_runs keeps them in columns of their own.
 */

/** The walk's figures on a job span (docs/reads.md "Attributes"); reserved, as the rest of the path (control-plane-mark.ts). */
export const JOB_FIGURES = {
  wait: 'ci.job.critical_path.wait_seconds',
  waitingFor: 'ci.job.critical_path.waiting_for',
  queue: 'ci.job.critical_path.queue_seconds',
  run: 'ci.job.critical_path.run_seconds',
  attempt: 'ci.job.attempt',
  retried: 'ci.job.retried',
} as const;

/** The parts of the path's time the control plane knows from GitLab, written on the root pipeline span. */
export const WRITTEN_PATH_PARTS = ['delay', 'manual_wait', 'retry_wait', 'delayed_wait', 'resource_wait', 'queue', 'run'] as const;

export interface WrittenCriticalPath {
  /** By job id: `ci.job.critical_path`, and `ci.job.critical_path_seconds` on it or `ci.job.slack_seconds` off it. */
  readonly jobs: ReadonlyMap<number, Readonly<Record<string, AttributeValue>>>;
  /** `ci.pipeline.critical_path.<part>_seconds` for each of WRITTEN_PATH_PARTS: they add up to the path's time. */
  readonly pipeline: Readonly<Record<string, AttributeValue>>;
}

/** Null when no job of the trace has ended (nothing to write). */
export function writtenCriticalPath(spans: readonly ControlPlaneSpan[]): WrittenCriticalPath | null {
  // Through the readers' one filter, so that the written path and the API's are the same function of the same spans.
  const walk = criticalPathWalk(trustedSpans(collectedSpans({ resourceSpans: spans.map((span) => span.resourceSpans as unknown as Record<string, unknown>) })));
  const path = walk.path;
  if (path === null) return null;
  const jobs = new Map<number, Record<string, AttributeValue>>();
  for (const element of path.path) jobs.set(element.job_id, { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': element.duration_seconds });
  for (const element of path.slack) jobs.set(element.job_id, { 'ci.job.critical_path': false, 'ci.job.slack_seconds': element.slack_seconds });
  for (const job of walk.jobs) {
    jobs.set(job.jobId, {
      'ci.job.critical_path': false,
      ...jobs.get(job.jobId),
      // Whole milliseconds, as seconds: a reader gets the walk's own figures back to the millisecond.
      [JOB_FIGURES.wait]: job.waitMs / 1000,
      [JOB_FIGURES.waitingFor]: job.waitingFor,
      [JOB_FIGURES.queue]: job.queueMs / 1000,
      [JOB_FIGURES.run]: RUNNER_PARTS.reduce((sum, part) => sum + job.partsMs[part], 0) / 1000,
      [JOB_FIGURES.attempt]: job.attempt,
      [JOB_FIGURES.retried]: job.superseded,
    });
  }
  // Whole milliseconds summed, so that the parts still add up to the path exactly.
  const runMs = RUNNER_PARTS.reduce((sum, part) => sum + Math.round(path.totals[part] * 1000), 0);
  const seconds: Record<(typeof WRITTEN_PATH_PARTS)[number], number> = {
    delay: path.totals.delay,
    manual_wait: path.totals.manual_wait,
    retry_wait: path.totals.retry_wait,
    delayed_wait: path.totals.delayed_wait,
    resource_wait: path.totals.resource_wait,
    queue: path.totals.queue,
    run: runMs / 1000,
  };
  return {
    jobs,
    pipeline: Object.fromEntries(WRITTEN_PATH_PARTS.map((part) => [`ci.pipeline.critical_path.${part}_seconds`, seconds[part]])),
  };
}
