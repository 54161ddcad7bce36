import { weightedQuantile } from './percentiles';
import type { JobRunRow } from './job-run';
import { groupByPipeline, pathMs, seconds, weightOf } from './pipeline-runs';

/**
 * Runners (SPEC §13): queue wait by the runner's tag set over time, and a what-if: the window's recorded jobs of a
 * tag set replayed against the concurrency learned from the recording, plus N runners. Pure: the endpoint reads
 * the rows.
 *
 * A job's tag set here is the tags of the runner that took it (the Job Hook's `runner.tags`): the job's own `tags:`
 * are not in the rows, and a job no runner took has none. Every figure is weighted by the adjusted count (SPEC §11),
 * except the replay itself, which can only replay the jobs it has.
 */

/** Windows longer than this are bucketed by day, shorter ones by hour. */
export const DAY_BUCKETS_FROM_MS = 3 * 24 * 3600_000;
/** The what-if lists this many pipelines whose critical path changes most. */
export const WHAT_IF_PIPELINES = 100;

export interface Window {
  /** Epoch ms, `to` excluded. */
  readonly from: number;
  readonly to: number;
}

export interface Quantiles {
  readonly p50: number;
  readonly p95: number;
}

export interface QueueBucket {
  /** The bucket's start, ISO 8601 (UTC hours or days). */
  readonly start: string;
  /** Jobs that became pending in the bucket (estimated) and the pipelines they rest on. */
  readonly jobs: number;
  readonly pipelines: number;
  readonly queue_seconds: Quantiles;
  /** The most jobs waiting for a runner of the tag set at once during the bucket (estimated). */
  readonly max_waiting: number;
}

export interface TagSetQueue {
  readonly tags: string;
  readonly jobs: number;
  readonly pipelines: number;
  readonly queue_seconds: Quantiles;
  readonly max_waiting: number;
  /** Oldest first; buckets without a job pending or waiting are left out. */
  readonly buckets: readonly QueueBucket[];
}

export interface RunnerQueue {
  readonly from: string;
  readonly to: string;
  readonly bucket: 'hour' | 'day';
  readonly pipelines: number;
  /** Longest p95 first. */
  readonly tag_sets: readonly TagSetQueue[];
}

const round2 = (value: number) => Math.round(value * 100) / 100;

function quantiles(values: ArrayLike<number>, weights: ArrayLike<number>): Quantiles {
  return { p50: seconds(weightedQuantile(values, weights, 0.5) ?? 0), p95: seconds(weightedQuantile(values, weights, 0.95) ?? 0) };
}

/** Rows a runner took, by the tag set of that runner. */
function takenByTags(rows: readonly JobRunRow[]): Map<string, JobRunRow[]> {
  const byTags = new Map<string, JobRunRow[]>();
  for (const row of rows) {
    if (row.startedAt === null) continue;
    const members = byTags.get(row.runnerTags);
    if (members === undefined) byTags.set(row.runnerTags, [row]);
    else members.push(row);
  }
  return byTags;
}

/**
 * The most jobs waiting at once per bucket: a sweep over the waits' starts and ends, each wait weighted. A count
 * holding across a bucket's start counts in that bucket too.
 */
function maxWaitingByBucket(rows: readonly JobRunRow[], bucketOf: (time: number) => number): Map<number, number> {
  // The events side by side (a month's tag set is tens of thousands): each wait's start (+weight) and end (−weight).
  const times = new Float64Array(rows.length * 2);
  const changes = new Float64Array(rows.length * 2);
  let count = 0;
  for (const row of rows) {
    if (row.startedAt! <= row.pendingAt) continue;
    const weight = weightOf(row);
    times[count] = row.pendingAt;
    changes[count++] = weight;
    times[count] = row.startedAt!;
    changes[count++] = -weight;
  }
  // At one instant, a job leaving the queue before another joins: one runner taking a job as another comes is no overlap.
  const order = new Int32Array(count);
  for (let i = 0; i < count; i++) order[i] = i;
  order.sort((a, b) => times[a] - times[b] || changes[a] - changes[b]);
  const most = new Map<number, number>();
  const raise = (bucket: number, waiting: number) => most.set(bucket, Math.max(most.get(bucket) ?? 0, waiting));
  let waiting = 0;
  for (let i = 0; i < count; i++) {
    const time = times[order[i]];
    waiting += changes[order[i]];
    const next = i + 1 < count ? times[order[i + 1]] : undefined;
    if (next === time) continue;
    const bucket = bucketOf(time);
    raise(bucket, waiting);
    if (next !== undefined && waiting > 1e-9) for (let later = bucket + 1; later <= bucketOf(next - 1); later++) raise(later, waiting);
  }
  return most;
}

