import { FinishedJob, PipelineEvent } from './pipeline-events';
import { cicdResult, NOT_FINISHED_STATUSES, PipelineEnd } from './pipeline-span-model';

/**
 * The recording rules of the OpenTelemetry CI/CD metrics (SPEC §14; docs/observability.md "CI/CD metrics"), pure:
 * what a pipeline's hooks, as the control plane tells its span's story, make of `cicd.pipeline.run.*`. The instruments
 * are cicd.metrics.ts's. A run is counted by its pipeline span's versions (pipelineSpanVersion), raised once each in the
 * store whatever order, replica or redelivery its hooks come in: a transition is recorded by the one call that told of
 * it first, so a repeated or older hook records nothing.
 */

/** The conventions' fallback value of `error.type`, and of a name folded by the cap. */
export const OTHER = '_OTHER';

export type RunState = 'pending' | 'executing';

/**
 * The run states a hook of an unfinished pipeline raises its span's version to, below every version of a drawn span
 * (its end in ms × 2^10): the store's one number per pipeline orders them with its ends and reopenings.
 */
export const RUN_STATE_RANK: Readonly<Record<RunState, number>> = { pending: 1, executing: 2 };

/** The state a not-finished GitLab status puts a run in, or undefined for a finished one. */
export function runStateOf(status: string | undefined): RunState | undefined {
  if (status === 'running') return 'executing';
  return status !== undefined && NOT_FINISHED_STATUSES.has(status) ? 'pending' : undefined;
}

/** Whether `version`, as told before a pipeline's end, was no end at all: the end after it is the run's first. */
export function beforeFirstEnd(version: number): boolean {
  return version <= RUN_STATE_RANK.executing;
}

/**
 * `cicd.pipeline.name`, bounded: a GitLab project's path (`group/project`), its child pipelines apart (`… (child)`,
 * they run a different configuration), never a pipeline's own `name` (`workflow:name` may hold a branch or a
 * variable). Past `max` names this process has seen, a new one is folded into `_OTHER`.
 */
export class PipelineNames {
  private readonly seen = new Set<string>();

  constructor(private readonly max: number) {}

  of(event: Pick<PipelineEvent, 'projectId' | 'projectPath' | 'source'>): string {
    const project = event.projectPath ?? `project ${event.projectId}`;
    const child = event.source !== undefined && (event.source.projectId === undefined || event.source.projectId === event.projectId);
    const name = child ? `${project} (child)` : project;
    if (this.seen.has(name)) return name;
    if (this.seen.size >= this.max) return OTHER;
    this.seen.add(name);
    return name;
  }
}

/** GitLab's failure reasons (a job's `failure_reason`) that say a run timed out, or that the CI/CD system failed it. */
const TIMEOUT_REASONS: ReadonlySet<string> = new Set(['job_execution_timeout', 'stuck_or_timeout_failure']);
const SYSTEM_REASONS: ReadonlySet<string> = new Set(['runner_system_failure', 'scheduler_failure', 'data_integrity_failure', 'api_failure']);
/** GitLab's failure reasons are snake_case words from a fixed list; anything else is not let into a label. */
const REASON = /^[a-z][a-z0-9_]{0,63}$/;

export interface StateTime {
  readonly state: RunState;
  readonly seconds: number;
  /** Set on the state the run's result was set in (its last), as the conventions require. */
  readonly result?: string;
  readonly errorType?: string;
}

/** What a run's first end records. */
export interface RunEnd {
  readonly result: string;
  /** Only for a failed run: the failure reason of the job that failed it first. */
  readonly errorType?: string;
  readonly states: readonly StateTime[];
  /** This project's extension: `pending` split into GitLab's delay and the first job's queue wait, in seconds. */
  readonly pendingParts?: { readonly gitlabDelay: number; readonly queueWait: number };
}

/**
 * `error.type` of a failed run: the failure reason of the first of its jobs to fail without being allowed to (GitLab
 * fails a pipeline for it), `_OTHER` when none says one. Undefined unless the run failed.
 */
