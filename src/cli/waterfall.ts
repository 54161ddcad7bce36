import type { CollectedSpan } from '../otlp/collected-spans';
import { keptVersionOf, trustedSpans } from '../otlp/control-plane-mark';
import type { CriticalPath, PathTotals } from '../critical-path/critical-path';

export type { AttributeValue, CollectedSpan } from '../otlp/collected-spans';
export { collectedSpans } from '../otlp/collected-spans';

const BAR_WIDTH = 40;

/** `1m 32.0s`, `6.0s`, `350ms`: durations as a person reads them. */
export function formatDuration(nanos: bigint): string {
  const millis = Number(nanos / 1_000_000n);
  if (millis < 1000) return `${millis}ms`;
  const seconds = millis / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes}m ${(seconds - minutes * 60).toFixed(1).padStart(4, '0')}s`;
}

/** A duration to the second (`12s`, `1m 05s`): for spans that end at a real moment, such as a pickup. */
export function formatSeconds(nanos: bigint): string {
  const seconds = Math.round(Number(nanos / 1_000_000n) / 1000);
  if (seconds < 60) return `${seconds}s`;
  return `${Math.floor(seconds / 60)}m ${String(seconds % 60).padStart(2, '0')}s`;
}

const words = (value: unknown) => (value === undefined ? [] : [String(value)]);

/**
 * What a person needs to tell the rows apart: the pipeline and its status, each job's id, name and status
 * (the control plane's spans, SPEC §10), the runner that ran the job, and the stages by name.
 */
function label(span: CollectedSpan): string {
  const attribute = (key: string) => span.attributes[key] ?? span.resource[key];
  switch (span.name) {
    case 'pipeline':
      return ['pipeline', ...words(attribute('ci.pipeline.id')), ...words(attribute('ci.pipeline.status'))].join(' ');
    case 'job':
      return ['job', ...words(attribute('ci.job.id')), ...words(attribute('cicd.pipeline.task.name')), ...words(attribute('ci.job.status'))].join(' ');
    case 'job_execution':
      return `job_execution  ${['runner', ...words(attribute('ci.runner.id')), ...words(attribute('ci.runner.executor'))].join(' ')}`;
    default:
      return span.name;
  }
}

/**
 * How long a span took, as printed. A `queue_wait` ends at the pickup, the real moment the decorator ran,
 * a few milliseconds after the demo's fixed timeline says: it is printed to the second, so the output is the
 * same on every run.
 */
function duration(span: CollectedSpan): string {
  const nanos = span.endNanos - span.startNanos;
  return span.name === 'queue_wait' ? formatSeconds(nanos) : formatDuration(nanos);
}

/**
 * Each span once, in its latest version: a pipeline that finished again (a job retried, a manual job
 * played) had its span sent again under the same id with a higher `ci.pipeline.span.version` (SPEC §10),
 * and a backend that keeps every copy shows them all; this is the picture the ClickHouse view gives. Only the
 * control plane's copies count (SPEC §12 "Trust"): the readers' filter applies, as in the read API.
 */
export function latestVersions(spans: readonly CollectedSpan[]): CollectedSpan[] {
  const latest = new Map<string, CollectedSpan>();
  for (const span of spans) {
    const kept = latest.get(span.spanId);
    if (kept === undefined || keptVersionOf(span) > keptVersionOf(kept)) latest.set(span.spanId, span);
  }
  return trustedSpans([...latest.values()]);
}

const byStart = (a: CollectedSpan, b: CollectedSpan) =>
  a.startNanos < b.startNanos ? -1 : a.startNanos > b.startNanos ? 1 : label(a).localeCompare(label(b)) || a.spanId.localeCompare(b.spanId);

/**
 * One trace as a terminal waterfall: every span on its own line under its parent, ordered by start
 * time, with a bar placed on the trace's timeline and its duration. A span whose parent is not in the
 * trace (a runner's job_execution before its job span was emitted) starts a tree of its own, and says so:
 * a connected trace has one root, its pipeline.
 */
export function renderWaterfall(spans: readonly CollectedSpan[], marks: ReadonlyMap<string, string> = new Map()): string[] {
  if (spans.length === 0) return [];
  const start = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
  const end = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
  const total = end - start > 0n ? end - start : 1n;
  const ids = new Set(spans.map((span) => span.spanId));
  const children = new Map<string, CollectedSpan[]>();
  for (const span of spans) {
    const parent = ids.has(span.parentSpanId) ? span.parentSpanId : '';
    children.set(parent, [...(children.get(parent) ?? []), span]);
  }
  for (const list of children.values()) list.sort(byStart);

  const rows: Array<{ text: string; span: CollectedSpan }> = [];
  const walk = (parent: string, depth: number) => {
    for (const span of children.get(parent) ?? []) {
      const orphan = depth === 0 && span.parentSpanId !== '' ? `  (orphan: parent ${span.parentSpanId} not received)` : '';
      rows.push({ text: `${'  '.repeat(depth)}${label(span)}${orphan}`, span });
      walk(span.spanId, depth + 1);
    }
  };
  walk('', 0);

  const labelWidth = Math.max(...rows.map((row) => row.text.length)) + 2;
  return rows.map(({ text, span }) => {
    const from = Number(((span.startNanos - start) * BigInt(BAR_WIDTH)) / total);
    const to = Math.max(from + 1, Number(((span.endNanos - start) * BigInt(BAR_WIDTH)) / total));
    const bar = ' '.repeat(from) + '█'.repeat(Math.min(to, BAR_WIDTH) - from);
    const error = span.statusCode === 2 ? '  error' : '';
    const mark = marks.has(span.spanId) ? `  ${marks.get(span.spanId)!}` : '';
    return `${text.padEnd(labelWidth)}|${bar.padEnd(BAR_WIDTH)}| ${duration(span).padStart(9)}${error}${mark}`;
  });
}

/**
 * The marks of a critical path on its job spans, by span id: each job on the path says so and names its blocker
 * (SPEC §12), so a person sees which job held the pipeline up and what it waited for.
 */
export function criticalPathMarks(spans: readonly CollectedSpan[], path: CriticalPath): Map<string, string> {
  const jobSpans = new Map<string, CollectedSpan>();
  for (const span of spans) if (span.name === 'job' || span.name === 'bridge') jobSpans.set(String(span.attributes['ci.job.id']), span);
  const names = new Map(path.path.map((element) => [element.job_id, element.name]));
  const marks = new Map<string, string>();
  for (const element of path.path) {
    const span = jobSpans.get(String(element.job_id));
    if (span === undefined) continue;
    const blocker =
      element.blocked_by === null ? undefined : ['job', String(element.blocked_by), ...words(names.get(element.blocked_by) ?? undefined)].join(' ');
    const waited =
      element.waiting_for === 'manual'
        ? ', played by hand'
        : element.waiting_for === 'retry'
          ? `, attempt ${element.attempts}`
          : element.waiting_for === 'delayed'
            ? ', delayed'
            : element.waiting_for === 'resource'
              ? ', after its resource group'
              : '';
    marks.set(span.spanId, blocker === undefined ? `◀ critical path${waited}` : `◀ critical path, after ${blocker}${waited}`);
  }
  return marks;
}

/** How each part of the path's time reads in a sentence. */
export const PART_WORDS: Readonly<Record<keyof PathTotals, string>> = {
  delay: 'waiting for GitLab to start jobs',
  manual_wait: 'waiting for manual jobs to be played',
  retry_wait: 'waiting for jobs to be retried',
  delayed_wait: 'waiting for delayed jobs to start',
  resource_wait: 'waiting for resource groups',
  queue: 'waiting for runners',
  prepare_executor: 'preparing executors',
  pull_image: 'pulling images',
  get_sources: 'getting sources',
  restore_cache: 'restoring caches',
  step_script: 'in scripts',
  after_script: 'in after_script',
  archive_cache: 'archiving caches',
  upload_artifacts: 'uploading artifacts',
  other: 'elsewhere in jobs',
};

/** One line of where the path's time went, most first: `on the critical path (2m 10s): 1m 40s in scripts, 38s waiting for runners, …`. */
export function whereTheTimeWent(path: CriticalPath, final: boolean): string {
  const nanos = (seconds: number) => BigInt(Math.round(seconds * 1000)) * 1_000_000n;
  const parts = (Object.entries(path.totals) as Array<[keyof PathTotals, number]>)
    .filter(([, seconds]) => Math.round(seconds) > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([part, seconds]) => `${formatSeconds(nanos(seconds))} ${PART_WORDS[part]}`);
  const so = final ? '' : ' so far, the pipeline is still running';
  return `on the critical path (${formatSeconds(nanos(path.duration_seconds))}${so}): ${parts.length === 0 ? 'nothing yet' : parts.join(', ')}`;
}
