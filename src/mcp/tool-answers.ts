import { z } from 'zod';
import type { PipelineComparison } from '../across/compare';
import type { Regressions } from '../across/regressions';
import type { RunnerQueue, WhatIf } from '../across/runner-queue';
import type { WasteLedger } from '../across/waste';
import type { CriticalPathAnswer, JobsAnswer, TraceAnswer } from '../reads/read-answers';
import { RUNNER_PARTS, WaitingFor } from '../critical-path/critical-path';
import { collectedSpans } from '../otlp/collected-spans';
import type { Shaped } from './answer-budget';

/**
 * The HTTP reads' answers (SPEC §12, §13) reshaped for an agent (SPEC §14): the finding it acts on as the first key,
 * what it rests on next, then the details, the one long list largest first (paged by answer-budget.ts). Each shape
 * has its zod schema beside it: the tool declares it as its output schema, and the SDK checks every answer against
 * it. Pure: the JSON of a read in, a Shaped answer out.
 */

/** Names come from pipelines' YAML and programs' spans: long ones are cut, so no single item can eat a page. */
const NAME_CHARS = 120;
const short = (text: string): string => (text.length > NAME_CHARS ? `${text.slice(0, NAME_CHARS - 1)}…` : text);
const shortOrNull = (text: string | null | undefined): string | null => (text === null || text === undefined ? null : short(text));
/** Seconds to the millisecond, as the reads count them. */
const seconds = (value: number): number => Math.round(value * 1000) / 1000;
/** Largest first; ties by name, so the same read always pages the same way. */
const byLargest =
  <T>(size: (item: T) => number, name: (item: T) => string) =>
  (a: T, b: T): number =>
    size(b) - size(a) || (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0);

const cursorField = z.string().nullable().describe('Pass it as `cursor`, with the same other arguments, for the rest of the list; null when nothing is left');
const partSeconds = z.object({ part: z.string(), seconds: z.number() });
const quantiles = z.object({ p50: z.number(), p95: z.number() });

// --- pipeline_critical_path -------------------------------------------------------------------------------------

/** What the wait before a job is called in an answer: GitLab's own is `delay`, the others by their cause. */
const WAIT_PART: Readonly<Record<WaitingFor, string>> = { gitlab: 'delay', manual: 'manual', retry: 'retry', delayed: 'delayed', resource: 'resource' };

const pathJob = z.object({
  job: z.string().nullable(),
  job_id: z.number().int(),
  stage: z.string().nullable(),
  pipeline_id: z.number().int().nullable(),
  position: z.number().int().describe('1 for the first job of the path'),
  seconds: z.number().describe('The wait before it, its queue wait and its run'),
  waiting_for: z.string(),
  parts: z.array(partSeconds).describe('Its seconds by part, largest first, zeros left out'),
});

export const criticalPathOutput = z.object({
  longest: z
    .object({ job: z.string().nullable(), job_id: z.number().int(), stage: z.string().nullable(), part: z.string(), seconds: z.number() })
    .nullable()
    .describe("The largest part of one job's time on the path: where the pipeline's time went"),
  duration_seconds: z.number(),
  final: z.boolean().describe('false: the pipeline is still running, this is the path so far'),
  totals: z.array(partSeconds).describe("The path's seconds by part, largest first; they add up to duration_seconds"),
  slack: z
    .array(z.object({ job: z.string().nullable(), job_id: z.number().int(), slack_seconds: z.number() }))
    .describe('Jobs off the path, most slack first (at most 10)'),
  path_jobs: z.number().int(),
  path: z.array(pathJob).describe("The path's jobs, most time first"),
  next_cursor: cursorField,
});

