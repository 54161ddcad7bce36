import type { AttributeValue, CollectedSpan as StoredSpan } from './collected-spans';

/**
 * What every reader of stored spans asks of one (SPEC §12, §13), pure: whose it is (its project, pipeline and job, on
 * the span as the runner and the control plane write them, else on its resource as the gateway stamps it) and how
 * many pipelines it stands for. Beneath the read port and the rows across pipelines alike, so both ask it one way.
 */

/** A span's identity attribute: on the span as the runner and the control plane write it, else its resource (the gateway's stamp). */
export function identityOf(span: StoredSpan, key: string): AttributeValue | undefined {
  return span.attributes[key] ?? span.resource[key];
}

/** Whether `span` says it belongs to project, pipeline or job `id` (ids are strings on some spans, integers on others). */
export function carriesId(span: StoredSpan, key: 'ci.project.id' | 'ci.pipeline.id' | 'ci.job.id', id: number): boolean {
  const value = identityOf(span, key);
  return value !== undefined && String(value) === String(id);
}

/**
 * A project's spans of a trace: never another project's (a multi-project pipeline's downstream spans are its own).
 * A span that names no project (a hosted runner's stages and what its jobs export, sent straight to the collector
 * and never stamped by the gateway) belongs to the project of its nearest ancestor that names one (its
 * `job_execution`, its job span), by the parent chain within the trace; with no such ancestor, to none.
 */
export function ofProject(spans: readonly StoredSpan[], projectId: number): StoredSpan[] {
  const byId = new Map(spans.map((span) => [span.spanId, span]));
  const owner = new Map<string, string | undefined>();
  const ownerOf = (span: StoredSpan): string | undefined => {
    const chain: StoredSpan[] = [];
    let found: string | undefined;
    for (let at: StoredSpan | undefined = span; at !== undefined && !chain.includes(at); at = byId.get(at.parentSpanId)) {
      if (owner.has(at.spanId)) {
        found = owner.get(at.spanId);
        break;
      }
      const own = identityOf(at, 'ci.project.id');
      if (own !== undefined && own !== '') {
        found = String(own);
        break;
      }
      chain.push(at);
    }
    for (const link of chain) owner.set(link.spanId, found);
    return found;
  };
  return spans.filter((span) => ownerOf(span) === String(projectId));
}

const RANDOMNESS_SPACE = 2 ** 56;

/**
 * The adjusted count of OpenTelemetry's consistent probability sampling: `th:T` of the tracestate's `ot` entry (a W3C
 * list of `key=value` by commas; in `ot`, `;`-separated `key:value`), T up to 14 hex digits with trailing zeros
 * dropped. Kept with probability (2^56 − T) / 2^56, so it stands for 2^56 / (2^56 − T). No threshold, th:0 or one
 * that does not parse: 1.
 */
export function adjustedCountOf(traceState: string): number {
  const ot = traceState
    .split(',')
    .map((member) => member.trim())
    .find((member) => member.startsWith('ot='));
  const threshold = ot
    ?.slice(3)
    .split(';')
    .find((entry) => entry.startsWith('th:'))
    ?.slice(3);
  if (threshold === undefined || !/^[0-9a-f]{1,14}$/.test(threshold)) return 1;
  const value = Number(BigInt(`0x${threshold.padEnd(14, '0')}`));
  return value === 0 ? 1 : RANDOMNESS_SPACE / (RANDOMNESS_SPACE - value);
}
