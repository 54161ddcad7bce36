import { FINISHED_STATUSES } from '../otlp/ci-identity';
import { RUNNER_PARTS, runPartsScaled, stagedParts, type RunnerPart, type WaitingFor } from '../critical-path/critical-path';
import { partsFrom, type JobRunRow } from '../across/job-run';
import { runnerTagsOf } from '../across/job-runs-of-trace';
import { adjustedCountOf } from '../otlp/span-identity';
import type { TimeWindow } from './trace-reads';

/**
 * SPEC §13 on ClickHouse: the rows of job runs from ci_job_runs' compact columns (deploy/clickhouse/init), what a read
 * across a month reads. The walk's figures (wait, queue, run, attempt, on the path, slack) are the ones the control
 * plane wrote on each job span at its root pipeline's end (src/pipeline-spans/pipeline-critical-path.ts), computed by
 * the same walk the reads run. The split of the run by the runner's stages, which the control plane never sees, is
 * made here from the stages the query hands over (each once, in start order, as three small numbers) by the walk's
 * own rule (`stagedParts`, src/critical-path). So a month is read as numbers and short texts, one row per job run,
 * with no trace walked again.
 *
 * A pipeline whose figures were not all written (its root still running or reopened by a retry, a job whose hook came
 * after the root's end, a job GitLab never named) is read the other way, its spans walked as a whole trace: `walked`
 * below names the pipelines the caller reads so.
 */

/**
 * The job runs of ci_job_runs' rows for a read across pipelines: the pipelines created in the window (a ref's only,
 * when asked), or one pipeline by id (a compare's), with each the rest of its root's pipelines (a child created after
 * the window, the root created before it); then each job's and pipeline's compact facts, merged, and each run's
 * pickup and split by the runner's stages computed as the walk computes them. Parameters are bound, never
 * concatenated; what is interpolated below is the code's own SQL.
 */
export const JOB_RUN_FACTS = jobRunFacts(/* sql */ `
    began AS (
        SELECT DISTINCT pipeline_id
        FROM ci_job_runs
        WHERE project_id = {project:UInt64} AND first_start_ms BETWEEN {from_ms:Int64} AND {to_ms:Int64}
    ),
    in_window AS (
        SELECT pipeline_id
        FROM began
        WHERE {ref:String} = '' OR pipeline_id IN (
            SELECT pipeline_id
            FROM ci_job_runs
            WHERE project_id = {project:UInt64} AND job_id = 0 AND pipeline_id IN began
            GROUP BY pipeline_id
            HAVING max(pipeline_facts).2 = {ref:String}
        )
    ),`);

/**
 * The same for one pipeline of the project that overlaps the window: its rows began within LONGEST_SPAN_MS before the
 * window's end, and its span (when there is one yet) had not ended before the window.
 */
export const PIPELINE_RUN_FACTS = jobRunFacts(/* sql */ `
    in_window AS (
        SELECT pipeline_id
        FROM ci_job_runs
        WHERE project_id = {project:UInt64} AND pipeline_id = {pipeline:UInt64}
          AND first_start_ms BETWEEN {from_ms:Int64} - {longest_ms:Int64} AND {to_ms:Int64}
        GROUP BY pipeline_id
        HAVING max(pipeline_facts).7 = 0 OR max(pipeline_facts).7 >= {from_ms:Int64} * 1000000
    ),`);

/** The same for the pipelines named (`LATEST_ENDED_PIPELINES`' ids), each with the rest of its root's. */
export const PIPELINES_RUN_FACTS = jobRunFacts(/* sql */ `
    in_window AS (
        SELECT arrayJoin({pipelines:Array(UInt64)}) AS pipeline_id
    ),`);

/**
 * A compare's default baseline is one of the latest ended root pipelines of the target's ref and source before it
 * (src/across/compare.ts's chooseBaseline): their ids, latest first (creation, then id, as chooseBaseline orders
 * them), at most {count}. One whose source GitLab did not say is listed too: its rows may say it (the runner's
 * CI_PIPELINE_SOURCE), and chooseBaseline decides. Created in the window, its end excluded.
 */
