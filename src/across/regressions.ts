import { RUNNER_PARTS, RunnerPart } from '../critical-path/critical-path';
import { ascendingOrder, weightedQuantile } from './percentiles';
import { partsInto, type JobRunRow } from './job-run';
import { groupByPipeline, pathMs, PipelineRuns, seconds, weightOf } from './pipeline-runs';

/**
 * Regressions (SPEC §13): where a duration stepped up or down, over per-pipeline values in pipeline creation order,
 * per job name, stage and runner stage, and for the pipeline's critical path as a whole; each named by the first
 * pipeline after the step, its commit and its ref.
 *
 * The method, and its false-alarm rate. Within a series of n values, every split point k (at least `minSegment`
 * values on each side) is scored by the Mann–Whitney rank statistic of the values before it against those after,
 * standardized (mid-ranks, tie-corrected variance); the split scoring highest, |Z| = b, is the candidate. Ranks make
 * it indifferent to the long right tail of CI durations, and under "no change" (the values exchangeable) its
 * distribution depends on n alone. Its p-value is bounded by Miller and Siegmund's approximation for a maximally
 * selected standardized statistic (1982), p ≈ b φ(b) (1 − 1/b²) · 2 log((1 − t0)/t0) + 4 φ(b)/b with t0 = minSegment/n,
 * or by Bonferroni over the splits where that is smaller; both overstate the true p here (against random orders,
 * 10^5 of 60 and of 300 values, 2·10^4 of 2000: at b = 4 the bound is 6, 2.3 and 1.8 times the tail found), so the
 * rate below is an upper bound. A series changed when p × S ≤ `falseAlarmRate`, S being the number of series tested in the
 * project (Bonferroni): in a project where nothing changed, the chance of reporting any change point at all is at
 * most `falseAlarmRate` (1 % by default). Several change points are found by binary segmentation: each side of a
 * change found is tested again, at the same level. A change must also be big enough to matter: medians at least
 * 10 % and 1 s apart (`minEffectShare`, `minEffectMs`), so a real but tiny shift in a thousand pipelines is no
 * regression. `confidence` is 1 − p × S.
 *
 * What it assumes: values of one series are exchangeable while nothing changes. A slow drift, or a daily rhythm of
 * a shared runner fleet, is not noise to a rank test; the effect minimum keeps small such movements out. Only runs
 * that succeeded, were not superseded by a retry and whose runner sent its stage spans count for a runner stage
 * (a failed run stops early; a run without stage spans has all its time in `other`); only ended pipelines that did
 * not fail or get canceled count for the critical path. Adjusted counts (SPEC §11) weigh the medians reported; the
 * test is over the pipelines kept, in order.
 */

export const FALSE_ALARM_RATE = 0.01;
export const MIN_SEGMENT = 5;
export const MIN_EFFECT_MS = 1000;
export const MIN_EFFECT_SHARE = 0.1;

export interface RegressionOptions {
  /** The chance of any change point being reported in a project where nothing changed. */
  readonly falseAlarmRate?: number;
  /** Pipelines needed on each side of a change point. */
  readonly minSegment?: number;
  readonly minEffectMs?: number;
  readonly minEffectShare?: number;
}

export type SeriesPart = RunnerPart | 'critical_path';

export interface ChangePoint {
  /** The job name and stage; null for the pipeline's critical path. */
  readonly job: string | null;
  readonly stage: string | null;
  readonly part: SeriesPart;
  /** Weighted medians of the pipelines since the change point before it (or the start) and up to the next one (or the end). */
  readonly before_seconds: number;
  readonly after_seconds: number;
  readonly first_pipeline_id: number;
  readonly first_sha: string;
  readonly first_ref: string;
  /** The first pipeline's creation, ISO 8601. */
  readonly first_seen_at: string;
  /** 1 − the family-wise p-value. */
  readonly confidence: number;
  /** The pipelines the medians rest on (both sides). */
  readonly pipelines: number;
}

export interface Regressions {
  /** Oldest first. */
  readonly change_points: readonly ChangePoint[];
  /** Pipelines read. */
  readonly pipelines: number;
  readonly series: {
    /** Series tested (the S of the correction). */
    readonly tested: number;
    /** Series with too few pipelines to decide (fewer than two segments' worth): no change point can be found there. */
    readonly too_short: number;
  };
  readonly false_alarm_rate: number;
  readonly method: string;
}

export interface Split {
  /** Index of the first value after the split. */
  readonly at: number;
  /** The standardized rank statistic there (positive: the values after are larger). */
  readonly z: number;
  /** Upper bound on the chance of a score this large anywhere in the series with no change. */
  readonly p: number;
}

/** The standard normal's upper tail, 1 − Φ(x) (erfc by Numerical Recipes' Chebyshev fit, relative error below 1.2e-7). */
export function normalTail(x: number): number {
  const z = Math.abs(x) / Math.SQRT2;
  const t = 1 / (1 + 0.5 * z);
  const erfc =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? erfc / 2 : 1 - erfc / 2;
}

