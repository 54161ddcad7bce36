import type { CollectedSpan } from './local-collector';

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

function label(span: CollectedSpan): string {
  if (span.name !== 'job_execution') return span.name;
  const job = span.attributes['ci.job.id'] ?? span.resource['ci.job.id'];
  const status = span.attributes['ci.job.status'];
  return `job_execution  job ${job}${status === undefined ? '' : ` ${status}`}`;
}

/**
 * One trace as a terminal waterfall: every span on its own line under its parent, ordered by start
 * time, with a bar placed on the trace's timeline and its duration. Spans whose parent is not in the
 * trace (a runner's job_execution hangs off the job span GitLab may emit later) start the tree.
 */
export function renderWaterfall(spans: readonly CollectedSpan[]): string[] {
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
  for (const list of children.values()) list.sort((a, b) => (a.startNanos < b.startNanos ? -1 : a.startNanos > b.startNanos ? 1 : 0));

  const rows: Array<{ text: string; span: CollectedSpan }> = [];
  const walk = (parent: string, depth: number) => {
    for (const span of children.get(parent) ?? []) {
      rows.push({ text: `${'  '.repeat(depth)}${label(span)}`, span });
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
    return `${text.padEnd(labelWidth)}|${bar.padEnd(BAR_WIDTH)}| ${formatDuration(span.endNanos - span.startNanos).padStart(9)}${error}`;
  });
}