export const LATEST_ENDED_PIPELINES = /* sql */ `
SELECT pipeline_id
FROM ci_job_runs FINAL
WHERE project_id = {project:UInt64} AND job_id = 0
  AND first_start_ms BETWEEN {from_ms:Int64} - {longest_ms:Int64} AND {to_ms:Int64}
  AND pipeline_id != {except:UInt64}
  AND root_pipeline_id IN (0, pipeline_id)
  AND pipeline_facts.2 = {ref:String} AND pipeline_facts.4 IN ({source:String}, '')
  AND has({finished:Array(String)}, pipeline_facts.5)
  AND intDiv(pipeline_facts.6 + 500000, 1000000) >= {from_ms:Int64}
  AND intDiv(pipeline_facts.6 + 500000, 1000000) < {to_ms:Int64}
ORDER BY intDiv(pipeline_facts.6 + 500000, 1000000) DESC, pipeline_id DESC
LIMIT {count:UInt32}`;

function jobRunFacts(selection: string): string {
  return /* sql */ `
WITH
${selection}
    roots AS (
        SELECT DISTINCT if(root_pipeline_id = 0, pipeline_id, root_pipeline_id) AS root
        FROM ci_job_runs
        WHERE project_id = {project:UInt64} AND job_id = 0 AND pipeline_id IN in_window
    ),
    family AS (
        SELECT DISTINCT pipeline_id
        FROM ci_job_runs
        WHERE project_id = {project:UInt64} AND job_id = 0
          AND pipeline_id >= (SELECT min(root) FROM roots)
          AND first_start_ms <= {to_ms:Int64} + {longest_ms:Int64}
          AND (pipeline_id IN roots OR root_pipeline_id IN roots)
    ),
    -- FINAL: each job's row merged as the table merges it (max of the versioned tuples), read as stored.
    merged AS (
        SELECT
            pipeline_id,
            job_id,
            root_pipeline_id AS root_id,
            job_facts AS job,
            pipeline_facts AS pipeline,
            queue_end AS queue_end_ns,
            execution,
            stage_parts AS all_stages
        FROM ci_job_runs FINAL
        WHERE project_id = {project:UInt64} AND (pipeline_id IN in_window OR pipeline_id IN family)
    ),
    timed AS (
        SELECT
            *,
            intDiv(job.12 + 500000, 1000000) AS end_ms,
            least(end_ms, intDiv(job.11 + 500000, 1000000)) AS pending_ms,
            toFloat64OrNull(job.13) AS queued_said,
            assumeNotNull(queued_said) AS queued_seconds,
            -- As the walk's jobNode: GitLab's queued duration, else the queue wait's end, else the runner's start.
            least(end_ms, greatest(pending_ms,
                if(queued_said IS NOT NULL AND isFinite(queued_seconds), pending_ms + toInt64(floor(queued_seconds * 1000 + 0.5)),
                if(queue_end_ns > 0, intDiv(queue_end_ns + 500000, 1000000),
                if(execution.2 != '', intDiv(execution.3 + 500000, 1000000), pending_ms))))) AS picked_up_ms,
            -- The stages of the job_execution kept, each once (a retried export: sorted whole, a copy is next to its
            -- original), in the order they started.
            arrayFilter(stage -> execution.2 != '' AND stage.2 = cityHash64(execution.2),
                        arrayCompact(arraySort(stage -> (stage.4, stage.5, stage.3, stage.1, stage.2), all_stages))) AS stages_ms
        FROM merged
    )
SELECT
    pipeline_id,
    job_id,
    root_id,
    if(job_id = 0,
       [pipeline.2, pipeline.3, pipeline.4, pipeline.5, pipeline.8, pipeline.9],
       [job.2, job.3, job.4, job.5, job.7, job.8, job.9, job.10, job.15, execution.4]) AS texts,
    if(job_id = 0,
       [intDiv(pipeline.6 + 500000, 1000000), intDiv(pipeline.7 + 500000, 1000000)],
       arrayConcat(
           [toInt64(job.11 != 0), toInt64(job.6 = 'true'), pending_ms, picked_up_ms - pending_ms, end_ms - picked_up_ms,
            ${millis('job.14')}, ${millis('job.16')}, ${millis('job.17')}, toInt64OrDefault(job.18, toInt64(-1)),
            ${flag('job.19')}, ${flag('job.20')}, ${millis('job.21')}, toInt64(execution.2 != '')],
           -- The stages, as runParts splits the run by them (src/critical-path's stagedParts): each its part's index,
           -- its start since the previous one's end (the first's: since the pickup) and its length, ms: mostly a digit
           -- or two, where times since the pickup would be six.
           arrayFlatten(arrayMap((stage, previous_end) -> [toInt64(stage.3) - 1, stage.4 - previous_end, stage.5 - stage.4],
                                 stages_ms, arraySlice(arrayPushFront(arrayMap(stage -> stage.5, stages_ms), picked_up_ms), 1, length(stages_ms)))))) AS numbers
FROM timed`;
}

