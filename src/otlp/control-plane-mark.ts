import type { CollectedSpan } from './collected-spans';

/**
 * What is the control plane's in a trace (SPEC §10, §12 "Trust"): GitLab's account of each job and pipeline, the
 * versions readers keep, the sampling decision and the critical path written at a pipeline's end. The span model
 * writes them, the gateway refuses them from jobs (export-policy/), the readers take them only from a span that
 * carries the mark: one list, so the three cannot drift apart.
 */

/**
 * The resource attribute every span the control plane emits carries (pipeline-span-model.ts), and no runner can set
 * through the gateway, which refuses any span under a resource or with an attribute of this key. Hosted runners
 * export straight to the collector and could write it there: the control plane's resources are also the only ones
 * with `service.name` of the control plane, but a reader trusts the mark alone, and the trust ends where the
 * collector accepts exports the gateway never saw (docs/gateway.md).
 */
export const CONTROL_PLANE_MARK = { key: 'ci.telemetry.emitter', value: 'control_plane' } as const;

/** The names of the spans the control plane emits (SPEC §10); readers take a span by these names only with the mark. */
export const CONTROL_PLANE_SPAN_NAMES: ReadonlySet<string> = new Set(['pipeline', 'bridge', 'job', 'queue_wait']);

/**
 * Attribute keys readers trust for versions, decisions or the critical path, by prefix: a key starting with one of
 * these is the control plane's. A job's export carrying one (on a span, or on the resource of its spans) is refused
 * span by span; on metrics and logs it is dropped from the resource. `ci.sampling.reason` on a resource is the one
 * the gateway writes itself (export-policy.ts): an exporter's own is overwritten there, refused on a span.
 */
export const RESERVED_ATTRIBUTE_PREFIXES: readonly string[] = [
  CONTROL_PLANE_MARK.key,
  // The version readers keep the highest of per span id (SPEC §10, the final story).
  'ci.pipeline.span.version',
  // The outcome decision (SPEC §11): `ci.sampling.reason` and whatever the decision writes beside it.
  'ci.sampling.',
  // The written critical path (SPEC §12): `ci.job.critical_path`, `…_seconds`, the slack, the pipeline's totals.
  'ci.job.critical_path',
  'ci.job.slack_seconds',
  'ci.pipeline.critical_path.',
  // The walk's figures on each job span (SPEC §13): `ci.job.critical_path.*` above, and which attempt it is.
  'ci.job.attempt',
  'ci.job.retried',
];

/** Every reserved key starts with this: a walker decodes no key that does not. */
export const RESERVED_ATTRIBUTE_COMMON_PREFIX = 'ci.';
if (!RESERVED_ATTRIBUTE_PREFIXES.every((prefix) => prefix.startsWith(RESERVED_ATTRIBUTE_COMMON_PREFIX))) {
  throw new Error(`reserved attribute keys must start with "${RESERVED_ATTRIBUTE_COMMON_PREFIX}"`);
}

/** Whether `key` is one of the control plane's (RESERVED_ATTRIBUTE_PREFIXES). */
export function isReservedAttributeKey(key: string): boolean {
  if (!key.startsWith(RESERVED_ATTRIBUTE_COMMON_PREFIX)) return false;
  for (const prefix of RESERVED_ATTRIBUTE_PREFIXES) if (key.startsWith(prefix)) return true;
  return false;
}

/** Whether the control plane emitted `span`: its resource carries the mark. */
export function isControlPlaneSpan(span: Pick<CollectedSpan, 'resource'>): boolean {
  return span.resource[CONTROL_PLANE_MARK.key] === CONTROL_PLANE_MARK.value;
}

/**
 * How a reader ranks two stored copies of one span id when it keeps one: the control plane's copy over any other,
 * then the highest `ci.pipeline.span.version` (SPEC §10). An unmarked copy's version is not read, so a span written
 * straight to the collector with a control-plane span's id and a high version never replaces GitLab's account.
 */
export function keptVersionOf(span: Pick<CollectedSpan, 'resource' | 'attributes'>): number {
  if (!isControlPlaneSpan(span)) return -1;
  const version = Number(span.attributes['ci.pipeline.span.version'] ?? 0);
  return Number.isFinite(version) && version >= 0 ? version : 0;
}

/**
 * The spans of a trace as readers may trust them (SPEC §12 "Trust"), pure: the one filter the critical path,
 * completeness, a job's subtree and the jobs summary read through, and the control plane too when it writes the
 * path at a pipeline's end. A span named as the control plane's (`pipeline`, `bridge`, `job`, `queue_wait`) without
 * the mark, and any unmarked span with the id of a marked one, are dropped: they claim to be GitLab's account of a
 * job or pipeline, and are not. Every other span (the runner's, a program's) is kept as it came, in order.
 */
export function trustedSpans<T extends Pick<CollectedSpan, 'name' | 'spanId' | 'resource'>>(spans: readonly T[]): T[] {
  const controlPlaneIds = new Set<string>();
  for (const span of spans) if (isControlPlaneSpan(span)) controlPlaneIds.add(span.spanId);
  return spans.filter((span) => isControlPlaneSpan(span) || (!CONTROL_PLANE_SPAN_NAMES.has(span.name) && !controlPlaneIds.has(span.spanId)));
}