export function criticalPathAnswer(answer: CriticalPathAnswer): Shaped<z.infer<typeof pathJob>> {
  const jobs = answer.path.map((element, index) => {
    const parts = [
      { part: WAIT_PART[element.waiting_for], seconds: element.delay_seconds },
      { part: 'queue', seconds: element.queue_seconds },
      ...RUNNER_PARTS.map((part) => ({ part: part as string, seconds: element.parts[part] })),
    ]
      .filter((part) => part.seconds > 0)
      .map((part) => ({ part: part.part, seconds: seconds(part.seconds) }))
      .sort(
        byLargest(
          (part) => part.seconds,
          (part) => part.part,
        ),
      );
    return {
      job: shortOrNull(element.name),
      job_id: element.job_id,
      stage: shortOrNull(element.stage),
      pipeline_id: element.pipeline_id,
      position: index + 1,
      seconds: seconds(element.delay_seconds + element.duration_seconds),
      waiting_for: element.waiting_for,
      parts,
    };
  });
  const longest = jobs
    .flatMap((job) => job.parts.map((part) => ({ job: job.job, job_id: job.job_id, stage: job.stage, part: part.part, seconds: part.seconds })))
    .sort(
      byLargest(
        (part) => part.seconds,
        (part) => `${part.job_id}`,
      ),
    )[0];
  const totals = Object.entries(answer.totals)
    .filter(([, value]) => value > 0)
    // The waits by cause as the rest of the answer names them: manual, retry, delayed, resource.
    .map(([part, value]) => ({ part: part.replace(/_wait$/, ''), seconds: seconds(value) }))
    .sort(
      byLargest(
        (part) => part.seconds,
        (part) => part.part,
      ),
    );
  return {
    head: {
      longest: longest ?? null,
      duration_seconds: seconds(answer.duration_seconds),
      final: answer.final,
      totals,
      slack: [...answer.slack]
        .sort(
          byLargest(
            (job) => job.slack_seconds,
            (job) => `${job.job_id}`,
          ),
        )
        .slice(0, 10)
        .map((job) => ({ job: shortOrNull(job.name), job_id: job.job_id, slack_seconds: seconds(job.slack_seconds) })),
      path_jobs: jobs.length,
    },
    listKey: 'path',
    items: [...jobs].sort(
      byLargest(
        (job) => job.seconds,
        (job) => `${job.position}`,
      ),
    ),
  };
}

// --- job_trace_summary ------------------------------------------------------------------------------------------

const traceSpan = z.object({
  span_id: z.string(),
  parent_span_id: z.string(),
  name: z.string(),
  start_offset_seconds: z.number().describe("From the job span's start (or the earliest span's)"),
  seconds: z.number(),
  error: z.boolean(),
});

export const jobTraceOutput = z.object({
  slowest_stage: z
    .object({ stage: z.string(), seconds: z.number() })
    .nullable()
    .describe("The runner's slowest stage (a child of job_execution); null without runner spans"),
  job: z.string().nullable(),
  job_id: z.number().int(),
  stage: z.string().nullable(),
  status: z.string().nullable(),
  failure_reason: z.string().nullable(),
  queue_seconds: z.number().nullable(),
  runner_stages: z.array(z.object({ stage: z.string(), seconds: z.number() })).describe('Longest first'),
  errors: z.array(z.object({ span: z.string(), span_id: z.string(), message: z.string() })).describe('Spans whose status is an error (at most 10)'),
  slowest_spans: z.array(z.object({ name: z.string(), span_id: z.string(), seconds: z.number() })).describe('At most 10'),
  completeness: z.object({ spans: z.number().int(), total_spans: z.number().int(), truncated: z.boolean(), final: z.boolean() }),
  spans_total: z.number().int(),
  spans: z.array(traceSpan).describe("The job's spans, longest first"),
  next_cursor: cursorField,
});

const MAX_LISTED = 10;

