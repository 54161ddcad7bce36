import { JobRunRow, runMs } from './job-run';

/**
 * The job runs of one root pipeline, its child pipelines' included (SPEC §12: the critical path explains the root),
 * with the root's facts: what compare, regressions and the what-if read per pipeline.
 */
export interface PipelineRuns {
  /** The root pipeline's id. */
  readonly pipelineId: number;
  readonly ref: string;
  readonly sha: string;
  readonly source: string;
  /** The root pipeline's creation and end, ms; `finishedAt` null while it runs. */
  readonly createdAt: number;
  readonly finishedAt: number | null;
  readonly status: string;
  /** SPEC §11, the same on every row of a trace: what this pipeline stands for. */
  readonly adjustedCount: number;
  readonly rows: readonly JobRunRow[];
}

/** A row's (or a pipeline's) adjusted count as a weight: a missing or broken one counts once, as in the jobs summary. */
export const weightOf = (item: { readonly adjustedCount: number }): number =>
  Number.isFinite(item.adjustedCount) && item.adjustedCount > 0 ? item.adjustedCount : 1;

/** Milliseconds as the answers' seconds: three decimals, exact for whole milliseconds. */
export const seconds = (millis: number): number => Math.round(millis) / 1000;

/** The rows by root pipeline, oldest first (creation, then id): the order regressions read pipelines in. */
export function groupByPipeline(rows: readonly JobRunRow[]): PipelineRuns[] {
  const byRoot = new Map<number, JobRunRow[]>();
  for (const row of rows) {
    const members = byRoot.get(row.rootPipelineId);
    if (members === undefined) byRoot.set(row.rootPipelineId, [row]);
    else members.push(row);
  }
  const pipelines: PipelineRuns[] = [];
  for (const [pipelineId, members] of byRoot) {
    // The root's own rows carry its facts; a root none of whose jobs is here (only a trigger) is told by its children.
    const own = members.find((row) => row.pipelineId === pipelineId);
    const facts = own ?? members[0];
    pipelines.push({
      pipelineId,
      ref: facts.ref,
      sha: facts.sha,
      source: own?.source ?? '',
      createdAt: own?.pipelineCreatedAt ?? Math.min(...members.map((row) => row.pipelineCreatedAt)),
      finishedAt: own !== undefined ? own.pipelineFinishedAt : null,
      status: own?.pipelineStatus ?? '',
      adjustedCount: Math.max(...members.map(weightOf)),
      rows: members,
    });
  }
  return pipelines.sort((a, b) => a.createdAt - b.createdAt || a.pipelineId - b.pipelineId);
}

/** A row's time on its pipeline's path when on it: the wait before it, its queue wait and its run, ms. */
export const timeMs = (row: JobRunRow): number => row.waitMs + row.queueMs + runMs(row);

/**
 * A pipeline's critical-path time, ms: the sum over its rows on the path of their wait, queue and run, which is the
 * path's duration from the root's creation (SPEC §12: nothing counted twice, nothing left out). Null while no row's
 * path is known (the pipeline runs).
 */
export function pathMs(pipeline: Pick<PipelineRuns, 'rows'>): number | null {
  let known = false;
  let total = 0;
  for (const row of pipeline.rows) {
    if (row.onCriticalPath === null) continue;
    known = true;
    if (row.onCriticalPath) total += timeMs(row);
  }
  return known ? total : null;
}
