/**
 * SPEC §6 as one policy for both encodings: what goes on, what is dropped and why, which identity attributes are
 * written and in which type, and the runner's `job_execution` ends (SPEC §10). The walkers (protobuf-walker.ts,
 * json-walker.ts) only read their encoding: they report what they see per resource, scope, span and item, and
 * write what this policy decides.
 */
import { CI_IDENTITY_ATTRIBUTES, CiIdentityValueType, SAMPLING_REASON_ATTRIBUTE } from '../../otlp/ci-identity';
import type { OtlpSignal } from '../../otlp/otlp-encoding';
import { WireBody } from '../../otlp/otlp-wire';
import type { OtlpFieldName } from '../../otlp/otlp-fields';
import type { EnforcedExport, GatewayGrant, RunnerJobEnd, SpanBudget, SpanLimits, SpanRejections } from './otlp-types';
import { OUTCOME_TRACE_STATE, PENDING_SAMPLING_REASON, ResourceSamplingReason } from '../../otlp/sampling-reason';
import { isReservedAttributeKey } from '../../otlp/control-plane-mark';

export interface IdentityAttribute {
  key: string;
  value: { kind: 'int'; int: number } | { kind: 'string'; string: string };
}

/** GitLab Runner's span of a whole job: its end closes the job span when no webhook will (SPEC §10). */
export const JOB_EXECUTION_SPAN = 'job_execution';

/**
 * Resource attribute keys the gateway owns, the identity and `ci.sampling.reason`: whatever the exporter put there
 * is dropped, the gateway's written instead.
 */
export const RESOURCE_OWNED_KEYS: ReadonlySet<string> = new Set([...CI_IDENTITY_ATTRIBUTES.map(({ key }) => key), SAMPLING_REASON_ATTRIBUTE]);

/**
 * A resource attribute the gateway drops from every export: its own keys (written again) and the control plane's
 * (control-plane-mark.ts: the spans under a resource carrying one of those are refused too).
 */
export function resourceKeyDropped(key: string): boolean {
  return RESOURCE_OWNED_KEYS.has(key) || isReservedAttributeKey(key);
}

/** Whether a resource attribute refuses the spans under it: the control plane's keys, except those the gateway writes itself. */
export function resourceKeyRefusesSpans(key: string): boolean {
  return !RESOURCE_OWNED_KEYS.has(key) && isReservedAttributeKey(key);
}

/** Keys the gateway owns on spans, data points and log records: only those an item carries are overwritten. */
export const ITEM_IDENTITY_KEYS: ReadonlySet<string> = new Set(CI_IDENTITY_ATTRIBUTES.filter(({ span }) => span !== undefined).map(({ key }) => key));

/** What the policy derives from a grant: the trace it binds spans to and the identity it writes. */
export interface GrantIdentity {
  /** Lowercase hex. */
  traceIdHex: string;
  /** Written on every resource, in the table's resource types. */
  resource: IdentityAttribute[];
  /** Written over the same keys on items, in the types GitLab Runner writes on its `job_execution` span. */
  items: ReadonlyMap<string, IdentityAttribute>;
  /**
   * `ci.sampling.reason` on every resource: `head`; for a provisional grant the placeholder of a slot that
   * settleSamplingReason fills once the pipeline's outcome is known.
   */
  samplingReason: ResourceSamplingReason;
  /**
   * The trace_state of every admitted span of a provisional grant, so no other export pays per span: written by the JSON
   * walker; a protobuf export gets it when settled for the collector (settleProvisionalTraces), since most are dropped.
   */
  spanTraceState: string | undefined;
  /** GatewayGrant.controlPlaneSpanIds, lowercase hex: spans with these ids are refused. */
  controlPlaneSpanIds: readonly string[];
}

const SPAN_ID_HEX = /^[0-9a-fA-F]{16}$/;