export function jobTraceAnswer(answer: TraceAnswer, jobId: number): Shaped<z.infer<typeof traceSpan>> {
  const spans = collectedSpans(answer.trace as Parameters<typeof collectedSpans>[0]);
  const jobSpan = spans.find((span) => span.name === 'job' || span.name === 'bridge');
  const runner = spans.find((span) => span.name === 'job_execution');
  const queue = spans.find((span) => span.name === 'queue_wait');
  const origin = jobSpan?.startNanos ?? spans.reduce((least, span) => (span.startNanos < least ? span.startNanos : least), spans[0]?.startNanos ?? 0n);
  const secondsOf = (from: bigint, to: bigint): number => seconds(Number(to - from) / 1e9);
  const listed = spans
    .map((span) => ({
      span_id: span.spanId,
      parent_span_id: span.parentSpanId,
      name: short(span.name),
      start_offset_seconds: secondsOf(origin, span.startNanos),
      seconds: secondsOf(span.startNanos, span.endNanos),
      error: span.statusCode === 2,
    }))
    .sort(
      byLargest(
        (span) => span.seconds,
        (span) => span.span_id,
      ),
    );
  const stages =
    runner === undefined
      ? []
      : spans
          .filter((span) => span.parentSpanId === runner.spanId)
          .map((span) => ({ stage: short(span.name), seconds: secondsOf(span.startNanos, span.endNanos) }))
          .sort(
            byLargest(
              (stage) => stage.seconds,
              (stage) => stage.stage,
            ),
          );
  const text = (value: unknown): string | null => (value === undefined || value === '' ? null : short(String(value)));
  return {
    head: {
      slowest_stage: stages[0] ?? null,
      job: text(jobSpan?.attributes['cicd.pipeline.task.name']),
      job_id: jobId,
      stage: text(jobSpan?.attributes['ci.job.stage']),
      status: text(jobSpan?.attributes['ci.job.status']),
      failure_reason: text(jobSpan?.attributes['ci.job.failure_reason']),
      queue_seconds: queue === undefined ? null : secondsOf(queue.startNanos, queue.endNanos),
      runner_stages: stages,
      errors: spans
        .filter((span) => span.statusCode === 2)
        .slice(0, MAX_LISTED)
        .map((span) => ({ span: short(span.name), span_id: span.spanId, message: short(span.statusMessage) })),
      slowest_spans: listed.slice(0, MAX_LISTED).map((span) => ({ name: span.name, span_id: span.span_id, seconds: span.seconds })),
      completeness: {
        spans: answer.completeness.spans,
        total_spans: answer.completeness.total_spans,
        truncated: answer.completeness.truncated,
        final: answer.completeness.final,
      },
      spans_total: listed.length,
    },
    listKey: 'spans',
    items: listed,
  };
}

// --- compare_pipeline -------------------------------------------------------------------------------------------

const jobDelta = z.object({
  job: z.string(),
  stage: z.string(),
  delta_seconds: z.number(),
  target_seconds: z.number(),
  baseline_seconds: z.number(),
  on_critical_path: z.object({ target: z.boolean(), baseline: z.boolean() }),
});

export const compareOutput = z.object({
  cause: z
    .object({ part: z.string(), job: z.string().nullable(), stage: z.string().nullable(), seconds: z.number() })
    .nullable()
    .describe(
      'The part of the change in the critical path with the most seconds either way, and the path job that changed most with it; null when nothing changed',
    ),
  pipelines_considered: z.number().int(),
  duration_delta_seconds: z.number(),
  pipeline_id: z.number().int(),
  baseline: z.object({ pipeline_id: z.number().int(), description: z.string(), among: z.number().int().optional() }),
  paths_known: z.boolean().describe('false: one of the two is still running, the figures are its path so far'),
  critical_path_seconds: z.object({ target: z.number(), baseline: z.number() }),
  contributions: z.array(partSeconds).describe('The change by part, most seconds either way first, zeros left out; they add up to duration_delta_seconds'),
  added: z.array(z.string()).describe('Jobs only the pipeline ran (at most 20)'),
  gone: z.array(z.string()).describe('Jobs only the baseline ran (at most 20)'),
  jobs_total: z.number().int(),
  jobs: z.array(jobDelta).describe('Most change either way first'),
  next_cursor: cursorField,
});