/** Queue wait p50/p95 per tag set over the window, hourly or daily, with the most jobs waiting at once. */
export function runnerQueue(rows: readonly JobRunRow[], window: Window): RunnerQueue {
  const bucketMs = window.to - window.from > DAY_BUCKETS_FROM_MS ? 24 * 3600_000 : 3600_000;
  const origin = Math.floor(window.from / bucketMs) * bucketMs;
  const bucketOf = (time: number) => Math.floor((Math.min(Math.max(time, window.from), window.to - 1) - origin) / bucketMs);
  const inWindow = rows.filter((row) => row.pendingAt >= window.from && row.pendingAt < window.to);
  const tagSets: TagSetQueue[] = [];
  for (const [tags, members] of takenByTags(inWindow)) {
    const most = maxWaitingByBucket(members, bucketOf);
    const byBucket = new Map<number, JobRunRow[]>();
    for (const row of members) {
      const bucket = bucketOf(row.pendingAt);
      const list = byBucket.get(bucket);
      if (list === undefined) byBucket.set(bucket, [row]);
      else list.push(row);
    }
    const summary = (list: readonly JobRunRow[]) => ({
      jobs: round2(list.reduce((sum, row) => sum + weightOf(row), 0)),
      pipelines: new Set(list.map((row) => row.rootPipelineId)).size,
      queue_seconds: quantiles(
        list.map((row) => row.queueMs),
        list.map((row) => weightOf(row)),
      ),
    });
    const buckets = [...new Set([...byBucket.keys(), ...most.keys()])]
      .sort((a, b) => a - b)
      .map((bucket) => ({
        start: new Date(origin + bucket * bucketMs).toISOString(),
        ...summary(byBucket.get(bucket) ?? []),
        max_waiting: round2(most.get(bucket) ?? 0),
      }));
    tagSets.push({ tags, ...summary(members), max_waiting: round2(Math.max(0, ...most.values())), buckets });
  }
  tagSets.sort((a, b) => b.queue_seconds.p95 - a.queue_seconds.p95 || a.tags.localeCompare(b.tags));
  return {
    from: new Date(window.from).toISOString(),
    to: new Date(window.to).toISOString(),
    bucket: bucketMs === 3600_000 ? 'hour' : 'day',
    pipelines: new Set(inWindow.map((row) => row.rootPipelineId)).size,
    tag_sets: tagSets,
  };
}

/** A recorded job as the replay needs it, ms. */
export interface ReplayJob {
  readonly pendingAt: number;
  readonly runMs: number;
  /** The recorded queue wait (pending → picked up). */
  readonly waitMs: number;
}

/** A binary min-heap of the times slots come free. */
class FreeSlots {
  private readonly heap: Float64Array;

  constructor(slots: number) {
    this.heap = new Float64Array(slots).fill(-Infinity);
  }

  get earliest(): number {
    return this.heap[0];
  }

  /** The earliest-free slot is taken until `until`. */
  takeEarliest(until: number): void {
    const heap = this.heap;
    let at = 0;
    for (;;) {
      const left = 2 * at + 1;
      if (left >= heap.length) break;
      const child = left + 1 < heap.length && heap[left + 1] < heap[left] ? left + 1 : left;
      if (heap[child] >= until) break;
      heap[at] = heap[child];
      at = child;
    }
    heap[at] = until;
  }
}

/**
 * The queue waits of `jobs` (in the order they became pending) replayed first in, first out on `slots` runners: a
 * job starts when a slot is free and it has waited its pickup latency (its recorded wait, up to `latencyMs`), the
 * earliest-free slot taking it. n log slots.
 */
export function replayFifo(jobs: readonly ReplayJob[], slots: number, latencyMs = 0): Float64Array {
  const waits = new Float64Array(jobs.length);
  if (slots < 1) return waits.fill(Infinity);
  const free = new FreeSlots(Math.min(slots, Math.max(1, jobs.length)));
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i];
    const start = Math.max(job.pendingAt + Math.min(job.waitMs, latencyMs), free.earliest);
    free.takeEarliest(start + job.runMs);
    waits[i] = start - job.pendingAt;
  }
  return waits;
}

export interface Concurrency {
  /** The runners the recorded waits are best explained by (at least this many when not identified). */
  readonly runners: number;
  /** The recording showed jobs waiting for a runner: without that, any number from `runners` up explains it. */
  readonly identified: boolean;
  /** The most of the tag set's jobs that ran at once in the recording. */
  readonly max_running: number;
  /** Mean |replayed − recorded| wait on `runners`. */
  readonly fit_error_seconds: number;
  /** GitLab's pickup latency at most: a replayed job waits at least its recorded wait up to this. */
  readonly pickup_latency_seconds: number;
}

