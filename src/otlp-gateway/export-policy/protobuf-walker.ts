/**
 * The protobuf walker of the export policy (export-policy.ts): reads OTLP/HTTP protobuf bodies and writes what the
 * policy decides by editing the wire format in place.
 *
 * Chosen over decoding with protobufjs and re-encoding (bench/otlp-payload.bench.js): only the envelope is
 * walked (request → Resource* → Scope* → item) and every byte the gateway does not change is copied as a slice
 * of the request, so it is both faster and lossless inside each item.
 *
 * The envelope is an allow-list (issue 9 item 1): at every level that can hold spans, metrics or logs (request,
 * Resource*, Scope*, Metric and its data), only the fields listed here go on. A field this gateway does not know
 * at those levels is dropped, since a collector that knows it could read data from it that nobody checked
 * (ResourceSpans field 1000 was exactly that). The Collector itself drops unknown fields, so nothing it would
 * have read is lost. Inside a span, data point or log record, unknown fields are kept byte for byte.
 *
 * What is forwarded can be decoded (otlp-decodable.ts): the Collector refuses a whole request for one value it cannot
 * decode, and several jobs' exports travel in one request. A span in the grant's trace is checked down to its last
 * nested value and rejected through partial success when the Collector could not decode it; a resource, scope or
 * log record it could not decode refuses the export, as broken framing does, since it is no one span's fault.
 *
 * Field numbers come from the OTLP table (otlp-fields.ts): opentelemetry-proto v1's, and field 1000 of
 * Resource{Spans,Metrics,Logs}, which the Collector's pdata decoders still read.
 */
import {
  ExportPolicy,
  ITEM_IDENTITY_KEYS,
  IdentityAttribute,
  ItemIdentityStamp,
  JOB_EXECUTION_SPAN,
  PerGrant,
  SpanSeen,
  METRIC_DATA_PLAIN_FIELDS,
  METRIC_PLAIN_FIELDS,
  deprecatedScopesStandIn,
  grantIdentity,
  keepsEnvelope,
  resourceKeyDropped,
  resourceKeyRefusesSpans,
} from './export-policy';
import { RESERVED_ATTRIBUTE_PREFIXES } from '../../otlp/control-plane-mark';
import type { OtlpSignal } from '../../otlp/otlp-encoding';
import type { EncodingEnforcement, RunnerJobEnd, SpanLimits } from './otlp-types';
import { protobufSamplingReason } from '../../otlp/sampling-reason';
import { ENVELOPE_FIELDS, OTLP_ENVELOPES, STATUS_CODE, fieldNumbers, oneofFields, otlpField } from '../../otlp/otlp-fields';
import {
  LOG_RECORD_RULE,
  MessageRule,
  ProtobufBody,
  RESOURCE_RULE,
  SCOPE_RULE,
  SPAN_RULE,
  lengthDelimitedDecodable,
  plainKeyValueDecodable,
  undecodableReason,
  utf8,
  wireTypeDecodable,
} from '../../otlp/otlp-decodable';
import {
  ChunkList,
  OtlpPayloadError,
  WIRE_FIXED32,
  WIRE_FIXED64,
  WIRE_LENGTH_DELIMITED,
  WIRE_VARINT,
  WireReader,
  encodeBytesField,
  encodeStringField,
  encodeVarintField,
  lengthDelimitedHeader,
} from '../../otlp/otlp-wire';