export function compareAnswer(answer: PipelineComparison & { baseline: { among?: number } }): Shaped<z.infer<typeof jobDelta>> {
  const contributions = Object.entries(answer.contributions)
    .filter(([, value]) => value !== 0)
    .map(([part, value]) => ({ part, seconds: seconds(value) }))
    .sort(
      byLargest(
        (part) => Math.abs(part.seconds),
        (part) => part.part,
      ),
    );
  const jobs = answer.jobs
    .map((job) => ({
      job: short(job.name),
      stage: short(job.stage),
      delta_seconds: seconds(job.delta_seconds),
      target_seconds: seconds(job.target_seconds),
      baseline_seconds: seconds(job.baseline_seconds),
      on_critical_path: job.on_critical_path,
    }))
    .sort(
      byLargest(
        (job) => Math.abs(job.delta_seconds),
        (job) => `${job.job}\u0000${job.stage}`,
      ),
    );
  const top = contributions[0];
  // The job the cause is pinned to: one on either path (a job that became critical, when the path moved) that
  // changed the same way, most first.
  const pinned =
    top === undefined
      ? undefined
      : jobs.find(
          (job) =>
            Math.sign(job.delta_seconds) === Math.sign(top.seconds) &&
            (top.part === 'path_moved'
              ? job.on_critical_path.target !== job.on_critical_path.baseline
              : job.on_critical_path.target || job.on_critical_path.baseline),
        );
  return {
    head: {
      cause: top === undefined ? null : { part: top.part, job: pinned?.job ?? null, stage: pinned?.stage ?? null, seconds: top.seconds },
      pipelines_considered: answer.pipelines,
      duration_delta_seconds: seconds(answer.duration_delta_seconds),
      pipeline_id: answer.pipeline_id,
      baseline: answer.baseline,
      paths_known: answer.paths_known,
      critical_path_seconds: answer.critical_path_seconds,
      contributions,
      added: answer.added.slice(0, 20).map(short),
      gone: answer.gone.slice(0, 20).map(short),
      jobs_total: jobs.length,
    },
    listKey: 'jobs',
    items: jobs,
  };
}

// --- list_regressions -------------------------------------------------------------------------------------------

const changePoint = z.object({
  job: z.string().nullable().describe("null: the pipeline's critical path as a whole"),
  stage: z.string().nullable(),
  part: z.string(),
  before_seconds: z.number(),
  after_seconds: z.number(),
  change_seconds: z.number(),
  first_pipeline_id: z.number().int(),
  first_sha: z.string(),
  first_ref: z.string(),
  first_seen_at: z.string(),
  confidence: z.number(),
});

export const regressionsOutput = z.object({
  largest: changePoint
    .nullable()
    .describe(
      "The step up of a job's stage with the most seconds (the whole critical path's only when no stage stepped up), with the first pipeline and commit it shows in; null when nothing got slower",
    ),
  pipelines_considered: z.number().int(),
  from: z.string(),
  to: z.string(),
  ref: z.string().nullable(),
  speedups: z.number().int().describe('Change points where a duration stepped down (not listed)'),
  series: z.object({ tested: z.number().int(), too_short: z.number().int() }),
  false_alarm_rate: z.number(),
  method: z.string(),
  regressions_total: z.number().int(),
  regressions: z.array(changePoint).describe('Steps up, most seconds first'),
  next_cursor: cursorField,
});

export function regressionsAnswer(answer: Regressions & { from: string; to: string; ref: string | null }): Shaped<z.infer<typeof changePoint>> {
  const points = answer.change_points.map((point) => ({
    job: shortOrNull(point.job),
    stage: shortOrNull(point.stage),
    part: point.part,
    before_seconds: seconds(point.before_seconds),
    after_seconds: seconds(point.after_seconds),
    change_seconds: seconds(point.after_seconds - point.before_seconds),
    first_pipeline_id: point.first_pipeline_id,
    first_sha: point.first_sha,
    first_ref: short(point.first_ref),
    first_seen_at: point.first_seen_at,
    confidence: point.confidence,
  }));
  const slower = points
    .filter((point) => point.change_seconds > 0)
    .sort(
      byLargest(
        (point) => point.change_seconds,
        (point) => `${point.job}\u0000${point.part}\u0000${point.first_pipeline_id}`,
      ),
    );
  // The step of a job's stage is what an agent can act on; the whole path's step is its symptom, named only when no
  // job's stage stepped up with it.
  const largest = slower.find((point) => point.job !== null) ?? slower[0] ?? null;
  return {
    head: {
      largest,
      pipelines_considered: answer.pipelines,
      from: answer.from,
      to: answer.to,
      ref: shortOrNull(answer.ref),
      speedups: points.length - slower.length,
      series: answer.series,
      false_alarm_rate: answer.false_alarm_rate,
      method: answer.method,
      regressions_total: slower.length,
    },
    listKey: 'regressions',
    items: slower,
  };
}