/** Quantiles of the recorded waits tried as the most GitLab's pickup latency takes. */
const LATENCY_QUANTILES = [0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5];

/**
 * The concurrency a tag set's recorded jobs had, for the what-if. Estimator: the M whose FIFO replay of the
 * recorded pending times and run durations reproduces the recorded waits best (least mean absolute difference per
 * job). Replayed waits only shrink as slots are added, so M is near where the replay's mean wait crosses the
 * recorded mean: found by binary search over 1 … the most jobs that ran at once (more slots than ever ran cannot
 * be told apart), then its neighbours compared (a few replays, each n log M). Every recorded wait holds GitLab's
 * pickup latency (runners poll), which no slot count explains: in the replay a job waits at least its recorded
 * wait up to a cap, the one of a few quantiles of the recorded waits (2 % to 50 %) that fits best, so the fit is
 * not pulled to fewer slots and short waits are reproduced; more runners never make a job wait less than that.
 * The fleet's other projects are not in the rows: on shared runners M is the concurrency this project's jobs got,
 * not the fleet's size.
 */
export function learnConcurrency(jobs: readonly ReplayJob[]): Concurrency {
  const maxRunning = mostAtOnce(jobs.map((job) => [job.pendingAt + job.waitMs, job.pendingAt + job.waitMs + job.runMs] as const));
  const ceiling = Math.max(1, maxRunning);
  const recordedMean = mean(jobs.map((job) => job.waitMs));
  const errorOf = (slots: number, latency: number) => {
    const waits = replayFifo(jobs, slots, latency);
    let total = 0;
    for (let i = 0; i < jobs.length; i++) total += Math.abs(waits[i] - jobs[i].waitMs);
    return jobs.length === 0 ? 0 : total / jobs.length;
  };
  const fit = (latency: number) => {
    let low = 1;
    let high = ceiling;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (mean(replayFifo(jobs, middle, latency)) <= recordedMean) high = middle;
      else low = middle + 1;
    }
    let best = { slots: low, latency, error: errorOf(low, latency) };
    for (const slots of [low - 2, low - 1, low + 1, low + 2]) {
      if (slots < 1 || slots > ceiling) continue;
      const error = errorOf(slots, latency);
      if (error < best.error) best = { slots, latency, error };
    }
    return best;
  };
  const sorted = Float64Array.from(jobs.map((job) => job.waitMs)).sort();
  const latencies = [...new Set(LATENCY_QUANTILES.map((q) => (sorted.length === 0 ? 0 : sorted[Math.floor(q * sorted.length)])))];
  const best = latencies.map(fit).reduce((found, candidate) => (candidate.error < found.error ? candidate : found));
  // Identified when a limited number of slots explains the waits clearly better than runners always free.
  const unlimited = errorOf(Math.max(1, jobs.length), best.latency);
  const identified = best.error < 0.9 * unlimited;
  return {
    runners: identified ? best.slots : ceiling,
    identified,
    max_running: maxRunning,
    fit_error_seconds: seconds(identified ? best.error : errorOf(ceiling, best.latency)),
    pickup_latency_seconds: seconds(best.latency),
  };
}

const mean = (values: ArrayLike<number>) => {
  let total = 0;
  for (let i = 0; i < values.length; i++) total += values[i];
  return values.length === 0 ? 0 : total / values.length;
};

function mostAtOnce(intervals: ReadonlyArray<readonly [start: number, end: number]>): number {
  const events = new Float64Array(intervals.length * 2);
  // Ends sort before starts at the same instant (a slot freed and taken again at once is one slot): ends as 2t, starts as 2t+1.
  intervals.forEach(([start, end], i) => {
    events[2 * i] = 2 * start + 1;
    events[2 * i + 1] = 2 * end;
  });
  events.sort();
  let running = 0;
  let most = 0;
  for (const event of events) {
    running += event % 2 === 1 ? 1 : -1;
    most = Math.max(most, running);
  }
  return most;
}

export interface WhatIfRequest {
  /** The tag set, as the rows have it (sorted, joined by ','). */
  readonly tags: string;
  /** Runners added (negative: taken away). */
  readonly runners: number;
}

export interface PipelineChange {
  readonly pipeline_id: number;
  readonly critical_path_seconds: { readonly before: number; readonly after: number };
  readonly change_seconds: number;
}

