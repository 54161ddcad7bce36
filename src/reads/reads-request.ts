import type { TimeWindow } from './trace-reads';

/**
 * What a read's path and query say (SPEC §12), checked before any backend is asked: ids are positive integers,
 * a window is two RFC 3339 timestamps at most 31 days apart, in order. Each problem names its field, as the
 * internal API's other 400s do.
 */

export interface FieldProblem {
  readonly field: string;
  readonly problems: string[];
}

export const MAX_WINDOW_DAYS = 31;
/** The problem of a window over MAX_WINDOW_DAYS: the one 400 a caller fixes by asking less, not by fixing a value (the MCP tools say `window_too_long`). */
export const WINDOW_TOO_LONG = `the window from from to to must be at most ${MAX_WINDOW_DAYS} days`;
export const DAY_MS = 86_400_000;
/**
 * GitLab's times of a pipeline are its own clock's; runners' and the control plane's spans may sit a little
 * outside them. A window GitLab passes is widened by this on each side before a backend reads it.
 */
export const WINDOW_MARGIN_MS = 15 * 60_000;
/** The most a `ref` may be: GitLab's own limit on a ref name is 255 bytes; anything longer names no pipeline. */
const MAX_REF_LENGTH = 1024;

const ID = /^[1-9][0-9]{0,15}$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

export function parseId(value: unknown, field: string, problems: FieldProblem[]): number {
  const text = typeof value === 'string' ? value : '';
  const id = ID.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(id)) problems.push({ field, problems: [`${field} must be a positive integer`] });
  return id;
}

function parseTime(value: unknown, field: string, problems: FieldProblem[]): number | undefined {
  if (value === undefined) return undefined;
  const text = typeof value === 'string' ? value : '';
  const epoch = RFC3339.test(text) ? Date.parse(text.replace(' ', 'T')) : NaN;
  if (Number.isNaN(epoch)) {
    problems.push({ field, problems: [`${field} must be an RFC 3339 timestamp such as 2026-11-25T10:00:00Z`] });
    return undefined;
  }
  return epoch;
}

export interface ReadWindow {
  /** What the backend reads: the caller's window widened by the margin, or the lookback up to now. */
  readonly window: TimeWindow;
  /** The caller's window as given (or the default), for filtering what is counted within it. */
  readonly asked: TimeWindow;
}

/**
 * `from`/`to` of a query: both optional; absent, the last `lookbackDays` up to `now` (`from` alone: up to `now`;
 * `to` alone: the `lookbackDays` before it). Inverted or longer than 31 days: a problem naming the field.
 */
export function parseWindow(query: Record<string, unknown>, now: number, lookbackDays: number, problems: FieldProblem[]): ReadWindow {
  const before = problems.length;
  const from = parseTime(single(query.from, 'from', problems), 'from', problems);
  const to = parseTime(single(query.to, 'to', problems), 'to', problems);
  const asked = { fromMs: from ?? (to ?? now) - lookbackDays * DAY_MS, toMs: to ?? Math.max(now, from ?? now) };
  if (problems.length === before) {
    if (asked.toMs < asked.fromMs) problems.push({ field: 'to', problems: ['to must not be before from'] });
    else if (asked.toMs - asked.fromMs > MAX_WINDOW_DAYS * DAY_MS) {
      problems.push({ field: from === undefined ? 'to' : 'from', problems: [WINDOW_TOO_LONG] });
    }
  }
  const margin = from === undefined && to === undefined ? 0 : WINDOW_MARGIN_MS;
  return { asked, window: { fromMs: asked.fromMs - margin, toMs: asked.toMs + margin } };
}

export function parseRef(value: unknown, problems: FieldProblem[]): string | undefined {
  const ref = single(value, 'ref', problems);
  if (ref === undefined) return undefined;
  if (typeof ref !== 'string' || ref.length === 0 || ref.length > MAX_REF_LENGTH) {
    problems.push({ field: 'ref', problems: [`ref must be a branch or tag name of 1 to ${MAX_REF_LENGTH} characters`] });
    return undefined;
  }
  return ref;
}

/** A query parameter given twice is refused rather than one of them picked. */
export function single(value: unknown, field: string, problems: FieldProblem[]): unknown {
  if (!Array.isArray(value)) return value;
  problems.push({ field, problems: [`${field} must be given once`] });
  return undefined;
}

/** The most runners a what-if may add or take away: beyond it the replay says nothing a fleet would see. */
export const MAX_RUNNERS_ADDED = 1000;
const MAX_TAGS_LENGTH = 1024;

/**
 * A runner tag set as GitLab lists it (`docker, arm64`), in the rows' form: each tag trimmed, sorted, joined by ','. ''
 * is the untagged runners.
 */
export function parseTags(value: unknown, problems: FieldProblem[]): string {
  if (typeof value !== 'string' || value.length > MAX_TAGS_LENGTH) {
    problems.push({ field: 'tags', problems: [`tags must be the runners' tags joined by commas (docker,arm64), at most ${MAX_TAGS_LENGTH} characters`] });
    return '';
  }
  return [
    ...new Set(
      value
        .split(',')
        .map((tag) => tag.trim())
        .filter((tag) => tag !== ''),
    ),
  ]
    .sort()
    .join(',');
}