// Field numbers from the OTLP table, as constants of this module: the walk compares them field by field.
const {
  containers: REQUEST_RESOURCES,
  resource: CONTAINER_RESOURCE,
  scopes: CONTAINER_SCOPES,
  containerSchemaUrl: CONTAINER_SCHEMA_URL,
  // pdata reads them, and uses them in place of scope_* when that is empty (MigrateTraces / MigrateMetrics / MigrateLogs).
  deprecatedScopes: CONTAINER_DEPRECATED_SCOPES,
  scopeScope: SCOPE_SCOPE,
  items: SCOPE_ITEMS,
  scopeSchemaUrl: SCOPE_SCHEMA_URL,
} = ENVELOPE_FIELDS;
const {
  trace_id: SPAN_TRACE_ID,
  span_id: SPAN_SPAN_ID,
  parent_span_id: SPAN_PARENT_SPAN_ID,
  name: SPAN_NAME,
  end_time_unix_nano: SPAN_END_TIME,
  attributes: SPAN_ATTRIBUTES,
  status: SPAN_STATUS,
} = fieldNumbers('Span');
const STATUS_CODE_FIELD = fieldNumbers('Status').code;
const JOB_EXECUTION = Buffer.from(JOB_EXECUTION_SPAN);
const JOB_STATUS_KEY = 'ci.job.status';
// Metric: METRIC_PLAIN_FIELDS go on as they are; the data oneof is enforced; anything else (the removed int_gauge 4,
// int_sum 6, int_histogram 8 among them) is dropped.
const METRIC = fieldNumbers('Metric');
const METRIC_PLAIN: ReadonlySet<number> = new Set(METRIC_PLAIN_FIELDS.map((name) => METRIC[name]));
// Metric.data oneof → the attributes field of its data points (NumberDataPoint 7, HistogramDataPoint 9,
// ExponentialHistogramDataPoint 1, SummaryDataPoint 7), all held in data_points.
const METRIC_DATA_POINTS = fieldNumbers('Sum').data_points;
const DATA_POINT_ATTRIBUTES: ReadonlyMap<number, number> = new Map(
  oneofFields('Metric', 'data').map((data) => {
    const points = otlpField(data.message!, 'data_points');
    if (points.number !== METRIC_DATA_POINTS) throw new Error(`${data.message}.data_points is not field ${METRIC_DATA_POINTS}`);
    return [data.number, otlpField(points.message!, 'attributes').number];
  }),
);
const SUM = fieldNumbers('Sum');
const METRIC_DATA_PLAIN: ReadonlySet<number> = new Set(METRIC_DATA_PLAIN_FIELDS.map((name) => SUM[name]));
const LOG_RECORD_ATTRIBUTES = fieldNumbers('LogRecord').attributes;
const RESOURCE_ATTRIBUTES = fieldNumbers('Resource').attributes;
const { key: KEY_VALUE_KEY, value: KEY_VALUE_VALUE } = fieldNumbers('KeyValue');
const KEY_VALUE_KEY_TAG = otlpField('KeyValue', 'key').tag;
const KEY_VALUE_VALUE_TAG = otlpField('KeyValue', 'value').tag;
const CI_PREFIX = Buffer.from('ci.');
// Item identity keys are recognised by their "ci." prefix and their length before any key is decoded.
if (![...ITEM_IDENTITY_KEYS].every((key) => key.startsWith('ci.'))) throw new Error('item identity keys must start with "ci."');
const ITEM_IDENTITY_KEY_LENGTHS: ReadonlySet<number> = new Set([...ITEM_IDENTITY_KEYS].map((key) => key.length));
// The control plane's keys (control-plane-mark.ts), compared byte by byte past their common "ci.".
const RESERVED_KEY_PREFIXES: readonly Buffer[] = RESERVED_ATTRIBUTE_PREFIXES.map((prefix) => Buffer.from(prefix));
const { string_value: ANY_VALUE_STRING, int_value: ANY_VALUE_INT, bytes_value: ANY_VALUE_BYTES } = fieldNumbers('AnyValue');

interface Enforcement {
  signal: OtlpSignal;
  body: Buffer;
  /** The body as the decodability checks read it. */
  checked: ProtobufBody;
  traceId: Buffer;
  /** Resource.attributes fields carrying the grant's identity and the sampling reason, appended to every resource. */
  identity: Buffer;
  /** KeyValue messages (without tag) stamped over an item's own identity attributes, by key. */
  itemIdentity: ReadonlyMap<string, Buffer>;
  limits: SpanLimits;
  policy: ExportPolicy;
  /** The span being walked (reused: one object per export, not one per span). */
  span: SpanScan;
  /** Where the last search for "ci." started, and what it found (-1: nothing after it). */
  ciSearchFrom: number;
  ciFoundAt: number;
  /** The control plane's span ids for the job (GatewayGrant.controlPlaneSpanIds), 8 bytes each. */
  controlPlaneSpanIds: readonly Buffer[];
  /** The resource of the container being walked carries a key only the control plane writes: its spans are refused. */
  resourceReserved: boolean;
}

/** An item or message the gateway left as it came, or its rewritten fields. */
type Rewrite = 'unchanged' | ChunkList;

const encodedGrants = new PerGrant((grant) => {
  // A provisional grant's spans get their trace_state when they leave, kept (settleProvisionalTraces), not here: the
  // rewrite of every span to append it was most of what parking an export cost beyond forwarding it, and most
  // provisional pipelines are dropped.
  const { traceIdHex, resource, items, samplingReason, controlPlaneSpanIds } = grantIdentity.of(grant);
  return {
    traceId: Buffer.from(traceIdHex, 'hex'),
    controlPlaneSpanIds: controlPlaneSpanIds.map((id) => Buffer.from(id, 'hex')),
    identity: Buffer.concat([encodeIdentityAttributes(resource), encodeBytesField(RESOURCE_ATTRIBUTES, protobufSamplingReason(samplingReason))]),
    itemIdentity: new Map([...items].map(([key, attribute]) => [key, encodeKeyValue(attribute)])) as ReadonlyMap<string, Buffer>,
  };
});

export const enforceProtobufExport: EncodingEnforcement = (signal, body, grant, spanBudget, spanLimits) => {
  const { traceId, identity, itemIdentity, controlPlaneSpanIds } = encodedGrants.of(grant);
  const enforcement: Enforcement = {
    signal,
    body,
    checked: new ProtobufBody(body),
    traceId,
    identity,
    itemIdentity,
    limits: spanLimits,
    policy: new ExportPolicy(signal, spanBudget, spanLimits),
    span: new SpanScan(body),
    ciSearchFrom: Infinity,
    ciFoundAt: -1,
    controlPlaneSpanIds,
    resourceReserved: false,
  };
  const out = new ChunkList(body);
  const reader = new WireReader(body, 0, body.length);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === REQUEST_RESOURCES) {
      const end = reader.expectLengthDelimited(OTLP_ENVELOPES[signal].container);
      const container = rewriteContainer(enforcement, reader.pos, end);
      if (container !== undefined) out.pushMessage(REQUEST_RESOURCES, container);
      reader.pos = end;
    } else {
      // Not in the allow-list: dropped.
      reader.skipValue();
    }
  }
  return enforcement.policy.result(out.toWireBody());
};