export interface WhatIf {
  readonly tags: string;
  readonly runners_added: number;
  readonly concurrency: Concurrency;
  /** Jobs replayed (each once: the replay cannot replay what sampling left out) and the pipelines they rest on. */
  readonly jobs: number;
  readonly pipelines: number;
  /** Some replayed pipelines stand for more than themselves (SPEC §11 head sampling): their unkept siblings are not in the replay. */
  readonly sampled: boolean;
  readonly queue_seconds: {
    /** As recorded. */
    readonly recorded: Quantiles;
    /** Replayed on the learned concurrency: how well the replay reproduces the recording. */
    readonly before: Quantiles;
    /** Replayed with the runners added. */
    readonly after: Quantiles;
  };
  /** The critical paths of the pipelines that ran a job of the tag set, before and after. */
  readonly critical_path_seconds: { readonly before: Quantiles; readonly after: Quantiles };
  /** Pipelines whose critical path changes. */
  readonly affected_pipelines: number;
  /** The largest changes, up to 100. */
  readonly changed_pipelines: readonly PipelineChange[];
}

/**
 * What N more (or fewer) runners of a tag set would have changed over the window the rows cover: the tag set's jobs
 * replayed on the learned concurrency and on it plus N. A pipeline's critical path changes, to a first
 * approximation, by the change of its on-path jobs' queue waits (each job's recorded wait moved by its replayed
 * change, never below zero): a job off the path that would now finish earlier or later is not walked again, so a
 * path that would move to another job is not seen.
 */
export function whatIf(rows: readonly JobRunRow[], request: WhatIfRequest): WhatIf {
  const replayed = rows
    .filter((row) => row.runnerTags === request.tags && row.startedAt !== null && row.finishedAt !== null)
    .sort((a, b) => a.pendingAt - b.pendingAt || a.startedAt! - b.startedAt! || a.jobId - b.jobId);
  const jobs: ReplayJob[] = replayed.map((row) => ({
    pendingAt: row.pendingAt,
    runMs: Math.max(0, row.finishedAt! - row.startedAt!),
    waitMs: Math.max(0, row.startedAt! - row.pendingAt),
  }));
  const concurrency = learnConcurrency(jobs);
  const latency = Math.round(concurrency.pickup_latency_seconds * 1000);
  const before = replayFifo(jobs, concurrency.runners, latency);
  const after = replayFifo(jobs, Math.max(1, concurrency.runners + request.runners), latency);
  const weights = replayed.map((row) => weightOf(row));
  const weighted = (waits: ArrayLike<number>) => quantiles(waits, weights);

  const changeByPipeline = new Map<number, number>();
  replayed.forEach((row, i) => {
    if (row.onCriticalPath !== true) return;
    const recorded = jobs[i].waitMs;
    const change = Math.max(0, recorded + after[i] - before[i]) - recorded;
    changeByPipeline.set(row.rootPipelineId, (changeByPipeline.get(row.rootPipelineId) ?? 0) + change);
  });
  const touched = new Set(replayed.map((row) => row.rootPipelineId));
  const paths = groupByPipeline(rows.filter((row) => touched.has(row.rootPipelineId)))
    .map((pipeline) => ({ pipeline, path: pathMs(pipeline), change: Math.round(changeByPipeline.get(pipeline.pipelineId) ?? 0) }))
    .filter((entry): entry is { pipeline: (typeof entry)['pipeline']; path: number; change: number } => entry.path !== null);
  const changed = paths
    .filter((entry) => entry.change !== 0)
    .sort((a, b) => Math.abs(b.change) - Math.abs(a.change) || a.pipeline.pipelineId - b.pipeline.pipelineId);

  return {
    tags: request.tags,
    runners_added: request.runners,
    concurrency,
    jobs: replayed.length,
    pipelines: touched.size,
    sampled: replayed.some((row) => weightOf(row) > 1),
    queue_seconds: {
      recorded: weighted(jobs.map((job) => job.waitMs)),
      before: weighted(before),
      after: weighted(after),
    },
    critical_path_seconds: {
      before: quantiles(
        paths.map((entry) => entry.path),
        paths.map((entry) => weightOf(entry.pipeline)),
      ),
      after: quantiles(
        paths.map((entry) => entry.path + entry.change),
        paths.map((entry) => weightOf(entry.pipeline)),
      ),
    },
    affected_pipelines: changed.length,
    changed_pipelines: changed.slice(0, WHAT_IF_PIPELINES).map((entry) => ({
      pipeline_id: entry.pipeline.pipelineId,
      critical_path_seconds: { before: seconds(entry.path), after: seconds(entry.path + entry.change) },
      change_seconds: seconds(entry.change),
    })),
  };
}
