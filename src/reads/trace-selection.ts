import type { AttributeValue } from '../otlp/collected-spans';
import { carriesId, identityOf } from '../otlp/span-identity';
import type { StoredSpan } from './trace-reads';

/**
 * What a read returns of a trace (SPEC §12), pure: a job's subtree, and the spans as OTLP/JSON `TracesData` (a
 * project's spans only: `ofProject`, src/otlp/span-identity.ts).
 */

/** The control plane's spans (SPEC §10): what GitLab said of the pipeline and its jobs. */
export const CONTROL_PLANE_SPANS: ReadonlySet<string> = new Set(['pipeline', 'bridge', 'job', 'queue_wait']);
export const RUNNER_SPAN = 'job_execution';

/**
 * Which spans an answer capped at READS_MAX_SPANS keeps first (SPEC §12 "a read is bounded"): 0 the control plane's,
 * 1 each job's `job_execution`, 2 its stages (the children of a `job_execution`), 3 the rest. The first three are what
 * the critical path and completeness are computed on; a backend returns all of them, and of the rest the first by
 * start time.
 */
export function spanRank(span: StoredSpan, runnerSpanIds: ReadonlySet<string>): 0 | 1 | 2 | 3 {
  if (CONTROL_PLANE_SPANS.has(span.name)) return 0;
  if (span.name === RUNNER_SPAN) return 1;
  return runnerSpanIds.has(span.parentSpanId) ? 2 : 3;
}

/** The order of the rest (rank 3): by start time, then span id, so a capped answer is the same on every read. */
export function byStart(a: StoredSpan, b: StoredSpan): number {
  return a.startNanos < b.startNanos ? -1 : a.startNanos > b.startNanos ? 1 : a.spanId < b.spanId ? -1 : a.spanId > b.spanId ? 1 : 0;
}

const idOf = (span: StoredSpan, key: string) => {
  const value = identityOf(span, key);
  return value === undefined || value === '' ? undefined : String(value);
};

/** Whether a span of the rest is counted for a read of `projectId` (and of `jobId`): it names that project (job) or none. */
export function countedFor(span: StoredSpan, projectId: number, jobId?: number): boolean {
  const project = idOf(span, 'ci.project.id');
  if (project !== undefined && project !== String(projectId)) return false;
  if (jobId === undefined) return true;
  const job = idOf(span, 'ci.job.id');
  return job === undefined || job === String(jobId);
}

/** At most `max` of `spans`, in the order of `spanRank` then `byStart`. */
export function capped(spans: readonly StoredSpan[], max: number): StoredSpan[] {
  if (spans.length <= max) return [...spans];
  const runners = new Set(spans.filter((span) => span.name === RUNNER_SPAN).map((span) => span.spanId));
  const ranked = spans.map((span) => ({ span, rank: spanRank(span, runners) }));
  ranked.sort((a, b) => a.rank - b.rank || byStart(a.span, b.span));
  return ranked.slice(0, max).map(({ span }) => span);
}

const JOB_OWN = new Set(['job', 'bridge']);
const JOB_CHILDREN = new Set(['queue_wait', 'job_execution']);

/**
 * A job's subtree: its job span (or bridge) and everything under it: queue wait, the runner's `job_execution` and
 * stages, what programs in the job exported (TRACEPARENT names the job span). While GitLab has not closed the job,
 * its span is missing and the subtree hangs on the id its queue wait and runner spans name. Null when nothing of
 * the job is in the trace.
 */
export function jobSubtree(spans: readonly StoredSpan[], jobId: number): { spans: StoredSpan[]; jobSpanId: string; closed: boolean } | null {
  const own = spans.find((span) => JOB_OWN.has(span.name) && carriesId(span, 'ci.job.id', jobId));
  const jobSpanId = own?.spanId ?? spans.find((span) => JOB_CHILDREN.has(span.name) && carriesId(span, 'ci.job.id', jobId))?.parentSpanId;
  if (jobSpanId === undefined || jobSpanId === '') return null;
  const children = new Map<string, StoredSpan[]>();
  for (const span of spans) {
    const siblings = children.get(span.parentSpanId);
    if (siblings === undefined) children.set(span.parentSpanId, [span]);
    else siblings.push(span);
  }
  const subtree: StoredSpan[] = own === undefined ? [] : [own];
  const queue = [jobSpanId];
  const seen = new Set(queue);
  while (queue.length > 0) {
    for (const child of children.get(queue.shift()!) ?? []) {
      if (seen.has(child.spanId)) continue;
      seen.add(child.spanId);
      subtree.push(child);
      queue.push(child.spanId);
    }
  }
  return { spans: subtree, jobSpanId, closed: own !== undefined };
}

type OtlpValue = { stringValue: string } | { intValue: string } | { doubleValue: number } | { boolValue: boolean };

function otlpValue(value: AttributeValue): OtlpValue {
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  return Number.isSafeInteger(value) ? { intValue: String(value) } : { doubleValue: value };
}

const keyValues = (attributes: Record<string, AttributeValue>) => Object.entries(attributes).map(([key, value]) => ({ key, value: otlpValue(value) }));

/** A resource's attributes as one key, so spans of one resource share one `ResourceSpans`. */
const resourceKey = (resource: Record<string, AttributeValue>) =>
  JSON.stringify(
    Object.entries(resource)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, value]) => [key, typeof value, value]),
  );

/**
 * Spans as OTLP/JSON `TracesData`: `ResourceSpans` per resource, `ScopeSpans` per scope, ids in hex, times as
 * strings of nanoseconds. Integers come back as `intValue`, other numbers as `doubleValue`: a backend that keeps
 * attributes as text (ClickHouse's maps) cannot say which a `1.0` was. Events and links are not kept.
 */
export function tracesData(spans: readonly StoredSpan[]): { resourceSpans: unknown[] } {
  const resources = new Map<string, { resource: Record<string, AttributeValue>; scopes: Map<string, unknown[]> }>();
  for (const span of spans) {
    const key = resourceKey(span.resource);
    let entry = resources.get(key);
    if (entry === undefined) {
      entry = { resource: span.resource, scopes: new Map() };
      resources.set(key, entry);
    }
    let scope = entry.scopes.get(span.scopeName);
    if (scope === undefined) {
      scope = [];
      entry.scopes.set(span.scopeName, scope);
    }
    scope.push({
      traceId: span.traceId,
      spanId: span.spanId,
      ...(span.traceState === '' ? {} : { traceState: span.traceState }),
      ...(span.parentSpanId === '' ? {} : { parentSpanId: span.parentSpanId }),
      name: span.name,
      kind: span.kind,
      startTimeUnixNano: String(span.startNanos),
      endTimeUnixNano: String(span.endNanos),
      attributes: keyValues(span.attributes),
      status: { code: span.statusCode, ...(span.statusMessage === '' ? {} : { message: span.statusMessage }) },
    });
  }
  return {
    resourceSpans: [...resources.values()].map(({ resource, scopes }) => ({
      resource: { attributes: keyValues(resource) },
      scopeSpans: [...scopes].map(([name, scopeSpans]) => ({ scope: { name }, spans: scopeSpans })),
    })),
  };
}