/**
 * Rewrites one Resource{Spans,Metrics,Logs}; `undefined` when the spans filter emptied it.
 * Every occurrence of `resource` is merged into one (protobuf merges repeated occurrences of a message field,
 * so splitting attributes across two occurrences must not hide a spoofed key), written first.
 */
function rewriteContainer(enforcement: Enforcement, start: number, end: number): ChunkList | undefined {
  const { body, signal } = enforcement;
  const names = OTLP_ENVELOPES[signal];
  const resource = new ChunkList(body);
  const rest = new ChunkList(body);
  let scopesSeen = 0;
  let scopesKept = 0;
  const deprecatedScopes: Array<[start: number, end: number]> = [];
  const keepScope = (rewrite: Rewrite | 'emptied', fieldStart: number, scopeStart: number, scopeEnd: number) => {
    scopesSeen++;
    if (rewrite === 'emptied') return;
    scopesKept++;
    if (rewrite !== 'unchanged') rest.pushMessage(CONTAINER_SCOPES, rewrite);
    else if (fieldStart >= 0) rest.copy(fieldStart, scopeEnd);
    else {
      rest.push(lengthDelimitedHeader(CONTAINER_SCOPES, scopeEnd - scopeStart));
      rest.copy(scopeStart, scopeEnd);
    }
  };
  // The resource first, wherever it is in the container: whether it refuses the spans is known before any of them.
  enforcement.resourceReserved = false;
  const resourceReader = new WireReader(body, start, end);
  while (!resourceReader.atEnd()) {
    resourceReader.readTag();
    if (resourceReader.fieldNumber === CONTAINER_RESOURCE) {
      const resourceEnd = resourceReader.expectLengthDelimited('Resource');
      refuseUndecodable(enforcement, resourceReader.pos, resourceEnd, RESOURCE_RULE, `${names.container}.resource`);
      if (stripIdentityAttributes(body, resourceReader.pos, resourceEnd, resource)) enforcement.resourceReserved = true;
      resourceReader.pos = resourceEnd;
    } else {
      resourceReader.skipValue();
    }
  }
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === CONTAINER_RESOURCE) {
      // Merged into `resource` above.
      reader.pos = reader.expectLengthDelimited('Resource');
    } else if (reader.fieldNumber === CONTAINER_SCOPES) {
      const scopeEnd = reader.expectLengthDelimited(names.scope);
      keepScope(rewriteScope(enforcement, reader.pos, scopeEnd), fieldStart, reader.pos, scopeEnd);
      reader.pos = scopeEnd;
    } else if (reader.fieldNumber === CONTAINER_DEPRECATED_SCOPES) {
      const scopeEnd = reader.expectLengthDelimited(`${names.container} field ${CONTAINER_DEPRECATED_SCOPES} (deprecated ${names.scope})`);
      deprecatedScopes.push([reader.pos, scopeEnd]);
      reader.pos = scopeEnd;
    } else if (reader.fieldNumber === CONTAINER_SCHEMA_URL) {
      reader.pos = expectString(enforcement, reader, `${names.container}.schema_url`);
      rest.copy(fieldStart, reader.pos);
    } else {
      // Not in the allow-list: dropped.
      reader.skipValue();
    }
  }
  if (deprecatedScopesStandIn(scopesSeen)) {
    for (const [scopeStart, scopeEnd] of deprecatedScopes) {
      keepScope(rewriteScope(enforcement, scopeStart, scopeEnd), -1, scopeStart, scopeEnd);
    }
  }
  if (!keepsEnvelope(scopesSeen, scopesKept)) return undefined;
  resource.push(enforcement.identity);
  const container = new ChunkList(body);
  container.pushMessage(CONTAINER_RESOURCE, resource);
  container.pushAll(rest);
  return container;
}

/**
 * What the resource, scope or log record an export shares among its items holds must be decodable by the collector,
 * as its framing must be: otherwise the export is refused as a bad request (SPEC §6), since no one item is at fault.
 */
function refuseUndecodable(enforcement: Enforcement, start: number, end: number, rule: MessageRule, where: string): void {
  const reason = undecodableReason(enforcement.checked, start, end, rule);
  if (reason !== undefined) throw new OtlpPayloadError(`${where}: ${reason}, which the collector cannot decode`);
}

/** The end of a string field whose tag was just read: length-delimited and UTF-8, or the export is a bad request. */
function expectString(enforcement: Enforcement, reader: WireReader, where: string): number {
  const end = reader.expectLengthDelimited(where);
  if (!utf8(enforcement.checked, reader.pos, end)) throw new OtlpPayloadError(`${where} is not valid UTF-8, which the collector cannot decode`);
  return end;
}

/**
 * Copies a Resource's fields except KeyValues whose key the gateway owns or the control plane does; true when one of
 * the latter was there (the spans under it are refused).
 */
function stripIdentityAttributes(body: Buffer, start: number, end: number, resource: ChunkList): boolean {
  let refusesSpans = false;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === RESOURCE_ATTRIBUTES) {
      const attributeEnd = reader.expectLengthDelimited('Resource.attributes');
      const key = keyValueKey(body, reader.pos, attributeEnd);
      if (!resourceKeyDropped(key)) resource.copy(fieldStart, attributeEnd);
      else if (resourceKeyRefusesSpans(key)) refusesSpans = true;
      reader.pos = attributeEnd;
    } else {
      reader.skipValue();
      resource.copy(fieldStart, reader.pos);
    }
  }
  return refusesSpans;
}

