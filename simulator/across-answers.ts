import type { PipelineComparison } from '../src/across/compare';
import type { Regressions } from '../src/across/regressions';
import type { RunnerQueue, WhatIf } from '../src/across/runner-queue';
import type { PathSplit, WasteLedger } from '../src/across/waste';
import { formatDuration } from '../src/cli/waterfall';

/**
 * The answers of the reads across pipelines (SPEC §13) as a person reads them in the demo: the service's JSON, named
 * by what it means, every figure the service's own. Simulated times are exact, so durations are printed to the tenth
 * of a second; ledgers, which add up many runs, to the second.
 */

/** The compare's answer: PipelineComparison, with how many pipelines its default baseline was the median of. */
export type Comparison = PipelineComparison & { readonly baseline: PipelineComparison['baseline'] & { readonly among?: number } };

const PARTS_SHOWN = 4;

/** `1m 00.3s`, `4.0s`: seconds given to the millisecond, as the waterfall prints a span. */
export const exactly = (seconds: number) => formatDuration(BigInt(Math.round(Math.abs(seconds) * 1000)) * 1_000_000n);
/** `+1m 00.3s`, `−0.4s`. */
export const signed = (seconds: number) => `${seconds < 0 ? '−' : '+'}${exactly(seconds)}`;
/** `1h 26m 12s`, `16m 10s`: a total of many runs, to the second. */
export function roughly(seconds: number): string {
  const whole = Math.round(seconds);
  const [hours, minutes, rest] = [Math.floor(whole / 3600), Math.floor((whole % 3600) / 60), whole % 60];
  const two = (value: number) => String(value).padStart(2, '0');
  if (hours > 0) return `${hours}h ${two(minutes)}m ${two(rest)}s`;
  return minutes > 0 ? `${minutes}m ${two(rest)}s` : `${rest}s`;
}
/** The first 8 hex digits of a commit, as GitLab's pages show it. */
export const shortSha = (sha: string) => sha.slice(0, 8);

/** The change by part, largest first, none of them zero: `restore_cache +1m 00.3s, step_script +1.2s, …`. */
function largestChanges(contributions: Readonly<Record<string, number>>, shown = PARTS_SHOWN): string {
  const named = Object.entries(contributions)
    .filter(([, seconds]) => seconds !== 0)
    .sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]) || a[0].localeCompare(b[0]));
  const listed = named.slice(0, shown).map(([part, seconds]) => `${part} ${signed(seconds)}`);
  if (named.length <= shown) return listed.join(', ');
  const rest = named.slice(shown).reduce((sum, [, seconds]) => sum + seconds, 0);
  return `${listed.join(', ')}, ${named.length - shown} more ${signed(rest)}`;
}

/** Whether the parts add up to the delta to the millisecond, as the compare promises. */
export function addsUp(answer: PipelineComparison): boolean {
  const parts = Object.values(answer.contributions).reduce((sum, seconds) => sum + Math.round(seconds * 1000), 0);
  return parts === Math.round(answer.duration_delta_seconds * 1000);
}

const onPath = (on: { readonly target: boolean; readonly baseline: boolean }) =>
  on.target && on.baseline ? 'on the path in both' : on.target ? 'onto the path' : on.baseline ? 'off the path now' : 'off the path in both';

export function comparisonLines(answer: Comparison): string[] {
  const { target, baseline } = answer.critical_path_seconds;
  return [
    `  pipeline ${answer.pipeline_id} against ${answer.baseline.description}`,
    `  critical path ${exactly(baseline)} → ${exactly(target)}, ${signed(answer.duration_delta_seconds)}: ${largestChanges(answer.contributions)}` +
      (addsUp(answer) ? ' (the parts add up to the change, to the millisecond)' : ''),
    `  by job: ${answer.jobs.map((job) => `${job.name} (${job.stage}) ${signed(job.delta_seconds)}, ${onPath(job.on_critical_path)}`).join('; ')}`,
  ];
}

export function regressionLines(answer: Regressions): string[] {
  const found = answer.change_points.length;
  return [
    `  ${answer.pipelines} pipelines, ${answer.series.tested} series tested, false-alarm rate ${answer.false_alarm_rate * 100} %: ` +
      `${found} change point${found === 1 ? '' : 's'}`,
    ...answer.change_points.map(
      (point) =>
        `  ${point.job === null ? 'the critical path' : `${point.job} (${point.stage}) ${point.part}`}: ${exactly(point.before_seconds)} → ${exactly(point.after_seconds)} ` +
        `from pipeline ${point.first_pipeline_id}, commit ${shortSha(point.first_sha)} on ${point.first_ref}, ${point.first_seen_at} ` +
        `(confidence ${(point.confidence * 100).toFixed(1)} %)`,
    ),
  ];
}