function deriveGrantIdentity(grant: GatewayGrant): GrantIdentity {
  for (const name of ['jobId', 'projectId', 'pipelineId', 'runnerId'] as const) {
    // A bad id here is a bug upstream of the gateway, not a bad request: refuse to stamp garbage.
    if (!Number.isSafeInteger(grant[name]) || grant[name] < 0) {
      throw new TypeError(`grant.${name} must be a non-negative safe integer`);
    }
  }
  if (typeof grant.traceId !== 'string' || !/^[0-9a-fA-F]{32}$/.test(grant.traceId)) {
    throw new TypeError('grant.traceId must be 32 hex digits');
  }
  const controlPlaneSpanIds = grant.controlPlaneSpanIds ?? [];
  if (!controlPlaneSpanIds.every((id) => typeof id === 'string' && SPAN_ID_HEX.test(id))) {
    throw new TypeError('grant.controlPlaneSpanIds must be span ids of 16 hex digits');
  }
  const attribute = (key: string, type: CiIdentityValueType, id: number): IdentityAttribute => ({
    key,
    value: type === 'int' ? { kind: 'int', int: id } : { kind: 'string', string: String(id) },
  });
  const items = new Map<string, IdentityAttribute>();
  for (const { key, carries, span } of CI_IDENTITY_ATTRIBUTES) {
    if (span !== undefined) items.set(key, attribute(key, span, grant[carries]));
  }
  return {
    traceIdHex: grant.traceId.toLowerCase(),
    resource: CI_IDENTITY_ATTRIBUTES.map(({ key, carries, resource }) => attribute(key, resource, grant[carries])),
    items,
    samplingReason: grant.provisional === true ? PENDING_SAMPLING_REASON : 'head',
    // A span that reaches the collector through the outcome decision was kept with probability 1, whatever sampler
    // the exporter ran: the tracestate the decorator handed out for the pipeline (SPEC §11).
    spanTraceState: grant.provisional === true ? OUTCOME_TRACE_STATE : undefined,
    controlPlaneSpanIds: controlPlaneSpanIds.map((id) => id.toLowerCase()),
  };
}

/**
 * What an enforcement derives from a grant (its identity attributes encoded, its trace id as bytes), derived
 * once per grant object rather than once per export: the gateway's decision cache hands the same grant object
 * to every export of a reused decision (issue 12). Checked against the grant's fields on every use, so a grant
 * changed in place is derived again rather than stamped with another job's identity.
 */
export class PerGrant<T> {
  private readonly derived = new WeakMap<GatewayGrant, { grant: GatewayGrant; value: T }>();

  constructor(private readonly derive: (grant: GatewayGrant) => T) {}

  of(grant: GatewayGrant): T {
    const entry = this.derived.get(grant);
    if (entry !== undefined && sameGrant(entry.grant, grant)) return entry.value;
    const value = this.derive(grant);
    const { jobId, projectId, pipelineId, runnerId, traceId, provisional } = grant;
    const controlPlaneSpanIds = grant.controlPlaneSpanIds === undefined ? undefined : [...grant.controlPlaneSpanIds];
    this.derived.set(grant, { grant: { jobId, projectId, pipelineId, runnerId, traceId, provisional, controlPlaneSpanIds }, value });
    return value;
  }
}

function sameGrant(a: GatewayGrant, b: GatewayGrant): boolean {
  return (
    a.jobId === b.jobId &&
    a.projectId === b.projectId &&
    a.pipelineId === b.pipelineId &&
    a.runnerId === b.runnerId &&
    a.traceId === b.traceId &&
    (a.provisional === true) === (b.provisional === true) &&
    sameIds(a.controlPlaneSpanIds, b.controlPlaneSpanIds)
  );
}

function sameIds(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((id, i) => id === b[i]);
}

export const grantIdentity = new PerGrant<GrantIdentity>(deriveGrantIdentity);

/**
 * One span as a walker saw it; a walker keeps one for a whole export. Sizes are in the export's encoding
 * (SpanLimits). A walker measures only as far as the decision needs: nothing past the trace id of a span outside
 * the grant's trace (dropped whatever it holds), nothing more once one measure is over its limit, and a value's
 * size only where its encoding could be over `maxAttributeValueBytes` (any figure on the same side of a limit
 * decides the same).
 */
export abstract class SpanSeen {
  inGrantedTrace = false;
  bytes = 0;
  attributes = 0;
  largestAttributeValueBytes = 0;
  /** Named JOB_EXECUTION_SPAN. */
  jobExecution = false;
  /** Why the collector could not decode the span (looked for only in the grant's trace); undefined when it can. */
  undecodable: string | undefined = undefined;
  /** Its span_id is one of the control plane's for the job (looked for only in the grant's trace). */
  controlPlaneSpanId = false;
  /** It, or its resource, carries an attribute only the control plane writes (control-plane-mark.ts). */
  reservedAttribute = false;

  /** How a `job_execution` span ended; read only once it is admitted. Undefined when it does not say. */
  abstract jobExecutionEnd(): RunnerJobEnd | undefined;

  /** `name (span_id)`, for the partial success of a span refused as the control plane's; read only then. */
  abstract describe(): string;