function keyValueKey(body: Buffer, start: number, end: number): string {
  const reader = new WireReader(body, start, end);
  let key = '';
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === KEY_VALUE_KEY) {
      const keyEnd = reader.expectLengthDelimited('KeyValue.key');
      // Last occurrence wins for a scalar field, as in every protobuf decoder.
      key = body.toString('utf8', reader.pos, keyEnd);
      reader.pos = keyEnd;
    } else {
      reader.skipValue();
    }
  }
  return key;
}

/** Rewrites one Scope{Spans,Metrics,Logs}; 'emptied' when the spans filter removed every span it had. */
function rewriteScope(enforcement: Enforcement, start: number, end: number): Rewrite | 'emptied' {
  const { body, signal } = enforcement;
  const scope = new ChunkList(body);
  let changed = false;
  let kept = 0;
  let dropped = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === SCOPE_ITEMS) {
      const itemEnd = reader.expectLengthDelimited(OTLP_ENVELOPES[signal].item);
      let rewrite: Rewrite | 'dropped';
      if (signal === 'traces') {
        rewrite = admitSpan(enforcement, reader.pos, itemEnd);
      } else if (signal === 'metrics') {
        rewrite = rewriteMetric(enforcement, reader.pos, itemEnd);
      } else {
        // Log records are counted, never dropped one by one: one the collector cannot decode refuses the export.
        refuseUndecodable(enforcement, reader.pos, itemEnd, LOG_RECORD_RULE, 'LogRecord');
        enforcement.policy.countItems(1);
        rewrite = stampItemAttributes(enforcement, reader.pos, itemEnd, LOG_RECORD_ATTRIBUTES);
      }
      if (rewrite === 'dropped') {
        dropped++;
        changed = true;
      } else {
        kept++;
        if (rewrite === 'unchanged') scope.copy(fieldStart, itemEnd);
        else {
          scope.pushMessage(SCOPE_ITEMS, rewrite);
          changed = true;
        }
      }
      reader.pos = itemEnd;
    } else if (reader.fieldNumber === SCOPE_SCOPE) {
      const scopeEnd = reader.expectLengthDelimited(`${OTLP_ENVELOPES[signal].scope}.scope`);
      refuseUndecodable(enforcement, reader.pos, scopeEnd, SCOPE_RULE, `${OTLP_ENVELOPES[signal].scope}.scope`);
      reader.pos = scopeEnd;
      scope.copy(fieldStart, reader.pos);
    } else if (reader.fieldNumber === SCOPE_SCHEMA_URL) {
      reader.pos = expectString(enforcement, reader, `${OTLP_ENVELOPES[signal].scope}.schema_url`);
      scope.copy(fieldStart, reader.pos);
    } else {
      // Not in the allow-list: dropped.
      reader.skipValue();
      changed = true;
    }
  }
  if (!keepsEnvelope(kept + dropped, kept)) return 'emptied';
  return changed ? scope : 'unchanged';
}

/** What the walk of one span found, for the policy; and where its trace id is and whether it carries identity keys. */
class SpanScan extends SpanSeen {
  start = 0;
  end = 0;
  idStart = -1;
  idEnd = -1;
  spanIdStart = -1;
  spanIdEnd = -1;
  nameStart = -1;
  nameEnd = -1;
  carriesIdentity = false;
  /** True when the walk itself checked every value of the span and the collector decodes them all. */
  walkedDecodable = false;

  constructor(private readonly body: Buffer) {
    super();
  }

  begin(start: number, end: number): void {
    this.restart(end - start);
    this.start = start;
    this.end = end;
    this.idStart = -1;
    this.idEnd = -1;
    this.spanIdStart = -1;
    this.spanIdEnd = -1;
    this.nameStart = -1;
    this.nameEnd = -1;
    this.carriesIdentity = false;
    this.walkedDecodable = false;
  }

  jobExecutionEnd(): RunnerJobEnd | undefined {
    return readJobExecutionEnd(this.body, this.start, this.end);
  }

  describe(): string {
    const name = this.nameStart < 0 ? '' : this.body.toString('utf8', this.nameStart, Math.min(this.nameEnd, this.nameStart + NAMED_SPAN_BYTES));
    return `${JSON.stringify(name)} (span_id ${this.spanIdStart < 0 ? '' : this.body.toString('hex', this.spanIdStart, this.spanIdEnd)})`;
  }
}

/** How much of a refused span's name its partial success repeats. */
const NAMED_SPAN_BYTES = 64;

