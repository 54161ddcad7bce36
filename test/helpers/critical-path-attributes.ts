import { collectedSpans } from '../../src/otlp/collected-spans';
import { writtenCriticalPath } from '../../src/pipeline-spans/pipeline-critical-path';
import type { ControlPlaneSpan, OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';

/**
 * What the control plane writes when a root pipeline ends (SPEC §12, docs/reads.md "Attributes"), for traces built
 * without the service (test/helpers/pipeline-trace.ts): the same function the service calls
 * (src/pipeline-spans/pipeline-critical-path.ts), over the control plane's spans of each trace (never the runner's,
 * which the control plane does not see), each job span and the root pipeline span again as a newer version:
 *  - a job span: `ci.job.critical_path`, and `ci.job.critical_path_seconds` on the path or `ci.job.slack_seconds` off it,
 *    and the walk's figures (`ci.job.critical_path.wait_seconds`, `…waiting_for`, `…queue_seconds`, `…run_seconds`,
 *    `ci.job.attempt`, `ci.job.retried`);
 *  - the root pipeline span: `ci.pipeline.critical_path.<part>_seconds` (delay, manual_wait, retry_wait, queue, run).
 * A trace whose root pipeline span has not arrived (the pipeline still running) gets nothing. Pipelines run through the
 * service (test/helpers/clickhouse-pipelines.ts) need none of this: the service writes it.
 */
export function withCriticalPathAttributes(exports: readonly OtlpResourceSpans[]): OtlpResourceSpans[] {
  const controlPlane = exports.filter((resourceSpans) => {
    const name = resourceSpans.resource.attributes.find((attribute) => attribute.key === 'service.name')?.value;
    return (
      resourceSpans.scopeSpans.length === 1 &&
      resourceSpans.scopeSpans[0].spans.length === 1 &&
      !(name !== undefined && 'stringValue' in name && name.stringValue === 'runner')
    );
  });
  const added: OtlpResourceSpans[] = [];
  const traceIds = new Set(controlPlane.map((resourceSpans) => resourceSpans.scopeSpans[0].spans[0].traceId));
  for (const traceId of traceIds) {
    const trace: ControlPlaneSpan[] = controlPlane
      .filter((resourceSpans) => resourceSpans.scopeSpans[0].spans[0].traceId === traceId)
      .map((resourceSpans) => ({ spanId: resourceSpans.scopeSpans[0].spans[0].spanId, resourceSpans }));
    const spans = collectedSpans({ resourceSpans: trace.map((span) => span.resourceSpans as unknown as Record<string, unknown>) });
    const root = spans.find((span) => span.name === 'pipeline' && span.parentSpanId === '');
    const written = root === undefined ? null : writtenCriticalPath(trace);
    if (written === null) continue;
    const version = Number(root!.attributes['ci.pipeline.span.version'] ?? 0) + 1;
    for (const [i, span] of spans.entries()) {
      const jobId = Number(span.attributes['ci.job.id']);
      const extra =
        span.name === 'job' ? (written.jobs.get(jobId) ?? { 'ci.job.critical_path': false }) : span.spanId === root!.spanId ? written.pipeline : undefined;
      if (extra === undefined) continue;
      const original = trace[i].resourceSpans.scopeSpans[0];
      const values = Object.entries({ ...extra, 'ci.pipeline.span.version': version }).map(([key, value]) => ({
        key,
        value:
          typeof value === 'boolean'
            ? { boolValue: value }
            : typeof value === 'string'
              ? { stringValue: value }
              : Number.isSafeInteger(value)
                ? { intValue: String(value) }
                : { doubleValue: value as number },
      }));
      const kept = original.spans[0].attributes.filter((attribute) => attribute.key !== 'ci.pipeline.span.version');
      added.push({ ...trace[i].resourceSpans, scopeSpans: [{ ...original, spans: [{ ...original.spans[0], attributes: [...kept, ...values] }] }] });
    }
  }
  return [...exports, ...added];
}