// --- list_waste -------------------------------------------------------------------------------------------------

const WASTE_KINDS = ['retry', 'flaky', 'cache', 'queue'] as const;

const jobWaste = z.object({
  job: z.string(),
  waste_seconds: z.number().describe('retry + flaky + cache + queue'),
  retry_seconds: z.number(),
  flaky_seconds: z.number(),
  flaky_commits: z.number().int(),
  cache_seconds: z.number(),
  cache_hits: z.number(),
  cache_misses: z.number(),
  cache_inferred: z.boolean().describe("Some hits or misses were inferred from the restore's time"),
  queue_seconds: z.number(),
  queue_tags: z.string().nullable().describe('The runner tag set it waited longest for'),
  runner_seconds: z.number(),
  runs: z.number(),
});

const wasteCost = z.object({ runner: z.number(), retry: z.number(), flaky: z.number(), cache: z.number(), unpriced_runner_seconds: z.number() });

export const wasteOutput = z.object({
  largest: z
    .object({ job: z.string(), kind: z.enum(WASTE_KINDS), seconds: z.number() })
    .nullable()
    .describe('The one job and kind of waste with the most seconds; null when nothing was wasted'),
  pipelines_considered: z.number().int(),
  from: z.string(),
  to: z.string(),
  totals: z.object({
    runner_seconds: z.number(),
    retry_seconds: z.number(),
    flaky_seconds: z.number(),
    cache_seconds: z.number(),
    queue_seconds: z.number(),
    on_critical_path_seconds: z.number().describe('Of retry, flaky, cache and queue: the part developers waited for'),
  }),
  cost: wasteCost.optional().describe('When the operator configured runner prices, in their currency'),
  jobs_total: z.number().int(),
  jobs: z.array(jobWaste).describe('Most waste first'),
  next_cursor: cursorField,
});

export function wasteAnswer(answer: WasteLedger & { from: string; to: string }): Shaped<z.infer<typeof jobWaste>> {
  const jobs = answer.jobs
    .map((job) => {
      const queue = job.queue_seconds.reduce((total, entry) => total + entry.seconds.total, 0);
      const kinds = { retry: job.retry_seconds.total, flaky: job.flaky.runner_seconds.total, cache: job.cache_seconds.total, queue };
      const longestQueue = [...job.queue_seconds].sort(
        byLargest(
          (entry) => entry.seconds.total,
          (entry) => entry.tags,
        ),
      )[0];
      return {
        kinds,
        row: {
          job: short(job.name),
          waste_seconds: seconds(kinds.retry + kinds.flaky + kinds.cache + kinds.queue),
          retry_seconds: seconds(kinds.retry),
          flaky_seconds: seconds(kinds.flaky),
          flaky_commits: job.flaky.commits,
          cache_seconds: seconds(kinds.cache),
          cache_hits: job.cache_hits,
          cache_misses: job.cache_misses,
          cache_inferred: job.inferred,
          queue_seconds: seconds(kinds.queue),
          queue_tags: longestQueue === undefined ? null : short(longestQueue.tags),
          runner_seconds: seconds(job.runner_seconds.total),
          runs: job.runs,
        },
      };
    })
    .sort(
      byLargest(
        (job) => job.row.waste_seconds,
        (job) => job.row.job,
      ),
    );
  const largest = jobs
    .flatMap(({ kinds, row }) => WASTE_KINDS.map((kind) => ({ job: row.job, kind, seconds: seconds(kinds[kind]) })))
    .filter((waste) => waste.seconds > 0)
    .sort(
      byLargest(
        (waste) => waste.seconds,
        (waste) => `${waste.job}\u0000${waste.kind}`,
      ),
    )[0];
  const { totals } = answer;
  return {
    head: {
      largest: largest ?? null,
      pipelines_considered: answer.pipelines,
      from: answer.from,
      to: answer.to,
      totals: {
        runner_seconds: seconds(totals.runner_seconds.total),
        retry_seconds: seconds(totals.retry_seconds.total),
        flaky_seconds: seconds(totals.flaky_runner_seconds.total),
        cache_seconds: seconds(totals.cache_seconds.total),
        queue_seconds: seconds(totals.queue_seconds.total),
        on_critical_path_seconds: seconds(
          totals.retry_seconds.on_critical_path +
            totals.flaky_runner_seconds.on_critical_path +
            totals.cache_seconds.on_critical_path +
            totals.queue_seconds.on_critical_path,
        ),
      },
      ...(totals.cost === undefined ? {} : { cost: totals.cost }),
      jobs_total: jobs.length,
    },
    listKey: 'jobs',
    items: jobs.map((job) => job.row),
  };
}

