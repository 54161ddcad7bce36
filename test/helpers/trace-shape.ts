/** The shape of one trace as a viewer draws it (SPEC §10): what makes it whole, or not. */
export interface TraceShape {
  /** Spans with no parent. */
  readonly roots: string[];
  /** Spans naming a parent that is not in the trace (`name spanId → parent`). */
  readonly orphans: string[];
  /** Span ids received more than once. */
  readonly duplicates: string[];
}

export function traceShape(spans: ReadonlyArray<{ spanId: string; parentSpanId: string; name: string }>): TraceShape {
  const seen = new Map<string, number>();
  for (const span of spans) seen.set(span.spanId, (seen.get(span.spanId) ?? 0) + 1);
  return {
    roots: spans.filter((span) => span.parentSpanId === '').map((span) => `${span.name} ${span.spanId}`),
    orphans: spans
      .filter((span) => span.parentSpanId !== '' && !seen.has(span.parentSpanId))
      .map((span) => `${span.name} ${span.spanId} → ${span.parentSpanId}`),
    duplicates: [...seen].filter(([, count]) => count > 1).map(([spanId]) => spanId),
  };
}