/** The span walked for the policy's decision, then its identity attributes stamped when it goes on. */
function admitSpan(enforcement: Enforcement, start: number, end: number): Rewrite | 'dropped' {
  const { body, traceId, span } = enforcement;
  if (!scanCanonicalSpan(enforcement, start, end)) scanSpan(enforcement, start, end);
  const { idStart } = span;
  let inTrace = span.idEnd - idStart === traceId.length;
  for (let i = 0; inTrace && i < traceId.length; i++) {
    if (body[idStart + i] !== traceId[i]) inTrace = false;
  }
  span.inGrantedTrace = inTrace;
  // Only a span in the grant's trace can go on, so only it is checked for what the collector cannot decode: the
  // canonical walk checked it on its way, and the general check runs only when that did not vouch for the span.
  if (inTrace && !span.walkedDecodable) span.undecodable = undecodableReason(enforcement.checked, start, end, SPAN_RULE);
  if (inTrace) {
    // As cheap as the trace check: a few ids of 8 bytes, compared where the walk found the span's.
    span.controlPlaneSpanId = isControlPlaneSpanId(enforcement, span.spanIdStart, span.spanIdEnd);
    if (enforcement.resourceReserved) span.reservedAttribute = true;
  }
  if (!enforcement.policy.admitSpan(span)) return 'dropped';
  return span.carriesIdentity ? stampItemAttributes(enforcement, start, end, SPAN_ATTRIBUTES) : 'unchanged';
}

/** Walks a span's fields with the general reader: any valid encoding, and the exact error for a malformed one. */
function scanSpan(enforcement: Enforcement, start: number, end: number): void {
  enforcement.span.begin(start, end);
  const { body, span } = enforcement;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === SPAN_TRACE_ID) {
      span.idEnd = reader.expectLengthDelimited('Span.trace_id');
      span.idStart = reader.pos;
      reader.pos = span.idEnd;
    } else if (reader.fieldNumber === SPAN_ATTRIBUTES) {
      const attributeEnd = reader.expectLengthDelimited('Span.attributes');
      scanSpanAttribute(enforcement, reader.pos, attributeEnd, false);
      reader.pos = attributeEnd;
    } else if (reader.fieldNumber === SPAN_SPAN_ID && reader.wireType === WIRE_LENGTH_DELIMITED) {
      span.spanIdEnd = reader.readLengthDelimitedEnd();
      span.spanIdStart = reader.pos;
      reader.pos = span.spanIdEnd;
    } else if (reader.fieldNumber === SPAN_NAME && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const nameEnd = reader.readLengthDelimitedEnd();
      span.jobExecution = isJobExecution(body, reader.pos, nameEnd);
      span.nameStart = reader.pos;
      span.nameEnd = nameEnd;
      reader.pos = nameEnd;
    } else {
      reader.skipValue();
    }
  }
}

/**
 * The same walk for what encoders write (tags and lengths of one or two bytes, no groups), in local variables:
 * the general reader's calls per field were half the protobuf path (issue 12 profile). False, with nothing
 * decided, for anything else, malformed spans included: scanSpan then walks the span again. It accepts no span
 * that scanSpan refuses.
 *
 * It also checks, field by field as it reads them, that the collector decodes the span (walkedDecodable): a second
 * walk of every span for that alone made the protobuf path 3–4 times slower (bench/otlp-payload.bench.js).
 */
function scanCanonicalSpan(enforcement: Enforcement, start: number, end: number): boolean {
  enforcement.span.begin(start, end);
  const { body, span } = enforcement;
  let decodable = true;
  let pos = start;
  while (pos < end) {
    let tag = body[pos++];
    if (tag >= 0x80) {
      if (pos >= end || body[pos] >= 0x80) return false;
      tag = (tag & 0x7f) | (body[pos++] << 7);
    }
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field === 0) return false;
    if (wireType === WIRE_LENGTH_DELIMITED) {
      if (pos >= end) return false;
      let length = body[pos++];
      if (length >= 0x80) {
        if (pos >= end || body[pos] >= 0x80) return false;
        length = (length & 0x7f) | (body[pos++] << 7);
      }
      const valueEnd = pos + length;
      if (valueEnd > end) return false;
      if (field === SPAN_TRACE_ID) {
        span.idStart = pos;
        span.idEnd = valueEnd;
        if (decodable) decodable = length === 16 || length === 0;
      } else if (field === SPAN_ATTRIBUTES) {
        // One look at an attribute in its usual form serves both: its decodability, and where its key is.
        const plain = plainKeyValueDecodable(enforcement.checked, pos, valueEnd);
        if (decodable && !plain) decodable = lengthDelimitedDecodable(enforcement.checked, SPAN_RULE, field, pos, valueEnd);
        scanSpanAttribute(enforcement, pos, valueEnd, plain);
      } else {
        if (field === SPAN_SPAN_ID) {
          span.spanIdStart = pos;
          span.spanIdEnd = valueEnd;
        } else if (field === SPAN_NAME) {
          span.nameStart = pos;
          span.nameEnd = valueEnd;
          if (length === JOB_EXECUTION.length) span.jobExecution = isJobExecution(body, pos, valueEnd);
        }
        if (decodable) decodable = lengthDelimitedDecodable(enforcement.checked, SPAN_RULE, field, pos, valueEnd);
      }
      pos = valueEnd;
    } else if (field === SPAN_TRACE_ID || field === SPAN_ATTRIBUTES) {
      // The general reader refuses these with another wire type.
      return false;
    } else if (wireType === WIRE_VARINT) {
      const varintEnd = Math.min(pos + 10, end);
      while (pos < varintEnd && body[pos] >= 0x80) pos++;
      if (pos >= varintEnd) return false;
      pos++;
      if (decodable) decodable = wireTypeDecodable(SPAN_RULE, field, wireType);
    } else if (wireType === WIRE_FIXED64 || wireType === WIRE_FIXED32) {
      pos += wireType === WIRE_FIXED64 ? 8 : 4;
      if (pos > end) return false;
      if (decodable) decodable = wireTypeDecodable(SPAN_RULE, field, wireType);
    } else {
      return false;
    }
  }
  span.walkedDecodable = decodable;
  return true;
}