/** Seconds written as a double's text, to whole milliseconds; -1 where not written. */
function millis(text: string): string {
  return `if(${text} != '' AND isFinite(toFloat64OrZero(${text})), toInt64(floor(toFloat64OrZero(${text}) * 1000 + 0.5)), toInt64(-1))`;
}

/** A bool written as text: 1, 0, or -1 where not written. */
function flag(text: string): string {
  return `multiIf(${text} = 'true', toInt64(1), ${text} = 'false', toInt64(0), toInt64(-1))`;
}

/**
 * One row of JOB_RUN_FACTS (JSONCompactEachRow, 64-bit integers as numbers: every one is below 2^53): a job's
 * (job_id > 0) or a pipeline's (job_id 0) facts, texts and numbers by position (JOB_TEXTS, JOB_NUMBERS, PIPELINE_*).
 */
export type JobRunFactsRow = [pipelineId: number, jobId: number, rootId: number, texts: string[], numbers: number[]];

const enum JobText {
  Name,
  Stage,
  Status,
  FailureReason,
  RunnerId,
  RunnerType,
  RunnerTags,
  CreatedAt,
  WaitingFor,
  RunnerSource,
}
const enum JobNumber {
  HasSpan,
  AllowFailure,
  Pending,
  /** Pending → picked up, and picked up → the end, ms: deltas, a few digits each instead of thirteen. */
  Queued,
  Ran,
  Wait,
  Queue,
  Run,
  Attempt,
  Retried,
  OnPath,
  Slack,
  RunnerSpans,
  /**
   * The runner's stages from here on, three numbers each: the part's index in RUNNER_PARTS, its start since the
   * previous stage's end (the first's since the pickup) and its length, ms.
   */
  Stages,
}
const enum PipelineText {
  Ref,
  Sha,
  Source,
  Status,
  ParentSpanId,
  TraceState,
}
const enum PipelineNumber {
  Start,
  End,
}

const WAITING_FOR = new Set<string>(['gitlab', 'manual', 'retry', 'delayed', 'resource']);

/** Whether a job row holds the figures the control plane writes, or is no job of the walk (a bridge, a queue wait alone). */
function written([, , , texts, numbers]: JobRunFactsRow): boolean {
  if (numbers[JobNumber.HasSpan] !== 1) return numbers[JobNumber.RunnerSpans] !== 1;
  return (
    texts[JobText.Name] !== '' &&
    numbers[JobNumber.Wait] >= 0 &&
    WAITING_FOR.has(texts[JobText.WaitingFor]) &&
    numbers[JobNumber.Queue] >= 0 &&
    numbers[JobNumber.Run] >= 0 &&
    numbers[JobNumber.Attempt] >= 1 &&
    numbers[JobNumber.Retried] >= 0 &&
    numbers[JobNumber.OnPath] >= 0
  );
}