export function errorTypeOf(end: Pick<PipelineEnd, 'status'>, jobs: readonly FinishedJob[]): string | undefined {
  if (end.status !== 'failed') return undefined;
  let first: FinishedJob | undefined;
  for (const job of jobs) {
    if (job.status === 'failed' && job.allowFailure !== true && (first === undefined || job.finishedAt < first.finishedAt)) first = job;
  }
  const reason = first?.failureReason;
  return reason !== undefined && REASON.test(reason) ? reason : OTHER;
}

/** `cicd.pipeline.result`: GitLab's status, a failure told apart as a timeout or the system's error by its reason. */
export function resultOf(status: string, errorType: string | undefined): string {
  if (errorType !== undefined && TIMEOUT_REASONS.has(errorType)) return 'timeout';
  if (errorType !== undefined && SYSTEM_REASONS.has(errorType)) return 'error';
  return cicdResult(status) ?? OTHER;
}

/**
 * A finished run's time by state, from GitLab's times: `pending` from the pipeline's creation to its first job's start,
 * `executing` from there to its end. `finalizing` is never recorded: a GitLab pipeline is finished when its last job
 * is, with no phase after it that anyone could time. A run none of whose jobs started (all skipped, canceled before
 * they ran) was pending throughout, and its result was set then.
 */
export function runEndOf(end: PipelineEnd, jobs: readonly FinishedJob[]): RunEnd {
  const errorType = errorTypeOf(end, jobs);
  const result = resultOf(end.status, errorType);
  const outcome = { result, ...(errorType === undefined ? {} : { errorType }) };
  let first: FinishedJob | undefined;
  for (const job of jobs) {
    if (job.startedAt !== undefined && (first === undefined || job.startedAt < first.startedAt!)) first = job;
  }
  const total = Math.max(0, end.finishedAt - end.createdAt) / 1000;
  if (first === undefined || first.startedAt! >= end.finishedAt) return { ...outcome, states: [{ state: 'pending', seconds: total, ...outcome }] };
  const pending = Math.max(0, first.startedAt! - end.createdAt) / 1000;
  const states: StateTime[] = [
    { state: 'pending', seconds: pending },
    { state: 'executing', seconds: Math.max(0, total - pending), ...outcome },
  ];
  if (first.queuedDuration === undefined) return { ...outcome, states };
  const queueWait = Math.min(pending, first.queuedDuration);
  return { ...outcome, states, pendingParts: { gitlabDelay: pending - queueWait, queueWait } };
}

/**
 * The runs this replica told a state of first, for `cicd.pipeline.run.active`: each counted while the store's version
 * of its pipeline is still the one it told (an end, a newer state told elsewhere, or the store forgetting it all make it
 * stale, and it is dropped when counted). So across replicas each active run is counted once, by the one that told its
 * latest state; a replica that restarts forgets its runs (counted again at their next state), never counts one below 0.
 */
export class ActiveRuns {
  private readonly runs = new Map<number, { readonly name: string; readonly state: RunState; readonly told: number }>();

  constructor(private readonly max: number) {}

  /** A state told first by this replica (`told`: the version it raised). */
  entered(pipelineId: number, name: string, state: RunState, told: number): void {
    this.runs.delete(pipelineId);
    // Bounded: past `max` the oldest entry goes (Map keeps insertion order); it is a run long told of.
    if (this.runs.size >= this.max) this.runs.delete(this.runs.keys().next().value!);
    this.runs.set(pipelineId, { name, state, told });
  }

  ended(pipelineId: number): void {
    this.runs.delete(pipelineId);
  }

  pipelineIds(): number[] {
    return [...this.runs.keys()];
  }

  /** Active runs by name and state, given the store's version of each pipeline (as pipelineIds ordered them). */
  counted(ids: readonly number[], versions: readonly number[]): Map<string, Record<RunState, number>> {
    const counts = new Map<string, Record<RunState, number>>();
    for (const [i, pipelineId] of ids.entries()) {
      const run = this.runs.get(pipelineId);
      if (run === undefined) continue;
      if (versions[i] !== run.told) {
        this.runs.delete(pipelineId);
        continue;
      }
      let byState = counts.get(run.name);
      if (byState === undefined) counts.set(run.name, (byState = { pending: 0, executing: 0 }));
      byState[run.state]++;
    }
    return counts;
  }
}
