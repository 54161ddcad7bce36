import { JobRunRow, runMs } from './job-run';
import { weightedQuantile } from './percentiles';
import { seconds, weightOf } from './pipeline-runs';

/**
 * Waste (SPEC §13): per job name over a window, the runner time and waits a project could have saved: attempts a
 * retry superseded, flaky jobs (a failure and a success on one commit), cache restore and archive, queue wait by
 * the runner's tag set. Each figure is split into the part on the critical path (what developers waited for) and
 * the rest (what the fleet paid without anyone waiting), and priced where an operator configured prices. Every
 * figure is weighted by the run's adjusted count (SPEC §11), so counts are estimates and may be fractional. Pure:
 * the endpoint reads the rows and the prices.
 *
 * The figures overlap on purpose (a flaky failure that was retried is both retry and flaky time; its cache restore
 * is cache time too): each answers its own question, and they are not to be added up.
 */

/** Prices per runner minute, by the runner's tag set (sorted, joined by ',') or its type; a tag set's price wins. */
export interface Prices {
  readonly per_minute: {
    readonly runner_type?: Readonly<Record<string, number>>;
    readonly tags?: Readonly<Record<string, number>>;
  };
}

/** A figure in seconds and its split: on the critical path, off it, and where the path is not known yet (a pipeline still running). */
export interface PathSplit {
  readonly total: number;
  readonly on_critical_path: number;
  readonly off_critical_path: number;
  readonly path_unknown: number;
}

export interface WasteCost {
  readonly runner: number;
  readonly retry: number;
  readonly flaky: number;
  readonly cache: number;
  /** Runner time no price applied to (neither its tag set nor its runner type has one). */
  readonly unpriced_runner_seconds: number;
}

export interface JobWaste {
  readonly name: string;
  /** Runs, attempts included (estimated). */
  readonly runs: number;
  /** Pipelines the figures rest on. */
  readonly pipelines: number;
  /** All of the job's runner time, for scale. */
  readonly runner_seconds: PathSplit;
  /** Runner time of attempts a later attempt in the same pipeline superseded. */
  readonly retry_seconds: PathSplit;
  /** Commits on which the job both failed and succeeded, the failed runs there and their runner time. */
  readonly flaky: { readonly commits: number; readonly runs: number; readonly runner_seconds: PathSplit };
  /** restore_cache and archive_cache. */
  readonly cache_seconds: PathSplit;
  readonly cache_hits: number;
  readonly cache_misses: number;
  /** Some hits or misses were inferred from the restore's time, the runner not having said. */
  readonly inferred: boolean;
  /** Queue wait by the tag set of the runner that took the job ('' when none did or it is not known); most first. */
  readonly queue_seconds: ReadonlyArray<{ readonly tags: string; readonly seconds: PathSplit }>;
  /** Present when prices are configured; in the prices' currency. */
  readonly cost?: WasteCost;
}

export interface WasteLedger {
  /** Pipelines the ledger rests on. */
  readonly pipelines: number;
  /** Most waste first (retry, flaky, cache and queue seconds together). */
  readonly jobs: readonly JobWaste[];
  readonly totals: {
    readonly runner_seconds: PathSplit;
    readonly retry_seconds: PathSplit;
    readonly flaky_runner_seconds: PathSplit;
    readonly cache_seconds: PathSplit;
    readonly queue_seconds: PathSplit;
    readonly cache_hits: number;
    readonly cache_misses: number;
    readonly cost?: WasteCost;
  };
}

/**
 * Without the runner's word, a restore taking less than a quarter of the job's median restore is a miss: a miss
 * downloads nothing ("no cache found"), a hit downloads and extracts the archive. A job whose cache misses more
 * often than it hits has a median restore of a miss, and then its misses count as hits: `inferred` says to read
 * them with care.
 */
export const INFERRED_MISS_SHARE = 0.25;

/** Weighted ms by where on the path a run was. */
class Ledger {
  on = 0;
  off = 0;
  unknown = 0;