function isJobExecution(body: Buffer, start: number, end: number): boolean {
  return end - start === JOB_EXECUTION.length && body.compare(JOB_EXECUTION, 0, JOB_EXECUTION.length, start, end) === 0;
}

/** `plainKeyValue`: plainKeyValueDecodable said yes, so the attribute is its key and then one value. */
function scanSpanAttribute(enforcement: Enforcement, start: number, end: number, plainKeyValue: boolean): void {
  const { body, limits, span } = enforcement;
  span.attributes++;
  // Only a key starting with "ci." is looked into, for the identity the gateway stamps and the keys it refuses.
  if ((!span.carriesIdentity || !span.reservedAttribute) && keyMayBeIdentity(body, start, end, plainKeyValue)) {
    locateKey(body, start, end);
    if (!span.carriesIdentity && identityKeyAt(enforcement, keyBounds.start, keyBounds.end) !== undefined) span.carriesIdentity = true;
    if (!span.reservedAttribute && reservedKeyAt(body, keyBounds.start, keyBounds.end)) span.reservedAttribute = true;
  }
  // The whole KeyValue is an upper bound of its value's size: only a long one is looked into, and none once the
  // span is over a limit.
  const limit = limits.maxAttributeValueBytes;
  if (end - start > limit && span.largestAttributeValueBytes <= limit && span.bytes <= limits.maxBytes) {
    span.largestAttributeValueBytes = Math.max(span.largestAttributeValueBytes, attributeValueBytes(body, start, end, limit));
  }
}

/**
 * Size of a KeyValue's value for the per-span limit: a string or bytes value counts its content, any other its
 * encoded size. Only values whose encoded size is over `limit` are looked into: the encoding is never smaller.
 */
function attributeValueBytes(body: Buffer, start: number, end: number, limit: number): number {
  let encoded = 0;
  let contentStart = -1;
  let contentEnd = -1;
  let values = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === KEY_VALUE_VALUE && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const valueEnd = reader.readLengthDelimitedEnd();
      encoded += valueEnd - reader.pos;
      values++;
      contentStart = reader.pos;
      contentEnd = valueEnd;
      reader.pos = valueEnd;
    } else {
      reader.skipValue();
    }
  }
  if (encoded <= limit || values !== 1) return encoded;
  // One AnyValue that is one string or bytes field: its content is what the limit is about.
  const value = new WireReader(body, contentStart, contentEnd);
  value.readTag();
  if ((value.fieldNumber !== ANY_VALUE_STRING && value.fieldNumber !== ANY_VALUE_BYTES) || value.wireType !== WIRE_LENGTH_DELIMITED) {
    return encoded;
  }
  const fieldEnd = value.readLengthDelimitedEnd();
  return fieldEnd === contentEnd ? fieldEnd - value.pos : encoded;
}

/**
 * False when `[start, end)` holds no "ci." at all, so no attribute in it can be an identity key: most items are
 * then passed without looking at their attributes. Items are visited in body order, so one search serves every
 * item up to the next occurrence: linear in the body overall.
 */
function bytesContainCiPrefix(enforcement: Enforcement, start: number, end: number): boolean {
  if (!(enforcement.ciSearchFrom <= start && (enforcement.ciFoundAt === -1 || enforcement.ciFoundAt >= start))) {
    enforcement.ciSearchFrom = start;
    enforcement.ciFoundAt = enforcement.body.indexOf(CI_PREFIX, start);
  }
  return enforcement.ciFoundAt !== -1 && enforcement.ciFoundAt < end;
}

/** Where the key of the KeyValue locateKey looked at last is: one object, not one per attribute. */
const keyBounds = { start: -1, end: -1 };

/** Finds the key of the KeyValue at `[start, end)` and leaves where it is in keyBounds (-1 when it has none). */
function locateKey(body: Buffer, start: number, end: number): void {
  let keyStart = -1;
  let keyEnd = -1;
  const keyLength = body[start + 1];
  if (body[start] === KEY_VALUE_KEY_TAG && keyLength < 0x80 && start + 2 + keyLength <= end && onlyValueAfter(body, start + 2 + keyLength, end)) {
    // A KeyValue as encoders write it (short key, then at most one value): read without a reader on the hot path.
    keyStart = start + 2;
    keyEnd = keyStart + keyLength;
  } else {
    const reader = new WireReader(body, start, end);
    while (!reader.atEnd()) {
      reader.readTag();
      if (reader.fieldNumber === KEY_VALUE_KEY) {
        keyEnd = reader.expectLengthDelimited('KeyValue.key');
        // Last occurrence wins for a scalar field, as in every protobuf decoder.
        keyStart = reader.pos;
        reader.pos = keyEnd;
      } else {
        reader.skipValue();
      }
    }
  }
  keyBounds.start = keyStart;
  keyBounds.end = keyEnd;
}

/** The identity key this KeyValue carries, if it is one the gateway owns on items; undecoded otherwise. */
function itemIdentityKey(enforcement: Enforcement, start: number, end: number): string | undefined {
  locateKey(enforcement.body, start, end);
  return identityKeyAt(enforcement, keyBounds.start, keyBounds.end);
}