export interface JobRunFacts {
  /** The rows of the pipelines whose figures were all written. */
  readonly rows: JobRunRow[];
  /** The pipelines (each root's whole family) to read as whole traces instead. */
  readonly walked: number[];
}

/**
 * The rows of JOB_RUN_FACTS as job runs, by root pipeline: a root's family is taken from its written figures when its
 * root pipeline has ended and every job of it carries them; otherwise its pipelines are named in `walked`.
 */
export function jobRunsOfFacts(projectId: number, facts: readonly JobRunFactsRow[]): JobRunFacts {
  const pipelines = new Map<number, JobRunFactsRow>();
  for (const row of facts) if (row[1] === 0 && row[4][PipelineNumber.Start] !== 0) pipelines.set(row[0], row);
  const rootOf = (pipelineId: number): number => {
    const root = pipelines.get(pipelineId)?.[2] ?? 0;
    return root === 0 ? pipelineId : root;
  };
  const families = new Map<number, JobRunFactsRow[]>();
  for (const row of facts) {
    const root = rootOf(row[0]);
    const family = families.get(root);
    if (family === undefined) families.set(root, [row]);
    else family.push(row);
  }
  const rows: JobRunRow[] = [];
  const walked: number[] = [];
  // A fleet's few tag sets, parsed once a read rather than once a row.
  const tagSets = new Map<string, string>();
  const tagsOf = (text: string) => {
    let tags = tagSets.get(text);
    if (tags === undefined) tagSets.set(text, (tags = runnerTagsOf(text)));
    return tags;
  };
  const scratch = { parts: new Float64Array(RUNNER_PARTS.length), stages: [] };
  // And a trace's few tracestates.
  const counts = new Map<string, number>();
  const countOf = (traceState: string) => {
    let count = counts.get(traceState);
    if (count === undefined) counts.set(traceState, (count = adjustedCountOf(traceState)));
    return count;
  };
  for (const [root, family] of families) {
    const rootPipeline = pipelines.get(root);
    const ready =
      rootPipeline !== undefined &&
      rootPipeline[3][PipelineText.ParentSpanId] === '' &&
      FINISHED_STATUSES.has(rootPipeline[3][PipelineText.Status]) &&
      family.every((row) => row[1] === 0 || (written(row) && (row[4][JobNumber.HasSpan] !== 1 || pipelines.has(row[0])))) &&
      // A child pipeline that ended after its root (a trigger job without strategy: depend) was not whole when the
      // control plane wrote the root's figures: the family is walked as the trace is now.
      family.every((row) => row[1] !== 0 || row[0] === root || !pipelines.has(row[0]) || endedBy(pipelines.get(row[0])!, rootPipeline));
    if (!ready) {
      walked.push(...new Set(family.map((row) => row[0])));
      continue;
    }
    for (const row of family) {
      if (row[1] !== 0 && row[4][JobNumber.HasSpan] === 1) rows.push(jobRunOf(projectId, root, pipelines.get(row[0])!, row, { tagsOf, countOf, scratch }));
    }
  }
  return { rows, walked };
}

/** Whether a pipeline had ended by the time its root did. */
function endedBy([, , , pipeline, times]: JobRunFactsRow, [, , , , rootTimes]: JobRunFactsRow): boolean {
  return FINISHED_STATUSES.has(pipeline[PipelineText.Status]) && times[PipelineNumber.End] <= rootTimes[PipelineNumber.End];
}

function numberOf(text: string): number | null {
  if (text === '') return null;
  const number = Number(text);
  return Number.isSafeInteger(number) ? number : null;
}

/** What a read's rows share while made: its tag sets and tracestates parsed once, and room to split a run in. */
interface RowMaking {
  readonly tagsOf: (text: string) => string;
  readonly countOf: (traceState: string) => number;
  readonly scratch: { readonly parts: Float64Array; readonly stages: number[] };
}

