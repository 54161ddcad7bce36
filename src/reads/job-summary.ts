import { round, weightedPercentile } from '../across/percentiles';
/** A job's run as the CI view has it, for the per-job-name summary (SPEC §12 "a project's jobs over a window"). */
export interface JobRun {
  readonly jobId: number;
  readonly name: string;
  readonly stage: string;
  readonly pipelineId: number;
  readonly status: string;
  /** From the runner's pickup to the job's end (GitLab's own `duration`), seconds. */
  readonly durationSeconds: number;
  /** From `queued_at` to the pickup, seconds; 0 when not known. */
  readonly queueSeconds: number;
  /** Whether a later attempt of the same name in the same pipeline exists (this one was retried). */
  readonly retried: boolean;
  /**
   * Whether this run was on its pipeline's critical path and for how long (its pending to its end, seconds), when
   * known: the embedded backend computes the path per pipeline; ClickHouse reads what the control plane wrote on the
   * job span at the pipeline's end (`ci.job.critical_path`, `ci.job.critical_path_seconds`). Undefined: unknown,
   * left out of the share.
   */
  readonly onCriticalPath?: boolean;
  readonly criticalPathSeconds?: number;
  /** SPEC §11: 1 for th:0 or no threshold, 2^56/(2^56−T) for a head threshold T. */
  readonly adjustedCount: number;
}

/**
 * A project's jobs over a window, per job name (SPEC §12): how often they ran and failed, how long they took and
 * waited, and how often and how long they held their pipeline up. Pure, shared by both backends. Every figure is
 * weighted by each run's adjusted count (SPEC §11), so a 10 % head sample with every failure kept still gives a
 * failure rate, not ten times one; counts are then estimates and may be fractional.
 */
export interface Percentiles {
  readonly p50: number;
  readonly p95: number;
}

export interface JobSummary {
  readonly name: string;
  /** Estimated runs (attempts included). */
  readonly runs: number;
  readonly failures: number;
  /** Runs that were retried (a later attempt of the same job exists). */
  readonly retries: number;
  readonly duration_seconds: Percentiles;
  readonly queue_seconds: Percentiles;
  readonly critical_path: {
    /** Share of the runs whose path is known that were on their pipeline's critical path; null when none is known. */
    readonly share: number | null;
    /** Median time such a run held its pipeline up (its pending to its end), seconds; null when never on it. */
    readonly p50_seconds: number | null;
  };
}

const percentiles = (values: ReadonlyArray<readonly [number, number]>): Percentiles => ({
  p50: round(weightedPercentile(values, 0.5) ?? 0),
  p95: round(weightedPercentile(values, 0.95) ?? 0),
});

/** Most runs first, then by name: the order of the jobs summary on both backends. */
export const bySummaryOrder = (a: JobSummary, b: JobSummary): number => b.runs - a.runs || a.name.localeCompare(b.name);

export function summarizeJobs(runs: readonly JobRun[]): JobSummary[] {
  const byName = new Map<string, JobRun[]>();
  for (const run of runs) {
    const group = byName.get(run.name);
    if (group === undefined) byName.set(run.name, [run]);
    else group.push(run);
  }
  const summaries: JobSummary[] = [];
  for (const [name, group] of byName) {
    const weight = (run: JobRun) => (Number.isFinite(run.adjustedCount) && run.adjustedCount > 0 ? run.adjustedCount : 1);
    const sum = (runsOf: readonly JobRun[]) => runsOf.reduce((total, run) => total + weight(run), 0);
    const known = group.filter((run) => run.onCriticalPath !== undefined);
    const onPath = known.filter((run) => run.onCriticalPath === true);
    const timeOnPath = weightedPercentile(
      onPath.filter((run) => run.criticalPathSeconds !== undefined).map((run) => [run.criticalPathSeconds!, weight(run)] as const),
      0.5,
    );
    summaries.push({
      name,
      runs: round(sum(group), 2),
      failures: round(sum(group.filter((run) => run.status === 'failed')), 2),
      retries: round(sum(group.filter((run) => run.retried)), 2),
      duration_seconds: percentiles(group.map((run) => [run.durationSeconds, weight(run)] as const)),
      queue_seconds: percentiles(group.map((run) => [run.queueSeconds, weight(run)] as const)),
      critical_path: {
        share: known.length === 0 ? null : round(sum(onPath) / sum(known), 4),
        p50_seconds: timeOnPath === null ? null : round(timeOnPath),
      },
    });
  }
  return summaries.sort(bySummaryOrder);
}