/** The identity key at `[keyStart, keyEnd)`, if it is one the gateway owns on items; undecoded otherwise. */
function identityKeyAt(enforcement: Enforcement, keyStart: number, keyEnd: number): string | undefined {
  const { body } = enforcement;
  // "ci." checked byte by byte: Buffer#compare costs more than the rest of the span walk on common keys.
  if (body[keyStart] !== 0x63 || body[keyStart + 1] !== 0x69 || body[keyStart + 2] !== 0x2e || !ITEM_IDENTITY_KEY_LENGTHS.has(keyEnd - keyStart)) {
    return undefined;
  }
  const key = body.toString('utf8', keyStart, keyEnd);
  return enforcement.itemIdentity.has(key) ? key : undefined;
}

/** Whether the key at `[start, end)` is one only the control plane writes (RESERVED_ATTRIBUTE_PREFIXES), byte by byte. */
function reservedKeyAt(body: Buffer, start: number, end: number): boolean {
  if (start < 0) return false;
  for (const prefix of RESERVED_KEY_PREFIXES) {
    if (end - start < prefix.length) continue;
    let i = 0;
    while (i < prefix.length && body[start + i] === prefix[i]) i++;
    if (i === prefix.length) return true;
  }
  return false;
}

/** Whether the span id at `[start, end)` is one of the control plane's for the job. */
function isControlPlaneSpanId(enforcement: Enforcement, start: number, end: number): boolean {
  if (start < 0 || end - start !== 8) return false;
  const { body } = enforcement;
  for (const id of enforcement.controlPlaneSpanIds) {
    let i = 0;
    while (i < 8 && body[start + i] === id[i]) i++;
    if (i === 8) return true;
  }
  return false;
}

/**
 * False for a KeyValue as encoders write it (its key first, then at most one value) whose key does not start
 * with "ci.": decided from a few bytes where it sits. A search of the whole body for "ci." was a quarter of the
 * protobuf path once the span walk got faster (issue 12 profile). True for anything else, which is decoded.
 */
function keyMayBeIdentity(body: Buffer, start: number, end: number, plainKeyValue: boolean): boolean {
  const keyLength = body[start + 1];
  if (!plainKeyValue && (body[start] !== KEY_VALUE_KEY_TAG || keyLength >= 0x80 || start + 2 + keyLength > end)) return true;
  if (keyLength >= 3 && body[start + 2] === 0x63 && body[start + 3] === 0x69 && body[start + 4] === 0x2e) return true;
  return !plainKeyValue && !onlyValueAfter(body, start + 2 + keyLength, end);
}

/** True when `[pos, end)` is empty or exactly one KeyValue.value field: the key before it is the only one. */
function onlyValueAfter(body: Buffer, pos: number, end: number): boolean {
  if (pos === end) return true;
  if (body[pos] !== KEY_VALUE_VALUE_TAG) return false;
  let length = 0;
  let multiplier = 1;
  for (let i = pos + 1; i < end && i < pos + 6; i++) {
    length += (body[i] & 0x7f) * multiplier;
    if (body[i] < 0x80) return i + 1 + length === end;
    multiplier *= 128;
  }
  return false;
}

/**
 * Overwrites the identity attributes an item (span, data point, log record) carries with the grant's: the first
 * occurrence of each key becomes the grant's value, in place; later occurrences are dropped, so a decoder that
 * keeps the last one cannot be fooled either.
 */
function stampItemAttributes(enforcement: Enforcement, start: number, end: number, attributesField: number): Rewrite {
  const { body } = enforcement;
  if (!bytesContainCiPrefix(enforcement, start, end)) return 'unchanged';
  const item = new ChunkList(body);
  let stamp: ItemIdentityStamp | undefined;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === attributesField) {
      const attributeEnd = reader.expectLengthDelimited('attributes');
      const key = itemIdentityKey(enforcement, reader.pos, attributeEnd);
      if (key === undefined) item.copy(fieldStart, attributeEnd);
      else if ((stamp ??= new ItemIdentityStamp()).overwrites(key)) {
        item.push(encodeBytesField(attributesField, enforcement.itemIdentity.get(key)!));
      }
      reader.pos = attributeEnd;
    } else {
      reader.skipValue();
      item.copy(fieldStart, reader.pos);
    }
  }
  return stamp === undefined ? 'unchanged' : item;
}

function rewriteMetric(enforcement: Enforcement, start: number, end: number): Rewrite {
  const { body } = enforcement;
  const metric = new ChunkList(body);
  let changed = false;
  // Metric.data is a oneof: when several members occur, the last one is what a decoder keeps (occurrences of
  // the same member merge, so their points add up).
  let dataField = 0;
  let points = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    const field = reader.fieldNumber;
    const pointAttributes = DATA_POINT_ATTRIBUTES.get(field);
    if (pointAttributes !== undefined) {
      const dataEnd = reader.expectLengthDelimited('Metric data');
      const data = rewriteMetricData(enforcement, reader.pos, dataEnd, pointAttributes);
      points = field === dataField ? points + data.points : data.points;
      dataField = field;
      if (data.rewrite === 'unchanged') metric.copy(fieldStart, dataEnd);
      else {
        metric.pushMessage(field, data.rewrite);
        changed = true;
      }
      reader.pos = dataEnd;
    } else if (METRIC_PLAIN.has(field)) {
      reader.skipValue();
      metric.copy(fieldStart, reader.pos);
    } else {
      // Not in the allow-list: dropped.
      reader.skipValue();
      changed = true;
    }
  }
  enforcement.policy.countItems(points);
  return changed ? metric : 'unchanged';
}