/** `12m 05s on runners (10m 00s on the path)`: a figure, what it is, and what developers waited of it. */
function ledger(split: PathSplit, what = ''): string {
  const figure = `${roughly(split.total)}${what}`;
  if (split.total === 0) return figure;
  if (split.on_critical_path === split.total) return `${figure} (all on the path)`;
  return split.on_critical_path === 0 ? `${figure} (none on the path)` : `${figure} (${roughly(split.on_critical_path)} on the path)`;
}

export function wasteLines(answer: WasteLedger): string[] {
  const lines = [`  ${answer.pipelines} pipelines; per job, its runner time and what of it developers waited (on the critical path):`];
  for (const job of answer.jobs) {
    const parts = [`${job.runs} runs, ${ledger(job.runner_seconds, ' on runners')}`];
    if (job.retry_seconds.total > 0) parts.push(`retried attempts ${ledger(job.retry_seconds)}`);
    if (job.flaky.commits > 0)
      parts.push(`flaky on ${job.flaky.commits} commit${job.flaky.commits === 1 ? '' : 's'}, its failures ${ledger(job.flaky.runner_seconds)}`);
    parts.push(`cache ${ledger(job.cache_seconds)}, ${job.cache_hits} hits and ${job.cache_misses} misses${job.inferred ? ' (inferred)' : ''}`);
    for (const queue of job.queue_seconds) parts.push(`queue on ${queue.tags} ${ledger(queue.seconds)}`);
    if (job.cost !== undefined) parts.push(`cost ${job.cost.runner.toFixed(2)}`);
    lines.push(`  ${job.name}: ${parts.join('; ')}`);
  }
  return lines;
}

/** `10:00` of an ISO time: the hour a bucket starts, UTC. */
const hourOf = (iso: string) => iso.slice(11, 16);

export function queueLines(answer: RunnerQueue): string[] {
  const lines: string[] = [];
  for (const tagSet of answer.tag_sets) {
    lines.push(
      `  ${tagSet.tags}: ${tagSet.jobs} jobs of ${tagSet.pipelines} pipelines, queue wait p50 ${exactly(tagSet.queue_seconds.p50)}, ` +
        `p95 ${exactly(tagSet.queue_seconds.p95)}, at most ${tagSet.max_waiting} waiting at once`,
    );
    for (const bucket of tagSet.buckets)
      lines.push(
        `    ${answer.bucket === 'hour' ? `${hourOf(bucket.start)} UTC` : bucket.start.slice(0, 10)}  ${bucket.jobs} jobs, ` +
          `p50 ${exactly(bucket.queue_seconds.p50)}, p95 ${exactly(bucket.queue_seconds.p95)}, at most ${bucket.max_waiting} waiting`,
      );
  }
  return lines;
}

export function whatIfLines(answer: WhatIf): string[] {
  const { concurrency, queue_seconds: queue, critical_path_seconds: paths } = answer;
  const quantiles = (q: { readonly p50: number; readonly p95: number }) => `${exactly(q.p50)} / ${exactly(q.p95)}`;
  const runners = (count: number) => `${count} runner${count === 1 ? '' : 's'}`;
  const largest = answer.changed_pipelines[0];
  return [
    `  learned from the recording: ${runners(concurrency.runners)} of ${answer.tags}` +
      (concurrency.identified
        ? ` (the replay is off by ${exactly(concurrency.fit_error_seconds)} a job on average; pickup latency up to ${exactly(concurrency.pickup_latency_seconds)})`
        : ' at least (no job waited for one: not identified)'),
    `  queue wait p50 / p95: recorded ${quantiles(queue.recorded)}, replayed ${quantiles(queue.before)}, ` +
      `with ${runners(concurrency.runners + answer.runners_added)} ${quantiles(queue.after)} (${answer.jobs} jobs)`,
    `  critical paths p50 / p95: ${quantiles(paths.before)} → ${quantiles(paths.after)}; ${answer.affected_pipelines} of ${answer.pipelines} pipelines change` +
      (largest === undefined ? '' : `, pipeline ${largest.pipeline_id} the most (${signed(largest.change_seconds)})`),
  ];
}