function jobRunOf(
  projectId: number,
  rootPipelineId: number,
  [, , , pipeline, times]: JobRunFactsRow,
  row: JobRunFactsRow,
  { tagsOf, countOf, scratch }: RowMaking,
): JobRunRow {
  const [pipelineId, jobId, , texts, numbers] = row;
  const status = pipeline[PipelineText.Status];
  const pendingAt = numbers[JobNumber.Pending];
  const startedAt = pendingAt + numbers[JobNumber.Queued];
  const finishedAt = startedAt + numbers[JobNumber.Ran];
  const onPath = numbers[JobNumber.OnPath] === 1;
  const retried = numbers[JobNumber.Retried] === 1;
  const created = Date.parse(texts[JobText.CreatedAt]);
  const failureReason = texts[JobText.FailureReason];
  const source = pipeline[PipelineText.Source];
  return {
    projectId,
    pipelineId,
    rootPipelineId,
    ref: pipeline[PipelineText.Ref],
    sha: pipeline[PipelineText.Sha],
    source: source !== '' ? source : texts[JobText.RunnerSource],
    pipelineCreatedAt: times[PipelineNumber.Start],
    pipelineFinishedAt: FINISHED_STATUSES.has(status) ? times[PipelineNumber.End] : null,
    pipelineStatus: status,
    jobId,
    name: texts[JobText.Name],
    stage: texts[JobText.Stage],
    attempt: numbers[JobNumber.Attempt],
    retried,
    status: texts[JobText.Status],
    failureReason: failureReason === '' ? null : failureReason,
    allowFailure: numbers[JobNumber.AllowFailure] === 1,
    runnerId: numberOf(texts[JobText.RunnerId]),
    runnerType: texts[JobText.RunnerType],
    runnerTags: tagsOf(texts[JobText.RunnerTags]),
    createdAt: Number.isFinite(created) ? Math.min(created, pendingAt) : pendingAt,
    pendingAt,
    startedAt,
    finishedAt,
    waitMs: numbers[JobNumber.Wait],
    waitingFor: texts[JobText.WaitingFor] as WaitingFor,
    queueMs: numbers[JobNumber.Queue],
    partsMs: partsOf(numbers, finishedAt - startedAt, numbers[JobNumber.Run], scratch),
    runnerSpans: numbers[JobNumber.RunnerSpans] === 1,
    // As src/across/job-runs-of-trace.ts: GitLab Runner's spans say nothing of the cache.
    cacheResult: null,
    onCriticalPath: onPath,
    slackMs: onPath ? 0 : retried || numbers[JobNumber.Slack] < 0 ? null : numbers[JobNumber.Slack],
    adjustedCount: countOf(pipeline[PipelineText.TraceState]),
  };
}

/** The run by the runner's stages, the rest `other`; scaled to the run the path clamped it to, as the walk does. */
function partsOf(numbers: readonly number[], ownRunMs: number, writtenRunMs: number, { parts, stages }: RowMaking['scratch']): Record<RunnerPart, number> {
  // Each stage's start and end since the pickup.
  let count = 0;
  let end = 0;
  for (let i = JobNumber.Stages; i + 2 < numbers.length; i += 3) {
    const start = end + numbers[i + 1];
    end = start + numbers[i + 2];
    stages[3 * count] = numbers[i];
    stages[3 * count + 1] = start;
    stages[3 * count + 2] = end;
    count++;
  }
  const split = partsFrom(stagedParts(stages, 0, count, 0, ownRunMs, parts.fill(0)));
  return writtenRunMs === ownRunMs ? split : runPartsScaled(split, writtenRunMs);
}

/** Of the rows, those of pipelines created in the window and, when asked, on the ref: what a read keeps. */
export function inWindow(rows: readonly JobRunRow[], window: TimeWindow, ref?: string): JobRunRow[] {
  return rows.filter((row) => row.pipelineCreatedAt >= window.fromMs && row.pipelineCreatedAt <= window.toMs && (ref === undefined || row.ref === ref));
}