function rewriteMetricData(enforcement: Enforcement, start: number, end: number, pointAttributes: number): { rewrite: Rewrite; points: number } {
  const { body } = enforcement;
  const data = new ChunkList(body);
  let changed = false;
  let points = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === METRIC_DATA_POINTS) {
      const pointEnd = reader.expectLengthDelimited('data point');
      points++;
      const point = stampItemAttributes(enforcement, reader.pos, pointEnd, pointAttributes);
      if (point === 'unchanged') data.copy(fieldStart, pointEnd);
      else {
        data.pushMessage(METRIC_DATA_POINTS, point);
        changed = true;
      }
      reader.pos = pointEnd;
    } else if (METRIC_DATA_PLAIN.has(reader.fieldNumber)) {
      reader.skipValue();
      data.copy(fieldStart, reader.pos);
    } else {
      // Not in the allow-list: dropped.
      reader.skipValue();
      changed = true;
    }
  }
  return { rewrite: changed ? data : 'unchanged', points };
}

function encodeKeyValue({ key, value }: IdentityAttribute): Buffer {
  const anyValue = value.kind === 'int' ? encodeVarintField(ANY_VALUE_INT, value.int) : encodeStringField(ANY_VALUE_STRING, value.string);
  return Buffer.concat([encodeStringField(KEY_VALUE_KEY, key), encodeBytesField(KEY_VALUE_VALUE, anyValue)]);
}

function encodeIdentityAttributes(attributes: IdentityAttribute[]): Buffer {
  return Buffer.concat(attributes.map((attribute) => encodeBytesField(RESOURCE_ATTRIBUTES, encodeKeyValue(attribute))));
}

/**
 * The end of a `job_execution` span the walk admitted: its end time, `ci.job.status`, else failed for an Error
 * status, and its parent. Undefined when the span's status or attributes are malformed inside (the walk checks
 * a span's own fields only): this is a side look, and the export goes on.
 */
function readJobExecutionEnd(body: Buffer, start: number, end: number): RunnerJobEnd | undefined {
  let parentSpanId = '';
  let endMs = 0;
  let status: string | undefined;
  let failed = false;
  const span = new WireReader(body, start, end);
  try {
    while (!span.atEnd()) {
      span.readTag();
      if (span.fieldNumber === SPAN_PARENT_SPAN_ID && span.wireType === WIRE_LENGTH_DELIMITED) {
        const idEnd = span.readLengthDelimitedEnd();
        parentSpanId = body.toString('hex', span.pos, idEnd);
        span.pos = idEnd;
      } else if (span.fieldNumber === SPAN_END_TIME && span.wireType === WIRE_FIXED64) {
        endMs = Number(body.readBigUInt64LE(span.pos) / 1_000_000n);
        span.pos += 8;
      } else if (span.fieldNumber === SPAN_ATTRIBUTES && span.wireType === WIRE_LENGTH_DELIMITED) {
        const attributeEnd = span.readLengthDelimitedEnd();
        const attribute = stringKeyValue(new WireReader(body, span.pos, attributeEnd));
        if (attribute.key === JOB_STATUS_KEY) status = attribute.value;
        span.pos = attributeEnd;
      } else if (span.fieldNumber === SPAN_STATUS && span.wireType === WIRE_LENGTH_DELIMITED) {
        const statusEnd = span.readLengthDelimitedEnd();
        const spanStatus = new WireReader(body, span.pos, statusEnd);
        while (!spanStatus.atEnd()) {
          spanStatus.readTag();
          if (spanStatus.fieldNumber === STATUS_CODE_FIELD && spanStatus.wireType === WIRE_VARINT) failed = spanStatus.readVarint() === STATUS_CODE.ERROR;
          else spanStatus.skipValue();
        }
        span.pos = statusEnd;
      } else span.skipValue();
    }
  } catch (error) {
    if (error instanceof OtlpPayloadError) return undefined;
    throw error;
  }
  return { parentSpanId, endMs, status: status ?? (failed ? 'failed' : undefined) };
}

/** A KeyValue's key, and its value when it is a string (AnyValue field 1). */
function stringKeyValue(reader: WireReader): { key?: string; value?: string } {
  let key: string | undefined;
  let value: string | undefined;
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === KEY_VALUE_KEY && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const keyEnd = reader.readLengthDelimitedEnd();
      key = reader.buf.toString('utf8', reader.pos, keyEnd);
      reader.pos = keyEnd;
    } else if (reader.fieldNumber === KEY_VALUE_VALUE && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const valueEnd = reader.readLengthDelimitedEnd();
      const any = new WireReader(reader.buf, reader.pos, valueEnd);
      while (!any.atEnd()) {
        any.readTag();
        if (any.fieldNumber === ANY_VALUE_STRING && any.wireType === WIRE_LENGTH_DELIMITED) {
          const stringEnd = any.readLengthDelimitedEnd();
          value = any.buf.toString('utf8', any.pos, stringEnd);
          any.pos = stringEnd;
        } else any.skipValue();
      }
      reader.pos = valueEnd;
    } else reader.skipValue();
  }
  return { key, value };
}
