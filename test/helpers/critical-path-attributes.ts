import { collectedSpans } from '../../src/otlp/collected-spans';
import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import { criticalPath } from '../../src/critical-path/critical-path';

/**
 * What the control plane writes when a pipeline ends (SPEC §12, docs/reads.md "Attributes"), for tests of what
 * reads it (the ClickHouse view and backend, the dashboard) until the control plane writes it itself: each job span
 * and the root pipeline span again, as a newer version (`ci.pipeline.span.version`), with
 *  - on a job span: `ci.job.critical_path` (bool), `ci.job.critical_path_seconds` (its pending to its end) when on
 *    the path, `ci.job.slack_seconds` when off it;
 *  - on the root pipeline span: `ci.pipeline.critical_path.<part>_seconds` for each part of the path's time
 *    (delay, manual_wait, retry_wait, queue, each runner stage part, other).
 * Computed by the one critical path function (src/critical-path/critical-path.ts). A trace whose root pipeline span has not
 * arrived (the pipeline still running) gets nothing.
 */
export function withCriticalPathAttributes(exports: readonly OtlpResourceSpans[]): OtlpResourceSpans[] {
  const spans = collectedSpans({ resourceSpans: exports as unknown as Record<string, unknown>[] });
  const added: OtlpResourceSpans[] = [];
  for (const traceId of new Set(spans.map((span) => span.traceId))) {
    const trace = spans.filter((span) => span.traceId === traceId);
    const root = trace.find((span) => span.name === 'pipeline' && span.parentSpanId === '');
    const path = root === undefined ? null : criticalPath(trace);
    if (path === null) continue;
    const onPath = new Map(path.path.map((element) => [element.job_id, element.duration_seconds]));
    const slack = new Map(path.slack.map((element) => [element.job_id, element.slack_seconds]));
    for (const resourceSpans of exports) {
      const span = resourceSpans.scopeSpans[0]?.spans[0];
      if (span?.traceId !== traceId || resourceSpans.scopeSpans[0].spans.length !== 1) continue;
      const attribute = (key: string) => span.attributes.find((candidate) => candidate.key === key)?.value;
      const version = Number(Object.values(attribute('ci.pipeline.span.version') ?? { intValue: '0' })[0]) + 1;
      let extra: Record<string, boolean | number> | undefined;
      if (span.name === 'job') {
        const jobId = Number(Object.values(attribute('ci.job.id') ?? { intValue: '0' })[0]);
        extra = onPath.has(jobId)
          ? { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': onPath.get(jobId)! }
          : { 'ci.job.critical_path': false, 'ci.job.slack_seconds': slack.get(jobId) ?? 0 };
      } else if (span.spanId === root!.spanId) {
        extra = Object.fromEntries(Object.entries(path.totals).map(([part, seconds]) => [`ci.pipeline.critical_path.${part}_seconds`, seconds]));
      }
      if (extra === undefined) continue;
      const values = Object.entries({ ...extra, 'ci.pipeline.span.version': version }).map(([key, value]) => ({
        key,
        value: typeof value === 'boolean' ? { boolValue: value } : Number.isSafeInteger(value) ? { intValue: String(value) } : { doubleValue: value },
      }));
      const kept = span.attributes.filter((candidate) => candidate.key !== 'ci.pipeline.span.version');
      added.push({ ...resourceSpans, scopeSpans: [{ ...resourceSpans.scopeSpans[0], spans: [{ ...span, attributes: [...kept, ...values] }] }] });
    }
  }
  return [...exports, ...added];
}