  add(row: JobRunRow, millis: number): void {
    const weighted = millis * weightOf(row);
    if (row.onCriticalPath === true) this.on += weighted;
    else if (row.onCriticalPath === false) this.off += weighted;
    else this.unknown += weighted;
  }

  addAll(other: Ledger): void {
    this.on += other.on;
    this.off += other.off;
    this.unknown += other.unknown;
  }

  get total(): number {
    return this.on + this.off + this.unknown;
  }

  answer(): PathSplit {
    return { total: seconds(this.total), on_critical_path: seconds(this.on), off_critical_path: seconds(this.off), path_unknown: seconds(this.unknown) };
  }
}

/** Weighted money by figure. */
class Bill {
  runner = 0;
  retry = 0;
  flaky = 0;
  cache = 0;
  unpricedMs = 0;

  addAll(other: Bill): void {
    this.runner += other.runner;
    this.retry += other.retry;
    this.flaky += other.flaky;
    this.cache += other.cache;
    this.unpricedMs += other.unpricedMs;
  }

  answer(): WasteCost {
    const money = (amount: number) => Math.round(amount * 10_000) / 10_000;
    return {
      runner: money(this.runner),
      retry: money(this.retry),
      flaky: money(this.flaky),
      cache: money(this.cache),
      unpriced_runner_seconds: seconds(this.unpricedMs),
    };
  }
}

const cacheMs = (row: JobRunRow) => row.partsMs.restore_cache + row.partsMs.archive_cache;
const round2 = (value: number) => Math.round(value * 100) / 100;

function pricePerMs(row: JobRunRow, prices: Prices | undefined): number | null {
  const perMinute = prices?.per_minute.tags?.[row.runnerTags] ?? prices?.per_minute.runner_type?.[row.runnerType];
  return perMinute === undefined || !Number.isFinite(perMinute) ? null : perMinute / 60_000;
}

/** The lower weighted median of the job's restores that took any time, for inferring hits and misses. */
function medianRestore(rows: readonly JobRunRow[]): number {
  const restores: number[] = [];
  const weights: number[] = [];
  for (const row of rows) {
    if (row.partsMs.restore_cache <= 0) continue;
    restores.push(row.partsMs.restore_cache);
    weights.push(weightOf(row));
  }
  return weightedQuantile(restores, weights, 0.5, 0) ?? 0;
}

interface JobLedger {
  readonly answer: JobWaste;
  readonly runner: Ledger;
  readonly retry: Ledger;
  readonly flaky: Ledger;
  readonly cache: Ledger;
  readonly queue: Ledger;
  readonly bill: Bill;
  readonly hits: number;
  readonly misses: number;
  readonly wasteMs: number;
}