const density = (x: number) => Math.exp((-x * x) / 2) / Math.sqrt(2 * Math.PI);

/** The bound on the p-value of a maximum |Z| = b over the splits of n values with at least minSegment on each side. */
export function splitPValue(b: number, n: number, minSegment: number): number {
  const splits = n - 2 * minSegment + 1;
  if (splits <= 0) return 1;
  const bonferroni = splits * 2 * normalTail(b);
  const t0 = minSegment / n;
  const millerSiegmund = b <= 1 ? 1 : b * density(b) * (1 - 1 / (b * b)) * 2 * Math.log((1 - t0) / t0) + (4 * density(b)) / b;
  return Math.min(1, bonferroni, millerSiegmund);
}

/** The split of `values` with the largest standardized rank statistic; null when there is no split or no variance. */
export function bestSplit(values: ArrayLike<number>, minSegment = MIN_SEGMENT): Split | null {
  const n = values.length;
  if (n < 2 * minSegment) return null;
  const order = ascendingOrder(values);
  const ranks = new Float64Array(n);
  let ties = 0;
  for (let i = 0; i < n;) {
    let j = i;
    while (j + 1 < n && values[order[j + 1]] === values[order[i]]) j++;
    const size = j - i + 1;
    for (let k = i; k <= j; k++) ranks[order[k]] = (i + j) / 2 + 1;
    ties += size ** 3 - size;
    i = j + 1;
  }
  const spread = n + 1 - ties / (n * (n - 1));
  if (spread <= 0) return null;
  let best: Split | null = null;
  let rankSum = 0;
  for (let k = 1; k < n; k++) {
    rankSum += ranks[k - 1];
    if (k < minSegment || n - k < minSegment) continue;
    // U of the values after the split against those before: large when the later values are larger.
    const u = (n * (n + 1)) / 2 - rankSum - ((n - k) * (n - k + 1)) / 2;
    const z = (u - (k * (n - k)) / 2) / Math.sqrt(((k * (n - k)) / 12) * spread);
    if (best === null || Math.abs(z) > Math.abs(best.z)) best = { at: k, z, p: 1 };
  }
  return best === null ? null : { ...best, p: splitPValue(Math.abs(best.z), n, minSegment) };
}

interface Series {
  readonly job: string | null;
  readonly stage: string | null;
  readonly part: SeriesPart;
  readonly pipelines: PipelineRuns[];
  /** One value per pipeline and its weight, side by side (a month is thousands of series of thousands of values). */
  readonly values: Float64Array;
  readonly weights: Float64Array;
}

interface SeriesBuilder {
  readonly job: string | null;
  readonly stage: string | null;
  readonly part: SeriesPart;
  readonly pipelines: PipelineRuns[];
  readonly values: number[];
}

const FAILED = new Set(['failed', 'canceled', 'skipped']);

function seriesOf(pipelines: readonly PipelineRuns[]): Series[] {
  const path: SeriesBuilder = { job: null, stage: null, part: 'critical_path', pipelines: [], values: [] };
  // By stage, then name (no key made per row); each job's series once per part, and the pipeline last added to them.
  const byStage = new Map<string, Map<string, { series: SeriesBuilder[]; last: PipelineRuns | null }>>();
  const all: SeriesBuilder[][] = [];
  const parts = new Float64Array(RUNNER_PARTS.length);
  for (const pipeline of pipelines) {
    const time = pathMs(pipeline);
    if (pipeline.finishedAt !== null && !FAILED.has(pipeline.status) && time !== null) {
      path.pipelines.push(pipeline);
      path.values.push(time);
    }
    // A job's value in a pipeline: its stages summed over its runs that count (a name run in a child too is one job).
    for (const row of pipeline.rows) {
      if (row.status !== 'success' || row.retried || !row.runnerSpans) continue;
      let names = byStage.get(row.stage);
      if (names === undefined) byStage.set(row.stage, (names = new Map()));
      let job = names.get(row.name);
      if (job === undefined) {
        job = { series: RUNNER_PARTS.map((part) => ({ job: row.name, stage: row.stage, part, pipelines: [], values: [] })), last: null };
        names.set(row.name, job);
        all.push(job.series);
      }
      const first = job.last !== pipeline;
      job.last = pipeline;
      partsInto(row, parts);
      for (let i = 0; i < RUNNER_PARTS.length; i++) {
        const series = job.series[i];
        const value = parts[i];
        if (first) {
          series.pipelines.push(pipeline);
          series.values.push(value);
        } else {
          series.values[series.values.length - 1] += value;
        }
      }
    }
  }
  return [path, ...all.flat()].map((series) => {
    // Filled by loops: Float64Array.from with a mapping function walks an iterator, several times slower.
    const values = new Float64Array(series.values.length);
    const weights = new Float64Array(series.values.length);
    for (let i = 0; i < values.length; i++) {
      values[i] = series.values[i];
      weights[i] = weightOf(series.pipelines[i]);
    }
    return { ...series, values, weights };
  });
}

