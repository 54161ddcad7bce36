import { RUNNER_PARTS, WaitingFor } from '../critical-path/critical-path';
import { weightedPercentile } from './percentiles';
import { runMs, type JobRunRow } from './job-run';
import { groupByPipeline, pathMs, PipelineRuns, seconds, timeMs, weightOf } from './pipeline-runs';

/**
 * Compare (SPEC §13): one pipeline against a baseline of the same project and ref, why its critical path took longer
 * or shorter. Two pipelines never share a job id or a span id, so jobs are matched by name and stage. The change in
 * the path's time is split exactly, in whole milliseconds: a job on both paths gives each part its own difference
 * (GitLab's delay, the other waits by cause, the queue, each runner stage); the time of a job on only one of the two
 * paths is `path_moved`, whatever it was spent on, since it is there because a different job became critical, not
 * because one of its stages changed. An attempt superseded by a retry gives its queue and run to `retry`: the job's
 * stages are its last attempt's. Pure, no I/O: the endpoint reads the rows and picks the baseline.
 */

/** What the change in the path's time is split into: the waits by cause, the queue, the runner's stages, the path moving. */
export const CONTRIBUTIONS = ['delay', 'manual', 'retry', 'delayed', 'resource', 'queue', ...RUNNER_PARTS, 'path_moved'] as const;
export type Contribution = (typeof CONTRIBUTIONS)[number];

const WAIT_CONTRIBUTION: Readonly<Record<WaitingFor, Contribution>> = {
  gitlab: 'delay',
  manual: 'manual',
  retry: 'retry',
  delayed: 'delayed',
  resource: 'resource',
};

/** How many ended pipelines before the target the default baseline is chosen among. */
export const BASELINE_CANDIDATES = 20;

export interface JobDelta {
  readonly name: string;
  readonly stage: string;
  /** Target minus baseline of the job's wait, queue and run, every attempt summed; a job in one pipeline only counts 0 in the other. */
  readonly delta_seconds: number;
  readonly target_seconds: number;
  readonly baseline_seconds: number;
  readonly on_critical_path: { readonly target: boolean; readonly baseline: boolean };
}

export interface PipelineComparison {
  readonly pipeline_id: number;
  readonly baseline: { readonly pipeline_id: number; readonly description: string };
  /** Both pipelines' paths are known (both ended); otherwise the path figures are the path so far, or 0. */
  readonly paths_known: boolean;
  readonly critical_path_seconds: { readonly target: number; readonly baseline: number };
  readonly duration_delta_seconds: number;
  /** The delta by part; they add up to `duration_delta_seconds` exactly. */
  readonly contributions: Readonly<Record<Contribution, number>>;
  /** Per job name and stage, largest change first. */
  readonly jobs: readonly JobDelta[];
  /** Job names only the target ran, and only the baseline ran. */
  readonly added: readonly string[];
  readonly gone: readonly string[];
  /** What the figures rest on: the target and its baseline. */
  readonly pipelines: number;
}

export interface BaselineChoice {
  readonly pipelineId: number;
  readonly description: string;
  /** How many pipelines it was the median of. */
  readonly among: number;
}

const jobKey = (row: JobRunRow) => `${row.stage}\u0000${row.name}`;

interface JobTimes {
  readonly name: string;
  readonly stage: string;
  /** Wait, queue and run of every attempt, ms. */
  total: number;
  onPath: boolean;
  /** The job's time on the path by part, ms. */
  readonly pathParts: Record<Contribution, number>;
}

function emptyContributions(): Record<Contribution, number> {
  return Object.fromEntries(CONTRIBUTIONS.map((part) => [part, 0])) as Record<Contribution, number>;
}

function jobTimesOf(rows: readonly JobRunRow[]): Map<string, JobTimes> {
  const jobs = new Map<string, JobTimes>();
  for (const row of rows) {
    const key = jobKey(row);
    let job = jobs.get(key);
    if (job === undefined) {
      job = { name: row.name, stage: row.stage, total: 0, onPath: false, pathParts: emptyContributions() };
      jobs.set(key, job);
    }
    job.total += timeMs(row);
    if (row.onCriticalPath !== true) continue;
    job.onPath = true;
    job.pathParts[WAIT_CONTRIBUTION[row.waitingFor]] += row.waitMs;
    if (row.retried) {
      // An attempt a later one superseded: its queue and run are what the retry cost the path (as waste counts them),
      // not a change in the job's stages, which are its last attempt's (SPEC §12).
      job.pathParts.retry += row.queueMs + runMs(row);
      continue;
    }
    job.pathParts.queue += row.queueMs;
    for (const part of RUNNER_PARTS) job.pathParts[part] += row.partsMs[part];
  }
  return jobs;
}

function onePipeline(rows: readonly JobRunRow[], which: string): PipelineRuns {
  const pipelines = groupByPipeline(rows);
  if (pipelines.length !== 1) throw new RangeError(`${which}: the rows of one root pipeline are needed, got ${pipelines.length}`);
  return pipelines[0];
}

const sumParts = (parts: Readonly<Record<Contribution, number>>) => CONTRIBUTIONS.reduce((sum, part) => sum + parts[part], 0);

