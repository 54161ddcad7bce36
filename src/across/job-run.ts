import type { RunnerPart, WaitingFor } from '../critical-path/critical-path';

/**
 * One row per job run (SPEC §13): the model every question across pipelines reads (compare, regressions, waste,
 * runner queues and the what-if), never all spans. One attempt of one job (a retried job is several rows, one per
 * attempt), with its pipeline's facts repeated on it so a row is read alone. Built from a pipeline's trace by
 * `jobRunsOfTrace` (src/across/job-runs-of-trace.ts) for the embedded backend, and kept by ClickHouse in the table a
 * materialized view fills from the Collector's writes.
 *
 * Times are epoch milliseconds and durations whole milliseconds, so sums over rows add up exactly.
 */
export interface JobRunRow {
  readonly projectId: number;
  readonly pipelineId: number;
  /** The root pipeline of the trace (this pipeline's own id when it is the root). */
  readonly rootPipelineId: number;
  /** `vcs.ref.head.name` of the pipeline; '' when GitLab did not say. */
  readonly ref: string;
  /** `vcs.ref.head.revision`: the commit the pipeline ran; '' when not known. */
  readonly sha: string;
  /** `ci.pipeline.source` (push, merge_request_event, schedule, parent_pipeline…); '' when not known. */
  readonly source: string;
  /** The pipeline's creation and end (its span's start and end), ms; `pipelineFinishedAt` null while it runs. */
  readonly pipelineCreatedAt: number;
  readonly pipelineFinishedAt: number | null;
  /** `ci.pipeline.status` at its latest version ('' when not known). */
  readonly pipelineStatus: string;

  readonly jobId: number;
  /** `cicd.pipeline.task.name`. */
  readonly name: string;
  /** `ci.job.stage`; '' when not known. */
  readonly stage: string;
  /** 1 for the first run of this name in this pipeline, 2 for its first retry, … */
  readonly attempt: number;
  /** A later attempt of the same name in the same pipeline exists: this run was superseded. */
  readonly retried: boolean;
  /** `ci.job.status`: success, failed, canceled, skipped, manual… */
  readonly status: string;
  readonly failureReason: string | null;
  readonly allowFailure: boolean;

  /** The runner that ran it (Job Hook `runner.id`, `cicd.worker.id`); null when no runner took it. */
  readonly runnerId: number | null;
  /** `ci.runner.type`: instance_type, group_type, project_type; '' when not known. */
  readonly runnerType: string;
  /** The runner's tags (Job Hook `runner.tags`), sorted and joined with ',' ('' for an untagged runner or unknown). */
  readonly runnerTags: string;

  /** When the job was created, became pending (GitLab's `queued_at`), a runner took it, and it ended; ms. */
  readonly createdAt: number;
  readonly pendingAt: number;
  readonly startedAt: number | null;
  readonly finishedAt: number | null;

  /** The wait before the job became pending, since its blocker ended (SPEC §12 walk), and what it waited for. */
  readonly waitMs: number;
  readonly waitingFor: WaitingFor;
  /** Pending → picked up. */
  readonly queueMs: number;
  /** Picked up → ended, by the runner's stages (all `other` when the runner exported nothing). */
  readonly partsMs: Readonly<Record<RunnerPart, number>>;
  /** Whether the runner's own stage spans were seen (otherwise `partsMs` is all `other`). */
  readonly runnerSpans: boolean;
  /**
   * What the runner's `restore_cache` stage said of the cache, when its spans say (`hit`, `miss`); null when they
   * do not, and a reader infers (and flags it).
   */
  readonly cacheResult: 'hit' | 'miss' | null;

  /** On its root pipeline's critical path (SPEC §12); null while the pipeline runs (no path yet). */
  readonly onCriticalPath: boolean | null;
  /** How much longer it could have taken without delaying the pipeline; 0 on the path; null while unknown. */
  readonly slackMs: number | null;
  /** SPEC §11: 1 for a pipeline kept whole by outcome or with no head threshold, 2^56/(2^56−T) for a threshold T. */
  readonly adjustedCount: number;
}

/** A row's run time on a runner (picked up → ended), ms: what the fleet paid for it. */
export function runMs(row: JobRunRow): number {
  return partsSum(row.partsMs);
}

/** The sum of a run's parts, ms. */
export function partsSum(parts: Readonly<Record<RunnerPart, number>>): number {
  // Each part of RUNNER_PARTS by name: read through a loop over the names, a month's rows take four times as long (a
  // computed key). job-run.spec.ts holds this list and the two below to RUNNER_PARTS.
  return (
    parts.prepare_executor +
    parts.pull_image +
    parts.get_sources +
    parts.restore_cache +
    parts.step_script +
    parts.after_script +
    parts.archive_cache +
    parts.upload_artifacts +
    parts.other
  );
}

/** Parts from `values` in RUNNER_PARTS' order from `at` on (a part not there is 0): the inverse of `partsInto`. */
export function partsFrom(values: ArrayLike<number>, at = 0): Record<RunnerPart, number> {
  const part = (i: number) => (at + i < values.length ? values[at + i] : 0);
  return {
    prepare_executor: part(0),
    pull_image: part(1),
    get_sources: part(2),
    restore_cache: part(3),
    step_script: part(4),
    after_script: part(5),
    archive_cache: part(6),
    upload_artifacts: part(7),
    other: part(8),
  };
}

/** A row's parts into `into`, in RUNNER_PARTS' order, as `runMs` reads them. */
export function partsInto(row: JobRunRow, into: Float64Array): Float64Array {
  const parts = row.partsMs;
  into[0] = parts.prepare_executor;
  into[1] = parts.pull_image;
  into[2] = parts.get_sources;
  into[3] = parts.restore_cache;
  into[4] = parts.step_script;
  into[5] = parts.after_script;
  into[6] = parts.archive_cache;
  into[7] = parts.upload_artifacts;
  into[8] = parts.other;
  return into;
}