  /** Forgets the span seen before. */
  protected restart(bytes: number): void {
    this.inGrantedTrace = false;
    this.bytes = bytes;
    this.attributes = 0;
    this.largestAttributeValueBytes = 0;
    this.jobExecution = false;
    this.undecodable = undefined;
    this.controlPlaneSpanId = false;
    this.reservedAttribute = false;
  }
}

/** How many spans refused as the control plane's a partial success names. */
const NAMED_REFUSALS = 5;

/**
 * The Collector reads a container's deprecated scopes (`instrumentation_library_*`, field 1000) only when it has no
 * current ones, and drops them otherwise: enforced and forwarded as current scopes in that case, they mean the
 * same to every collector version.
 */
export function deprecatedScopesStandIn(currentScopes: number): boolean {
  return currentScopes === 0;
}

/**
 * The Metric of the envelope's allow-list (issue 9 item 1), by field name for both walkers: its members that go on as
 * they are, beside the data oneof whose points are counted and stamped; and the members of a data message that go on
 * beside its points, wherever they come. Anything else at those levels is dropped.
 */
export const METRIC_PLAIN_FIELDS: readonly OtlpFieldName<'Metric'>[] = ['name', 'description', 'unit', 'metadata'];
export const METRIC_DATA_PLAIN_FIELDS: readonly OtlpFieldName<'Sum'>[] = ['aggregation_temporality', 'is_monotonic'];

/** A scope whose spans were all dropped, or a resource whose scopes were, describes nothing: dropped with them. */
export function keepsEnvelope(held: number, kept: number): boolean {
  return held === 0 || kept > 0;
}

/**
 * An item's identity attributes in the order a walker meets them: the first occurrence of each owned key is
 * overwritten with the grant's value, in place; later occurrences are dropped, so a decoder that keeps the last
 * one cannot be fooled either.
 */
export class ItemIdentityStamp {
  private readonly written = new Set<string>();

  /** True: write the grant's value here; false: drop this occurrence. */
  overwrites(key: string): boolean {
    if (this.written.has(key)) return false;
    this.written.add(key);
    return true;
  }
}

/**
 * The decisions on one export, in body order (SPEC §6): a span goes on when it is in the grant's trace, decodable by
 * the collector, not the control plane's (its id, or a key only the control plane writes: SPEC §12 "Trust"), within
 * the per-span limits, within the job's span quota and then its span rate. A span is charged against quota and rate
 * only when it passed the checks before, so a rejected span never uses up what an accepted one could have had.
 * Metric data points and log records are counted, never dropped.
 */
export class ExportPolicy {
  private kept = 0;
  private foreignTrace = 0;
  private undecodable = 0;
  private undecodableWhy = '';
  private overLimits = 0;
  private overQuota = 0;
  private overRate = 0;
  private controlPlaneSpanId = 0;
  private reservedAttribute = 0;
  /** The first refused spans as the control plane's, named in the partial success so the job's author can find them. */
  private readonly controlPlaneNamed: string[] = [];
  private items = 0;
  private readonly quota: number;
  private readonly rate: number;
  private jobExecutionEnds: RunnerJobEnd[] | undefined;

  constructor(
    private readonly signal: OtlpSignal,
    spanBudget: number | SpanBudget,
    readonly limits: SpanLimits,
  ) {
    const budget = typeof spanBudget === 'number' ? { quota: spanBudget, rate: Infinity } : spanBudget;
    // NaN or a negative budget fails closed; Infinity means unlimited.
    this.quota = budget.quota > 0 ? Math.floor(budget.quota) : 0;
    this.rate = budget.rate > 0 ? Math.floor(budget.rate) : 0;
  }

