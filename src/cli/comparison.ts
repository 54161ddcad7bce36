import type { Contribution, PipelineComparison } from '../across/compare';
import { PART_WORDS } from './waterfall';

/** How each part of a change in the path's time reads: the waterfall's words for the path's parts, and the path moving. */
const CONTRIBUTION_WORDS: Readonly<Record<Contribution, string>> = {
  ...PART_WORDS,
  manual: PART_WORDS.manual_wait,
  retry: PART_WORDS.retry_wait,
  delayed: PART_WORDS.delayed_wait,
  resource: PART_WORDS.resource_wait,
  path_moved: 'on jobs on only one of the two critical paths',
};

/** How many of the jobs that changed are listed: the rest are the answer's, a read away. */
const JOBS_SHOWN = 5;

const millisOf = (seconds: number) => Math.round(seconds * 1000);

/**
 * A change in milliseconds as a person reads it, signed and exact (`+1m 00s`, `-12.345s`, `0s`): the parts are shown
 * to the millisecond, so they visibly add up to the delta they split.
 */
export function formatChange(millis: number): string {
  const sign = millis > 0 ? '+' : millis < 0 ? '-' : '';
  const total = Math.abs(millis);
  const fraction =
    total % 1000 === 0
      ? ''
      : `.${String(total % 1000)
          .padStart(3, '0')
          .replace(/0+$/, '')}`;
  const wholeSeconds = Math.floor(total / 1000);
  if (wholeSeconds < 60) return `${sign}${wholeSeconds}${fraction}s`;
  return `${sign}${Math.floor(wholeSeconds / 60)}m ${String(wholeSeconds % 60).padStart(2, '0')}${fraction}s`;
}

/** A duration in seconds to the second, for the paths' own lengths (`3m 37s`). */
function formatPath(seconds: number): string {
  const whole = Math.round(seconds);
  return whole < 60 ? `${whole}s` : `${Math.floor(whole / 60)}m ${String(whole % 60).padStart(2, '0')}s`;
}

function pathWords(onPath: { readonly target: boolean; readonly baseline: boolean }): string {
  if (onPath.target && onPath.baseline) return 'on the critical path in both';
  if (onPath.target) return 'now on the critical path';
  if (onPath.baseline) return 'no longer on the critical path';
  return 'off the critical path';
}

/** Right-aligned signed changes beside their words, one a line. */
function aligned(rows: ReadonlyArray<readonly [number, string]>, indent = '  '): string[] {
  const texts = rows.map(([millis]) => formatChange(millis));
  const width = Math.max(...texts.map((text) => text.length));
  return rows.map(([, words], index) => `${indent}${texts[index].padStart(width)}  ${words}`);
}

/**
 * Compare (SPEC §13) under the waterfall: which baseline and why, the change in the critical path's time, its parts
 * largest first with their sum (the delta, to the millisecond), the jobs that changed most, and those added or gone.
 */
export function renderComparison(answer: PipelineComparison): string[] {
  const delta = millisOf(answer.duration_delta_seconds);
  // The description names the baseline and why it (the median of how many, or as asked).
  const lines = [
    `pipeline ${answer.pipeline_id} compared with ${answer.baseline.description}`,
    `critical path ${formatPath(answer.critical_path_seconds.target)} against ${formatPath(answer.critical_path_seconds.baseline)}: ${formatChange(delta)}` +
      (answer.paths_known ? '' : ' (one of the two has not ended: its path so far)'),
  ];
  const parts = (Object.entries(answer.contributions) as Array<[Contribution, number]>)
    .map(([part, seconds]) => [millisOf(seconds), CONTRIBUTION_WORDS[part]] as const)
    .filter(([millis]) => millis !== 0)
    .sort((a, b) => Math.abs(b[0]) - Math.abs(a[0]) || b[0] - a[0]);
  if (parts.length === 0) {
    lines.push('by part: no part changed');
  } else {
    lines.push('by part, largest first:');
    const rows = aligned([...parts, [parts.reduce((sum, [millis]) => sum + millis, 0), '= the change in the critical path']]);
    lines.push(...rows);
  }
  const changed = answer.jobs.filter((job) => millisOf(job.delta_seconds) !== 0).slice(0, JOBS_SHOWN);
  if (changed.length === 0) {
    lines.push('no job took longer or shorter');
  } else {
    lines.push('jobs that changed most (wait, queue and run):');
    lines.push(
      ...aligned(changed.map((job) => [millisOf(job.delta_seconds), `${job.name} (stage ${job.stage}), ${pathWords(job.on_critical_path)}`] as const)),
    );
  }
  lines.push(`added: ${answer.added.length === 0 ? 'none' : answer.added.join(', ')}; gone: ${answer.gone.length === 0 ? 'none' : answer.gone.join(', ')}`);
  return lines;
}