// --- runner_queue_health ----------------------------------------------------------------------------------------

const tagSet = z.object({
  tags: z.string().describe("The runner tags, sorted and joined by ','; '' for untagged runners"),
  p95_seconds: z.number(),
  p50_seconds: z.number(),
  jobs: z.number(),
  pipelines: z.number().int(),
  max_waiting: z.number().describe('The most jobs waiting at once'),
  worst_bucket: z.object({ start: z.string(), p95_seconds: z.number() }).nullable().describe('The hour or day with the longest p95 wait'),
});

export const runnerQueueOutput = z.object({
  longest_wait: z
    .object({ tags: z.string(), p95_seconds: z.number(), p50_seconds: z.number(), jobs: z.number() })
    .nullable()
    .describe('The tag set whose jobs waited longest for a runner (p95); null when no job waited'),
  pipelines_considered: z.number().int(),
  from: z.string(),
  to: z.string(),
  bucket: z.string(),
  tag_sets_total: z.number().int(),
  tag_sets: z.array(tagSet).describe('Longest p95 wait first'),
  next_cursor: cursorField,
});

export function runnerQueueAnswer(answer: RunnerQueue): Shaped<z.infer<typeof tagSet>> {
  const sets = answer.tag_sets
    .map((set) => {
      const worst = [...set.buckets].sort(
        byLargest(
          (bucket) => bucket.queue_seconds.p95,
          (bucket) => bucket.start,
        ),
      )[0];
      return {
        tags: short(set.tags),
        p95_seconds: seconds(set.queue_seconds.p95),
        p50_seconds: seconds(set.queue_seconds.p50),
        jobs: set.jobs,
        pipelines: set.pipelines,
        max_waiting: set.max_waiting,
        worst_bucket: worst === undefined ? null : { start: worst.start, p95_seconds: seconds(worst.queue_seconds.p95) },
      };
    })
    .sort(
      byLargest(
        (set) => set.p95_seconds,
        (set) => set.tags,
      ),
    );
  const longest = sets[0];
  return {
    head: {
      longest_wait:
        longest === undefined ? null : { tags: longest.tags, p95_seconds: longest.p95_seconds, p50_seconds: longest.p50_seconds, jobs: longest.jobs },
      pipelines_considered: answer.pipelines,
      from: answer.from,
      to: answer.to,
      bucket: answer.bucket,
      tag_sets_total: sets.length,
    },
    listKey: 'tag_sets',
    items: sets,
  };
}

// --- runner_what_if ---------------------------------------------------------------------------------------------

const pipelineChange = z.object({ pipeline_id: z.number().int(), before_seconds: z.number(), after_seconds: z.number(), change_seconds: z.number() });