  /** Whether the span goes on; an admitted `job_execution` span's end is noted. */
  admitSpan(span: SpanSeen): boolean {
    if (!span.inGrantedTrace) {
      this.foreignTrace++;
      return false;
    }
    // Before any limit: a span the collector cannot decode would make it refuse the whole request, and with it
    // every export coalesced into that request.
    if (span.undecodable !== undefined) {
      if (this.undecodable++ === 0) this.undecodableWhy = span.undecodable;
      return false;
    }
    // Before the limits and the quota: a job never writes GitLab's account of itself (SPEC §12 "Trust"), and such a
    // span must not use up what the job's own spans could have had.
    if (span.controlPlaneSpanId || span.reservedAttribute) {
      if (span.controlPlaneSpanId) this.controlPlaneSpanId++;
      else this.reservedAttribute++;
      if (this.controlPlaneNamed.length < NAMED_REFUSALS) this.controlPlaneNamed.push(span.describe());
      return false;
    }
    const { limits } = this;
    if (span.bytes > limits.maxBytes || span.attributes > limits.maxAttributes || span.largestAttributeValueBytes > limits.maxAttributeValueBytes) {
      this.overLimits++;
      return false;
    }
    // Position among the spans that passed the checks before: the first `rate` of them fit the rate, the first
    // `quota` the quota, so each rejected span is counted under the limit that really stopped it.
    const position = this.kept + this.overQuota + this.overRate;
    if (position >= this.quota) {
      this.overQuota++;
      return false;
    }
    if (position >= this.rate) {
      this.overRate++;
      return false;
    }
    this.kept++;
    if (span.jobExecution) {
      const end = span.jobExecutionEnd();
      if (end !== undefined) (this.jobExecutionEnds ??= []).push(end);
    }
    return true;
  }

  /** Metric data points or log records going on. */
  countItems(items: number): void {
    this.items += items;
  }

  result(body: Buffer | WireBody): EnforcedExport {
    const wire = body instanceof WireBody ? body : WireBody.of(body);
    if (this.signal !== 'traces') return new Enforced(wire, this.items, 0, this.items === 0);
    const reasons: string[] = [];
    const reason = (count: number, why: string) => {
      if (count > 0) reasons.push(`${count} ${count === 1 ? 'span' : 'spans'} rejected: ${why}`);
    };
    reason(this.foreignTrace, "trace_id is not this CI job's trace");
    reason(
      this.undecodable,
      `the collector cannot decode ${this.undecodable === 1 ? 'it' : 'them'} (${this.undecodable === 1 ? '' : 'first: '}${this.undecodableWhy})`,
    );
    reason(this.controlPlaneSpanId, "span_id is the control plane's (the job, queue-wait or pipeline span GitLab's account is written on)");
    reason(
      this.reservedAttribute,
      'it or its resource carries an attribute only the control plane writes (ci.telemetry.emitter, ci.pipeline.span.version, ci.sampling.*, the critical path)',
    );
    const controlPlane = this.controlPlaneSpanId + this.reservedAttribute;
    if (controlPlane > 0) {
      // Named, in body order, so that the job's author finds the spans a job may not write.
      reasons.push(`refused as the control plane's: ${this.controlPlaneNamed.join(', ')}${controlPlane > this.controlPlaneNamed.length ? ', …' : ''}`);
    }
    const { maxBytes, maxAttributes, maxAttributeValueBytes } = this.limits;
    reason(
      this.overLimits,
      `over the per-span limits (${maxBytes} bytes encoded, ${maxAttributes} attributes, ${maxAttributeValueBytes} bytes per attribute value)`,
    );
    reason(this.overQuota, "this CI job's span quota is exhausted");
    reason(this.overRate, 'this CI job is sending more spans per second than it may');
    const rejections: SpanRejections = {
      foreignTrace: this.foreignTrace,
      undecodable: this.undecodable,
      overLimits: this.overLimits,
      overQuota: this.overQuota,
      overRate: this.overRate,
      controlPlaneSpanId: this.controlPlaneSpanId,
      reservedAttribute: this.reservedAttribute,
    };
    const rejected = this.foreignTrace + this.undecodable + this.controlPlaneSpanId + this.reservedAttribute + this.overLimits + this.overQuota + this.overRate;
    return new Enforced(wire, this.kept, rejected, this.kept === 0, rejections, reasons.length > 0 ? reasons.join('; ') : undefined, this.jobExecutionEnds);
  }
}

/**
 * What enforcement decided, its body as the walker's pieces. A class, its `body` a getter of the prototype: written
 * as a getter in each result's object literal instead, it gave every export a getter function of its own, and a busy
 * gateway on Node 20 ran five times as many full collections (10-12 against 2 in 5 s of the otlp-gateway bench,
 * `--trace-gc`) at 40 % more CPU per export.
 */
class Enforced implements EnforcedExport {
  constructor(
    readonly wire: WireBody,
    readonly forwardedItems: number,
    readonly rejectedItems: number,
    readonly nothingToForward: boolean,
    readonly rejections?: SpanRejections,
    readonly errorMessage?: string,
    readonly jobExecutionEnds?: readonly RunnerJobEnd[],
  ) {}

  /** Joined only when something asks for one Buffer (tests, parking); forwarding takes `wire`. */
  get body(): Buffer {
    return this.wire.joined();
  }
}