/**
 * Compares one pipeline's rows (the root's and its children's) with a baseline's. Throws a RangeError when either is
 * not the rows of exactly one root pipeline (the endpoint answers 404 before).
 */
export function comparePipelines(target: readonly JobRunRow[], baseline: readonly JobRunRow[], baselineDescription: string): PipelineComparison {
  const targetPipeline = onePipeline(target, 'target');
  const baselinePipeline = onePipeline(baseline, 'baseline');
  const targetJobs = jobTimesOf(target);
  const baselineJobs = jobTimesOf(baseline);
  const contributions = emptyContributions();
  const jobs: Array<JobDelta & { readonly deltaMs: number }> = [];
  for (const key of new Set([...targetJobs.keys(), ...baselineJobs.keys()])) {
    const now = targetJobs.get(key);
    const before = baselineJobs.get(key);
    if (now?.onPath === true && before?.onPath === true) {
      for (const part of CONTRIBUTIONS) contributions[part] += now.pathParts[part] - before.pathParts[part];
    } else {
      contributions.path_moved += (now?.onPath === true ? sumParts(now.pathParts) : 0) - (before?.onPath === true ? sumParts(before.pathParts) : 0);
    }
    const deltaMs = (now?.total ?? 0) - (before?.total ?? 0);
    jobs.push({
      name: (now ?? before)!.name,
      stage: (now ?? before)!.stage,
      deltaMs,
      delta_seconds: seconds(deltaMs),
      target_seconds: seconds(now?.total ?? 0),
      baseline_seconds: seconds(before?.total ?? 0),
      on_critical_path: { target: now?.onPath ?? false, baseline: before?.onPath ?? false },
    });
  }
  jobs.sort((a, b) => Math.abs(b.deltaMs) - Math.abs(a.deltaMs) || a.stage.localeCompare(b.stage) || a.name.localeCompare(b.name));

  const targetPath = pathMs(targetPipeline);
  const baselinePath = pathMs(baselinePipeline);
  const names = (from: Map<string, JobTimes>, other: Map<string, JobTimes>) =>
    [...new Set([...from.entries()].filter(([key]) => !other.has(key)).map(([, job]) => job.name))].sort();
  return {
    pipeline_id: targetPipeline.pipelineId,
    baseline: { pipeline_id: baselinePipeline.pipelineId, description: baselineDescription },
    paths_known: targetPath !== null && baselinePath !== null && targetPipeline.finishedAt !== null && baselinePipeline.finishedAt !== null,
    critical_path_seconds: { target: seconds(targetPath ?? 0), baseline: seconds(baselinePath ?? 0) },
    duration_delta_seconds: seconds((targetPath ?? 0) - (baselinePath ?? 0)),
    contributions: Object.fromEntries(CONTRIBUTIONS.map((part) => [part, seconds(contributions[part])])) as Record<Contribution, number>,
    jobs: jobs.map(({ deltaMs: _deltaMs, ...job }) => job),
    added: names(targetJobs, baselineJobs),
    gone: names(baselineJobs, targetJobs),
    pipelines: 2,
  };
}

/**
 * The default baseline: of the last 20 ended pipelines of the target's ref and source created before it, the one
 * whose critical path is the median (weighted by adjusted count). An actual pipeline, not a synthetic median, so the
 * contributions still add up exactly. Null when there is none to compare with.
 */
export function chooseBaseline(candidates: readonly PipelineRuns[], target: PipelineRuns): BaselineChoice | null {
  const eligible = candidates
    .filter(
      (pipeline) =>
        pipeline.pipelineId !== target.pipelineId &&
        pipeline.ref === target.ref &&
        pipeline.source === target.source &&
        pipeline.finishedAt !== null &&
        pipeline.createdAt < target.createdAt,
    )
    .map((pipeline) => ({ pipeline, path: pathMs(pipeline) }))
    .filter((candidate): candidate is { pipeline: PipelineRuns; path: number } => candidate.path !== null)
    .sort((a, b) => b.pipeline.createdAt - a.pipeline.createdAt || b.pipeline.pipelineId - a.pipeline.pipelineId)
    .slice(0, BASELINE_CANDIDATES);
  if (eligible.length === 0) return null;
  const median = weightedPercentile(
    eligible.map(({ path, pipeline }) => [path, weightOf(pipeline)] as const),
    0.5,
  )!;
  // Of pipelines with the median's path time, the latest: closest to the target in what it ran.
  const chosen = eligible.find(({ path }) => path === median)!;
  const which = eligible.length === BASELINE_CANDIDATES ? `the last ${BASELINE_CANDIDATES}` : `the ${eligible.length}`;
  const kind = target.source === '' ? '' : ` ${target.source}`;
  const ref = target.ref === '' ? 'an unknown ref' : target.ref;
  return {
    pipelineId: chosen.pipeline.pipelineId,
    description: `pipeline ${chosen.pipeline.pipelineId}: the median critical path (${seconds(median)} s) of ${which} ended${kind} pipelines of ${ref} before pipeline ${target.pipelineId}`,
    among: eligible.length,
  };
}