function jobLedger(name: string, rows: readonly JobRunRow[], prices: Prices | undefined): JobLedger {
  const runner = new Ledger();
  const retry = new Ledger();
  const flaky = new Ledger();
  const cache = new Ledger();
  const queue = new Ledger();
  const queueByTags = new Map<string, Ledger>();
  const bill = new Bill();

  // Commits on which the job both failed and succeeded (in one pipeline through a retry, or in several).
  const outcomes = new Map<string, { failed: boolean; succeeded: boolean; weight: number }>();
  for (const row of rows) {
    if (row.sha === '' || (row.status !== 'failed' && row.status !== 'success')) continue;
    const seen = outcomes.get(row.sha) ?? { failed: false, succeeded: false, weight: 0 };
    if (row.status === 'failed') seen.failed = true;
    else seen.succeeded = true;
    // A commit counts as many times as the most its kept pipelines stand for.
    seen.weight = Math.max(seen.weight, weightOf(row));
    outcomes.set(row.sha, seen);
  }
  const flakyCommits = new Set([...outcomes].filter(([, seen]) => seen.failed && seen.succeeded).map(([sha]) => sha));

  const median = medianRestore(rows);
  let hits = 0;
  let misses = 0;
  let inferred = false;
  let flakyRuns = 0;
  for (const row of rows) {
    const run = runMs(row);
    const price = pricePerMs(row, prices);
    const weight = weightOf(row);
    const cost = (millis: number) => (price === null ? 0 : millis * price * weight);
    runner.add(row, run);
    bill.runner += cost(run);
    if (price === null) bill.unpricedMs += run * weight;
    if (row.retried) {
      retry.add(row, run);
      bill.retry += cost(run);
    }
    if (row.status === 'failed' && flakyCommits.has(row.sha)) {
      flaky.add(row, run);
      flakyRuns += weight;
      bill.flaky += cost(run);
    }
    cache.add(row, cacheMs(row));
    bill.cache += cost(cacheMs(row));
    let tagged = queueByTags.get(row.runnerTags);
    if (tagged === undefined) queueByTags.set(row.runnerTags, (tagged = new Ledger()));
    tagged.add(row, row.queueMs);
    queue.add(row, row.queueMs);

    if (row.cacheResult === 'hit') hits += weight;
    else if (row.cacheResult === 'miss') misses += weight;
    else if (row.runnerSpans && row.partsMs.restore_cache > 0) {
      inferred = true;
      if (row.partsMs.restore_cache < INFERRED_MISS_SHARE * median) misses += weight;
      else hits += weight;
    }
  }

  const pipelines = new Set(rows.map((row) => row.rootPipelineId)).size;
  const answer: JobWaste = {
    name,
    runs: round2(rows.reduce((sum, row) => sum + weightOf(row), 0)),
    pipelines,
    runner_seconds: runner.answer(),
    retry_seconds: retry.answer(),
    flaky: {
      commits: round2([...flakyCommits].reduce((sum, sha) => sum + outcomes.get(sha)!.weight, 0)),
      runs: round2(flakyRuns),
      runner_seconds: flaky.answer(),
    },
    cache_seconds: cache.answer(),
    cache_hits: round2(hits),
    cache_misses: round2(misses),
    inferred,
    queue_seconds: [...queueByTags]
      .sort(([tagsA, a], [tagsB, b]) => b.total - a.total || tagsA.localeCompare(tagsB))
      .map(([tags, ledger]) => ({ tags, seconds: ledger.answer() })),
    ...(prices === undefined ? {} : { cost: bill.answer() }),
  };
  return { answer, runner, retry, flaky, cache, queue, bill, hits, misses, wasteMs: retry.total + flaky.total + cache.total + queue.total };
}

/** The waste ledger of a project's job runs over a window, with costs when `prices` are given. */
export function wasteLedger(rows: readonly JobRunRow[], prices?: Prices): WasteLedger {
  const byName = new Map<string, JobRunRow[]>();
  for (const row of rows) {
    const members = byName.get(row.name);
    if (members === undefined) byName.set(row.name, [row]);
    else members.push(row);
  }
  const jobs = [...byName].map(([name, members]) => jobLedger(name, members, prices));
  jobs.sort((a, b) => b.wasteMs - a.wasteMs || a.answer.name.localeCompare(b.answer.name));

  const sum = (figure: (job: JobLedger) => Ledger) => {
    const total = new Ledger();
    for (const job of jobs) total.addAll(figure(job));
    return total.answer();
  };
  const bill = new Bill();
  for (const job of jobs) bill.addAll(job.bill);
  return {
    pipelines: new Set(rows.map((row) => row.rootPipelineId)).size,
    jobs: jobs.map((job) => job.answer),
    totals: {
      runner_seconds: sum((job) => job.runner),
      retry_seconds: sum((job) => job.retry),
      flaky_runner_seconds: sum((job) => job.flaky),
      cache_seconds: sum((job) => job.cache),
      queue_seconds: sum((job) => job.queue),
      cache_hits: round2(jobs.reduce((total, job) => total + job.hits, 0)),
      cache_misses: round2(jobs.reduce((total, job) => total + job.misses, 0)),
      ...(prices === undefined ? {} : { cost: bill.answer() }),
    },
  };
}
