/** The shape of one trace as a viewer draws it (SPEC §10): what makes it whole, or not. */
export interface TraceShape {
  /** Spans with no parent. */
  readonly roots: string[];
  /** Spans naming a parent that is not in the trace (`name spanId → parent`). */
  readonly orphans: string[];
  /**
   * Span ids received more than once in the same version (SPEC §10: a span the pipeline's story changes comes again
   * with a higher `ci.pipeline.span.version`; a job span first unversioned, then with the critical path written).
   */
  readonly duplicates: string[];
}

type ShapedSpan = { spanId: string; parentSpanId: string; name: string; attributes?: Readonly<Record<string, unknown>> };

export function traceShape(spans: ReadonlyArray<ShapedSpan>): TraceShape {
  const seen = new Map<string, number>();
  const copies = new Map<string, number>();
  for (const span of spans) {
    seen.set(span.spanId, (seen.get(span.spanId) ?? 0) + 1);
    const copy = `${span.spanId}@${String(span.attributes?.['ci.pipeline.span.version'] ?? 0)}`;
    copies.set(copy, (copies.get(copy) ?? 0) + 1);
  }
  return {
    roots: spans.filter((span) => span.parentSpanId === '').map((span) => `${span.name} ${span.spanId}`),
    orphans: spans
      .filter((span) => span.parentSpanId !== '' && !seen.has(span.parentSpanId))
      .map((span) => `${span.name} ${span.spanId} → ${span.parentSpanId}`),
    duplicates: [...copies].filter(([, count]) => count > 1).map(([copy]) => copy.split('@')[0]),
  };
}