export const whatIfOutput = z.object({
  effect: z
    .object({ tags: z.string(), runners_added: z.number().int(), queue_p95_before_seconds: z.number(), queue_p95_after_seconds: z.number() })
    .describe("The tag set's p95 queue wait replayed on the runners it had, and with the runners added"),
  pipelines_considered: z.number().int(),
  from: z.string(),
  to: z.string(),
  jobs: z.number().int(),
  sampled: z.boolean().describe('Some pipelines stand for others sampling left out: the replay cannot replay those'),
  concurrency: z.object({
    runners: z.number().int(),
    identified: z.boolean().describe('false: no job ever waited, so any count from `runners` up explains the recording'),
    max_running: z.number().int(),
    fit_error_seconds: z.number(),
    pickup_latency_seconds: z.number(),
  }),
  queue_seconds: z.object({ recorded: quantiles, before: quantiles, after: quantiles }),
  critical_path_seconds: z.object({ before: quantiles, after: quantiles }),
  affected_pipelines: z.number().int(),
  changed_pipelines: z.array(pipelineChange).describe("Pipelines whose critical path changes, most change first (the read's largest 100)"),
  next_cursor: cursorField,
});

export function whatIfAnswer(answer: WhatIf & { from: string; to: string }): Shaped<z.infer<typeof pipelineChange>> {
  const changes = answer.changed_pipelines
    .map((change) => ({
      pipeline_id: change.pipeline_id,
      before_seconds: seconds(change.critical_path_seconds.before),
      after_seconds: seconds(change.critical_path_seconds.after),
      change_seconds: seconds(change.change_seconds),
    }))
    .sort(
      byLargest(
        (change) => Math.abs(change.change_seconds),
        (change) => `${change.pipeline_id}`.padStart(16, '0'),
      ),
    );
  return {
    head: {
      effect: {
        tags: answer.tags,
        runners_added: answer.runners_added,
        queue_p95_before_seconds: seconds(answer.queue_seconds.before.p95),
        queue_p95_after_seconds: seconds(answer.queue_seconds.after.p95),
      },
      pipelines_considered: answer.pipelines,
      from: answer.from,
      to: answer.to,
      jobs: answer.jobs,
      sampled: answer.sampled,
      concurrency: answer.concurrency,
      queue_seconds: answer.queue_seconds,
      critical_path_seconds: answer.critical_path_seconds,
      affected_pipelines: answer.affected_pipelines,
    },
    listKey: 'changed_pipelines',
    items: changes,
  };
}

// --- slowest_jobs -----------------------------------------------------------------------------------------------

const jobSummary = z.object({
  job: z.string(),
  p95_seconds: z.number(),
  p50_seconds: z.number(),
  runs: z.number(),
  failures: z.number(),
  retries: z.number(),
  queue_p95_seconds: z.number(),
  critical_path_share: z.number().nullable().describe('How often it was on its pipeline’s critical path (0 to 1); null when not known'),
});

export const slowestJobsOutput = z.object({
  slowest: z
    .object({ job: z.string(), stage: z.string().nullable(), p95_seconds: z.number() })
    .nullable()
    .describe('The job name with the longest p95 duration; stage is null (the jobs read is per job name)'),
  from: z.string(),
  to: z.string(),
  ref: z.string().nullable(),
  jobs_total: z.number().int(),
  jobs: z.array(jobSummary).describe('Longest p95 duration first'),
  next_cursor: cursorField,
});

export function slowestJobsAnswer(answer: JobsAnswer): Shaped<z.infer<typeof jobSummary>> {
  const jobs = answer.jobs
    .map((job) => ({
      job: short(job.name),
      p95_seconds: seconds(job.duration_seconds.p95),
      p50_seconds: seconds(job.duration_seconds.p50),
      runs: job.runs,
      failures: job.failures,
      retries: job.retries,
      queue_p95_seconds: seconds(job.queue_seconds.p95),
      critical_path_share: job.critical_path.share,
    }))
    .sort(
      byLargest(
        (job) => job.p95_seconds,
        (job) => job.job,
      ),
    );
  const slowest = jobs[0];
  return {
    head: {
      slowest: slowest === undefined ? null : { job: slowest.job, stage: null, p95_seconds: slowest.p95_seconds },
      from: answer.from,
      to: answer.to,
      ref: shortOrNull(answer.ref),
      jobs_total: jobs.length,
    },
    listKey: 'jobs',
    items: jobs,
  };
}