/** The largest value less the smallest, of values[from, to). */
function spread(values: Float64Array, from: number, to: number): number {
  let least = Infinity;
  let most = -Infinity;
  for (let i = from; i < to; i++) {
    if (values[i] < least) least = values[i];
    if (values[i] > most) most = values[i];
  }
  return most - least;
}

const partOrder = (part: SeriesPart) => (part === 'critical_path' ? -1 : RUNNER_PARTS.indexOf(part));

/**
 * The change points of a project's job runs over a window (the rows of every pipeline in it; one ref, or the
 * caller's mix). Pure: the endpoint reads the rows.
 */
export function findRegressions(rows: readonly JobRunRow[], options: RegressionOptions = {}): Regressions {
  const falseAlarmRate = options.falseAlarmRate ?? FALSE_ALARM_RATE;
  const minSegment = options.minSegment ?? MIN_SEGMENT;
  const minEffectMs = options.minEffectMs ?? MIN_EFFECT_MS;
  const minEffectShare = options.minEffectShare ?? MIN_EFFECT_SHARE;
  const pipelines = groupByPipeline(rows);
  const all = seriesOf(pipelines);
  // A stage the job never has (all zero) or a value that never moves can hold no change: not tested, not counted.
  const varying = all.filter((series) => series.values.some((value) => value !== series.values[0]));
  const tested = varying.filter((series) => series.values.length >= 2 * minSegment);
  const family = Math.max(1, tested.length);

  const median = (series: Series, from: number, to: number) => weightedQuantile(series.values.subarray(from, to), series.weights.subarray(from, to), 0.5)!;
  const bigEnough = (before: number, after: number) => Math.abs(after - before) >= Math.max(minEffectMs, minEffectShare * before);

  const changePoints: ChangePoint[] = [];
  for (const series of tested) {
    const splits: Array<{ at: number; p: number }> = [];
    const segments: Array<[number, number]> = [[0, series.values.length]];
    while (segments.length > 0) {
      const [from, to] = segments.pop()!;
      // Medians lie within the values: a stretch that never moves by the effect's minimum holds no change that
      // matters, and is not ranked (most of a month's series, a stage of a second or two).
      if (spread(series.values, from, to) < minEffectMs) continue;
      const split = bestSplit(series.values.subarray(from, to), minSegment);
      if (split === null || split.p * family > falseAlarmRate) continue;
      const at = from + split.at;
      if (!bigEnough(median(series, from, at), median(series, at, to))) continue;
      splits.push({ at, p: split.p });
      segments.push([from, at], [at, to]);
    }
    splits.sort((a, b) => a.at - b.at);
    // Each split placed again between its neighbours: found first in a stretch holding two steps (up, then back
    // down), the best single split there can be a pipeline or two off; between its neighbours it has one step.
    for (const [i, split] of splits.entries()) {
      const from = i === 0 ? 0 : splits[i - 1].at;
      const to = i === splits.length - 1 ? series.values.length : splits[i + 1].at;
      const placed = bestSplit(series.values.subarray(from, to), minSegment);
      if (placed !== null) split.at = from + placed.at;
    }
    for (const [i, { at, p }] of splits.entries()) {
      const from = i === 0 ? 0 : splits[i - 1].at;
      const to = i === splits.length - 1 ? series.values.length : splits[i + 1].at;
      const before = median(series, from, at);
      const after = median(series, at, to);
      // The medians reported are between the neighbouring change points: they too must show a change that matters.
      if (!bigEnough(before, after)) continue;
      const first = series.pipelines[at];
      changePoints.push({
        job: series.job,
        stage: series.stage,
        part: series.part,
        before_seconds: seconds(before),
        after_seconds: seconds(after),
        first_pipeline_id: first.pipelineId,
        first_sha: first.sha,
        first_ref: first.ref,
        first_seen_at: new Date(first.createdAt).toISOString(),
        confidence: Math.floor((1 - p * family) * 10_000) / 10_000,
        pipelines: to - from,
      });
    }
  }
  changePoints.sort(
    (a, b) =>
      a.first_seen_at.localeCompare(b.first_seen_at) ||
      (a.job ?? '').localeCompare(b.job ?? '') ||
      (a.stage ?? '').localeCompare(b.stage ?? '') ||
      partOrder(a.part) - partOrder(b.part),
  );
  return {
    change_points: changePoints,
    pipelines: pipelines.length,
    series: { tested: tested.length, too_short: varying.length - tested.length },
    false_alarm_rate: falseAlarmRate,
    method:
      `max over split points of the standardized Mann–Whitney rank statistic, p bounded by Miller–Siegmund, ` +
      `Bonferroni over ${tested.length} series, binary segmentation; at least ${minSegment} pipelines each side ` +
      `and medians ${Math.round(minEffectShare * 100)} % and ${seconds(minEffectMs)} s apart`,
  };
}
