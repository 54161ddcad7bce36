/**
 * The JSON walker of the export policy (export-policy.ts): reads OTLP/HTTP JSON bodies (OTLP spec "JSON Protobuf
 * Encoding": lowerCamelCase keys, hex trace and span ids, enums as integers, 64-bit integers as strings or numbers)
 * and writes what the policy decides.
 *
 * The body is parsed, edited and serialized again. Parser differences with the collector are closed on purpose:
 * - the collector's pdata JSON reader also accepts the original snake_case field names, so an export written
 *   with `scope_spans` / `trace_id` must not slip past a filter that only looks at `scopeSpans` / `traceId`;
 * - it also reads deprecated containers (`deprecatedScopeSpans`, and in older versions
 *   `instrumentationLibrarySpans`, with their metrics and logs equivalents, in both spellings). The envelope is
 *   therefore an allow-list (issue 9 item 1): request, Resource*, Scope*, Metric and its data are rebuilt from
 *   the members listed here, deprecated containers migrated the way the Collector migrates them, everything
 *   else dropped. Inside a span, data point or log record, members the gateway does not know are kept;
 * - JSON.parse rounds integers beyond 2^53, so such numbers (fixed64 timestamps written as numbers) are quoted
 *   before parsing: OTLP/JSON accepts 64-bit integers as decimal strings, so the value reaches the collector
 *   unchanged;
 * - what is forwarded can be read (otlp-json-decodable.ts): a span in the grant's trace holding a value the
 *   Collector's JSON reader refuses (an id of the wrong length, a string where a number goes) is rejected through
 *   partial success, a resource, scope or log record holding one refuses the export.
 */
import {
  ExportPolicy,
  IdentityAttribute,
  ItemIdentityStamp,
  JOB_EXECUTION_SPAN,
  PerGrant,
  SpanSeen,
  deprecatedScopesStandIn,
  grantIdentity,
  keepsEnvelope,
  METRIC_DATA_PLAIN_FIELDS,
  METRIC_PLAIN_FIELDS,
  resourceKeyDropped,
  resourceKeyRefusesSpans,
} from './export-policy';
import { OTLP_ENVELOPES, OtlpEnvelope, OtlpField, STATUS_CODE, jsonName, oneofFields, otlpField } from '../../otlp/otlp-fields';
import { isReservedAttributeKey } from '../../otlp/control-plane-mark';
import type { OtlpSignal } from '../../otlp/otlp-encoding';
import { jsonTextBytes } from '../../otlp/otlp-json-size';
import { OtlpPayloadError } from '../../otlp/otlp-wire';
import type { EncodingEnforcement, RunnerJobEnd, SpanLimits } from './otlp-types';
import { jsonSamplingReason } from '../../otlp/sampling-reason';
import {
  JSON_LOG_RECORD_RULE,
  JSON_RESOURCE_RULE,
  JSON_SCOPE_RULE,
  JSON_SPAN_RULE,
  JsonMessageRule,
  jsonUndecodableReason,
} from '../../otlp/otlp-json-decodable';

type JsonObject = Record<string, unknown>;
type Spelling = [camel: string, snake: string | undefined];

interface SignalFields {
  request: string;
  resources: Spelling;
  container: string;
  scopes: Spelling;
  /** Read by the Collector in place of the scopes when there are none (pdata MigrateTraces etc.). */
  deprecatedScopes: string[];
  scope: string;
  items: Spelling;
}

/** A member's lowerCamelCase name, and its snake_case one where that differs: the Collector reads both. */
function spelling({ name, jsonName }: OtlpField): Spelling {
  return [jsonName, name === jsonName ? undefined : name];
}

function signalFields({ request, containers, container, scopes, deprecatedScopes, scope, items }: OtlpEnvelope): SignalFields {
  const formerly = deprecatedScopes.formerly!;
  return {
    request,
    resources: spelling(containers),
    container,
    scopes: spelling(scopes),
    deprecatedScopes: [deprecatedScopes.jsonName, deprecatedScopes.name, jsonName(formerly), formerly],
    scope,
    items: spelling(items),
  };
}

const SIGNAL_FIELDS: Record<OtlpSignal, SignalFields> = {
  traces: signalFields(OTLP_ENVELOPES.traces),
  metrics: signalFields(OTLP_ENVELOPES.metrics),
  logs: signalFields(OTLP_ENVELOPES.logs),
};

// The scope of a pre-1.0 instrumentation_library_* entry (instrumentation_library), which older collectors read as the scope.
const LEGACY_SCOPE = OTLP_ENVELOPES.traces.scopeScope.formerly!;
const LEGACY_SCOPE_FIELDS = [jsonName(LEGACY_SCOPE), LEGACY_SCOPE];
// schema_url, of containers and scopes alike.
const SCHEMA_URL = spelling(OTLP_ENVELOPES.traces.scopeSchemaUrl);

const METRIC_DATA_FIELDS: ReadonlyArray<Spelling> = oneofFields('Metric', 'data').map(spelling);
const METRIC_PLAIN_MEMBERS: ReadonlyArray<Spelling> = METRIC_PLAIN_FIELDS.map((name) => spelling(otlpField('Metric', name)));
const METRIC_DATA_PLAIN_MEMBERS: ReadonlyArray<Spelling> = METRIC_DATA_PLAIN_FIELDS.map((name) => spelling(otlpField('Sum', name)));
const DATA_POINTS = spelling(otlpField('Sum', 'data_points'));

interface Enforcement {
  signal: OtlpSignal;
  fields: SignalFields;
  traceIdHex: string;
  /** The grant's identity and the sampling reason, written on every resource. */
  identity: readonly JsonObject[];
  /** Set on every admitted span (provisional grants only). */
  traceState: string | undefined;
  itemIdentity: ReadonlyMap<string, JsonObject>;
  limits: SpanLimits;
  policy: ExportPolicy;
  /** The span being walked (reused: one object per export, not one per span). */
  span: JsonSpanSeen;
  /** The JSON text of each kept span, by the rebuilt scope that holds it (traces). */
  spanTexts: Map<JsonObject, string[]>;
  /** The control plane's span ids for the job (GatewayGrant.controlPlaneSpanIds), lowercase hex. */
  controlPlaneSpanIds: readonly string[];
  /** The resource of the container being walked carries a key only the control plane writes: its spans are refused. */
  resourceReserved: boolean;
}

// Frozen: the same objects go into every export of a grant, so nothing may edit them in place.
const jsonGrants = new PerGrant((grant) => {
  const { traceIdHex, resource, items, samplingReason, spanTraceState, controlPlaneSpanIds } = grantIdentity.of(grant);
  return {
    traceIdHex,
    controlPlaneSpanIds,
    identity: Object.freeze([...resource.map(jsonKeyValue), jsonSamplingReason(samplingReason)]),
    traceState: spanTraceState,
    itemIdentity: new Map([...items].map(([key, attribute]) => [key, jsonKeyValue(attribute)])) as ReadonlyMap<string, JsonObject>,
  };
});

export const enforceJsonExport: EncodingEnforcement = (signal, body, grant, spanBudget, spanLimits) => {
  const fields = SIGNAL_FIELDS[signal];
  const root = parseJsonObject(body, fields.request);
  const enforcement: Enforcement = {
    signal,
    fields,
    ...jsonGrants.of(grant),
    limits: spanLimits,
    policy: new ExportPolicy(signal, spanBudget, spanLimits),
    span: new JsonSpanSeen(),
    spanTexts: new Map(),
    resourceReserved: false,
  };

  const kept: JsonObject[] = [];
  for (const entry of arrayField(root, fields.resources, fields.request)) {
    const container = rewriteContainer(enforcement, asObject(entry, fields.container));
    if (container !== undefined) kept.push(container);
  }
  // An export request has one member; any other is dropped with the rest of what the allow-list does not know.
  if (signal === 'traces') return enforcement.policy.result(serializeTraces(kept, enforcement.spanTexts));
  return enforcement.policy.result(serialize({ [fields.resources[0]]: kept }));
};

/** Rebuilds one Resource{Spans,Metrics,Logs}; `undefined` when the spans filter emptied it. */
function rewriteContainer(enforcement: Enforcement, container: JsonObject): JsonObject | undefined {
  const { fields } = enforcement;
  // Before any span: whether the resource refuses them.
  enforcement.resourceReserved = resourceRefusesSpans(container.resource);
  let scopes = arrayField(container, fields.scopes, fields.container);
  if (deprecatedScopesStandIn(scopes.length)) {
    scopes = fields.deprecatedScopes.flatMap((name) => arrayField(container, [name, undefined], fields.container));
  }
  const keptScopes: JsonObject[] = [];
  for (const scope of scopes) {
    const rewritten = rewriteScope(enforcement, asObject(scope, fields.scope));
    if (rewritten !== undefined) keptScopes.push(rewritten);
  }
  if (!keepsEnvelope(scopes.length, keptScopes.length)) return undefined;
  refuseUndecodable(container.resource, JSON_RESOURCE_RULE, `${fields.container}.resource`);
  const rebuilt: JsonObject = { resource: stampResource(container.resource, enforcement.identity, fields.container) };
  rebuilt[fields.scopes[0]] = keptScopes;
  copyPlainField(container, SCHEMA_URL, fields.container, rebuilt);
  refuseUnlessString(rebuilt.schemaUrl, `${fields.container}.schemaUrl`);
  return rebuilt;
}

/** Rebuilds one Scope{Spans,Metrics,Logs}; `undefined` when the spans filter removed every span it had. */
function rewriteScope(enforcement: Enforcement, scope: JsonObject): JsonObject | undefined {
  const { fields, signal } = enforcement;
  const rebuilt: JsonObject = {};
  copyPlainField(scope, ['scope', undefined], fields.scope, rebuilt);
  if (rebuilt.scope === undefined) {
    for (const legacy of LEGACY_SCOPE_FIELDS) copyPlainField(scope, [legacy, undefined], fields.scope, rebuilt, 'scope');
  }
  refuseUndecodable(rebuilt.scope, JSON_SCOPE_RULE, `${fields.scope}.scope`);
  const items = arrayField(scope, fields.items, fields.scope);
  if (signal === 'traces') {
    const texts: string[] = [];
    const kept = items.filter((span) => {
      const text = admitSpan(enforcement, asObject(span, 'Span'));
      if (text !== undefined) texts.push(text);
      return text !== undefined;
    });
    if (!keepsEnvelope(items.length, kept.length)) return undefined;
    rebuilt.spans = kept;
    enforcement.spanTexts.set(rebuilt, texts);
  } else if (signal === 'metrics') {
    rebuilt.metrics = items.map((metric) => rewriteMetric(enforcement, asObject(metric, 'Metric')));
  } else {
    // Log records are counted, never dropped one by one: one the collector cannot read refuses the export.
    for (const record of items) refuseUndecodable(record, JSON_LOG_RECORD_RULE, 'LogRecord');
    for (const record of items) stampItemAttributes(enforcement, asObject(record, 'LogRecord'), 'LogRecord');
    enforcement.policy.countItems(items.length);
    rebuilt.logRecords = items;
  }
  copyPlainField(scope, SCHEMA_URL, fields.scope, rebuilt);
  refuseUnlessString(rebuilt.schemaUrl, `${fields.scope}.schemaUrl`);
  return rebuilt;
}

/** What the walk of one span found, for the policy; and its JSON text when it was measured. */
class JsonSpanSeen extends SpanSeen {
  span: JsonObject = {};
  text: string | undefined = undefined;

  begin(span: JsonObject): void {
    this.restart(0);
    this.span = span;
    this.text = undefined;
  }

  jobExecutionEnd(): RunnerJobEnd | undefined {
    return readJobExecutionEnd(this.span);
  }

  describe(): string {
    const name = typeof this.span.name === 'string' ? this.span.name.slice(0, NAMED_SPAN_CHARACTERS) : '';
    const spanId = this.span.spanId;
    return `${JSON.stringify(name)} (span_id ${typeof spanId === 'string' ? spanId.toLowerCase() : ''})`;
  }
}

/** How much of a refused span's name its partial success repeats. */
const NAMED_SPAN_CHARACTERS = 64;

/**
 * The span walked for the policy's decision, then its identity attributes stamped when it goes on. Returns the
 * span's JSON text when it goes on: written once, both to measure the span and as its part of the forwarded body
 * (a second JSON.stringify per span only to count its bytes cost a fifth of the JSON path, issue 12 profile).
 */
function admitSpan(enforcement: Enforcement, span: JsonObject): string | undefined {
  const seen = enforcement.span;
  seen.begin(span);
  seen.jobExecution = span.name === JOB_EXECUTION_SPAN;
  seen.inGrantedTrace = spanTraceId(span) === enforcement.traceIdHex;
  // Only a span in the grant's trace can go on, so only it is checked for what the collector cannot read.
  if (seen.inGrantedTrace) seen.undecodable = jsonUndecodableReason(span, JSON_SPAN_RULE);
  if (seen.inGrantedTrace && seen.undecodable === undefined) {
    seen.controlPlaneSpanId = isControlPlaneSpanId(enforcement, field(span, 'spanId', 'span_id', 'Span'));
    seen.reservedAttribute = enforcement.resourceReserved || carriesReservedAttribute(span);
    measureSpan(seen, span, enforcement.limits);
  }
  if (!enforcement.policy.admitSpan(seen)) return undefined;
  const { text } = seen;
  const stamped = stampItemAttributes(enforcement, span, 'Span');
  if (enforcement.traceState !== undefined) {
    // The Collector reads either spelling: the snake_case one must not survive beside the value written here.
    delete span.trace_state;
    span.traceState = enforcement.traceState;
    return stringify(span);
  }
  return stamped || text === undefined ? stringify(span) : text;
}

/** Whether the span id (hex, either case: the Collector reads both) is one of the control plane's for the job. */
function isControlPlaneSpanId(enforcement: Enforcement, spanId: unknown): boolean {
  if (typeof spanId !== 'string' || enforcement.controlPlaneSpanIds.length === 0) return false;
  return enforcement.controlPlaneSpanIds.includes(spanId.toLowerCase());
}

/** Whether the span carries an attribute only the control plane writes (control-plane-mark.ts). */
function carriesReservedAttribute(span: JsonObject): boolean {
  const attributes = span.attributes;
  if (!Array.isArray(attributes)) return false;
  for (const attribute of attributes) {
    const key = (attribute as JsonObject | null)?.key;
    if (typeof key === 'string' && isReservedAttributeKey(key)) return true;
  }
  return false;
}

/** Whether a resource carries a key that refuses the spans under it (export-policy.ts resourceKeyRefusesSpans). */
function resourceRefusesSpans(resource: unknown): boolean {
  const attributes = (resource as JsonObject | null | undefined)?.attributes;
  if (!Array.isArray(attributes)) return false;
  return attributes.some((attribute) => {
    const key = (attribute as JsonObject | null)?.key;
    return typeof key === 'string' && resourceKeyRefusesSpans(key);
  });
}

/** Measures as far as the limits need (SpanSeen): the attribute count, then each value, then the span's text. */
function measureSpan(seen: JsonSpanSeen, span: JsonObject, limits: SpanLimits): void {
  const attributes = arrayField(span, ['attributes', undefined], 'Span');
  seen.attributes = attributes.length;
  if (attributes.length > limits.maxAttributes) return;
  for (const attribute of attributes) {
    const value = asObject(attribute, 'Span.attributes[]').value;
    if (value === undefined || value === null) continue;
    const bytes = attributeValueBytes(value, limits.maxAttributeValueBytes);
    if (bytes > seen.largestAttributeValueBytes) {
      seen.largestAttributeValueBytes = bytes;
      if (bytes > limits.maxAttributeValueBytes) return;
    }
  }
  if (!Number.isFinite(limits.maxBytes)) return;
  const text = stringify(span);
  seen.text = text;
  // A UTF-16 code unit is 1 to 3 bytes of UTF-8: most spans are decided without counting.
  seen.bytes = text.length * 3 <= limits.maxBytes || text.length > limits.maxBytes ? text.length : Buffer.byteLength(text);
}

/**
 * The end of a `job_execution` span the walk admitted: its end time, `ci.job.status`, else failed for an Error
 * status, and its parent. Undefined when its end time is not an integer: this is a side look, and the export goes on.
 */
function readJobExecutionEnd(span: JsonObject): RunnerJobEnd | undefined {
  const end = span.endTimeUnixNano ?? span.end_time_unix_nano ?? '0';
  if ((typeof end !== 'string' && typeof end !== 'number') || !/^\d+$/.test(String(end))) return undefined;
  const parentSpanId = span.parentSpanId ?? span.parent_span_id;
  const attributes = Array.isArray(span.attributes) ? (span.attributes as unknown[]) : [];
  const status = attributes.find((attribute) => (attribute as JsonObject | null)?.key === 'ci.job.status') as JsonObject | undefined;
  const statusValue = (status?.value as JsonObject | undefined)?.stringValue;
  const failed = (span.status as JsonObject | undefined)?.code === STATUS_CODE.ERROR;
  return {
    parentSpanId: typeof parentSpanId === 'string' ? parentSpanId.toLowerCase() : '',
    endMs: Number(BigInt(String(end)) / 1_000_000n),
    status: typeof statusValue === 'string' ? statusValue : failed ? 'failed' : undefined,
  };
}

/**
 * A string or bytes value counts its content, an array or map its JSON text, a scalar its text.
 * Cheap unless it could be over `limit`.
 */
function attributeValueBytes(value: unknown, limit: number): number {
  const anyValue = asObject(value, 'AnyValue');
  const text = anyValue.stringValue ?? anyValue.string_value;
  // A UTF-16 code unit is at most 3 bytes of UTF-8.
  if (typeof text === 'string') return text.length * 3 <= limit ? text.length : Buffer.byteLength(text);
  const bytes = anyValue.bytesValue ?? anyValue.bytes_value;
  if (typeof bytes === 'string') return Buffer.from(bytes, 'base64').length;
  const nested = anyValue.arrayValue ?? anyValue.array_value ?? anyValue.kvlistValue ?? anyValue.kvlist_value;
  if (nested !== undefined) return measure(nested);
  let scalars = 0;
  for (const scalar of Object.values(anyValue)) scalars += String(scalar).length;
  return scalars;
}

function spanTraceId(span: JsonObject): string {
  const traceId = field(span, 'traceId', 'trace_id', 'Span');
  if (traceId === undefined || traceId === null) return '';
  if (typeof traceId !== 'string') throw new OtlpPayloadError('Span.traceId must be a hex string');
  // Hex is case-insensitive for the collector's decoder, so an uppercase copy of the job's id is the same trace.
  return traceId.toLowerCase();
}

/**
 * Overwrites the identity attributes an item (span, data point, log record) carries with the grant's: the first
 * occurrence of each key becomes the grant's value, in place; later occurrences are dropped. True when it did.
 */
function stampItemAttributes(enforcement: Enforcement, item: JsonObject, where: string): boolean {
  const attributes = arrayField(item, ['attributes', undefined], where);
  const identityOf = (attribute: unknown) => {
    const key = asObject(attribute, `${where}.attributes[]`).key;
    return typeof key === 'string' ? enforcement.itemIdentity.get(key) : undefined;
  };
  // Most items carry no identity key: they are left alone without a copy.
  if (!attributes.some((attribute) => identityOf(attribute) !== undefined)) return false;
  const stamp = new ItemIdentityStamp();
  const result: unknown[] = [];
  for (const attribute of attributes) {
    const identity = identityOf(attribute);
    if (identity === undefined) result.push(attribute);
    else if (stamp.overwrites(identity.key as string)) result.push(identity);
  }
  item.attributes = result;
  return true;
}

/** Rebuilds a Metric from the members it may have, counting and stamping its data points. */
function rewriteMetric(enforcement: Enforcement, metric: JsonObject): JsonObject {
  const rebuilt: JsonObject = {};
  for (const member of METRIC_PLAIN_MEMBERS) copyPlainField(metric, member, 'Metric', rebuilt);
  let dataFields = 0;
  for (const [camel, snake] of METRIC_DATA_FIELDS) {
    const data = field(metric, camel, snake, 'Metric');
    if (data === undefined || data === null) continue;
    if (++dataFields > 1) {
      throw new OtlpPayloadError('Metric has more than one of gauge, sum, histogram, exponentialHistogram, summary');
    }
    const where = `Metric.${camel}`;
    const dataObject = asObject(data, where);
    const points = arrayField(dataObject, DATA_POINTS, where);
    for (const point of points) stampItemAttributes(enforcement, asObject(point, `${where}.dataPoints[]`), `${where}.dataPoints[]`);
    enforcement.policy.countItems(points.length);
    const rebuiltData: JsonObject = { dataPoints: points };
    for (const member of METRIC_DATA_PLAIN_MEMBERS) copyPlainField(dataObject, member, where, rebuiltData);
    rebuilt[camel] = rebuiltData;
  }
  return rebuilt;
}

/**
 * What the resource, scope or log record an export shares among its items holds must be readable by the collector:
 * otherwise the export is refused as a bad request (SPEC §6), since no one item is at fault.
 */
function refuseUndecodable(message: unknown, rule: JsonMessageRule, where: string): void {
  const reason = jsonUndecodableReason(message, rule);
  if (reason !== undefined) throw new OtlpPayloadError(`${where}: ${reason}, which the collector cannot read`);
}

function refuseUnlessString(value: unknown, where: string): void {
  if (value !== undefined && value !== null && typeof value !== 'string') throw new OtlpPayloadError(`${where} must be a string`);
}

function stampResource(resource: unknown, identity: readonly JsonObject[], where: string): JsonObject {
  if (resource === undefined || resource === null) return { attributes: identity };
  const resourceObject = asObject(resource, `${where}.resource`);
  const attributes = arrayField(resourceObject, ['attributes', undefined], 'Resource');
  const kept = attributes.filter((attribute) => {
    const keyValue = asObject(attribute, 'Resource.attributes[]');
    return !(typeof keyValue.key === 'string' && resourceKeyDropped(keyValue.key));
  });
  resourceObject.attributes = kept.concat(identity);
  return resourceObject;
}

function jsonKeyValue({ key, value }: IdentityAttribute): JsonObject {
  // int64 as a decimal string: the canonical proto3 JSON form, exact for any id.
  const anyValue = Object.freeze(value.kind === 'int' ? { intValue: String(value.int) } : { stringValue: value.string });
  return Object.freeze({ key, value: anyValue });
}

/** Copies a member the allow-list keeps as it is, under its lowerCamelCase name (or `as`). */
function copyPlainField(from: JsonObject, [camel, snake]: Spelling, where: string, to: JsonObject, as = camel): void {
  const value = field(from, camel, snake, where);
  if (value !== undefined) to[as] = value;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function parseJsonObject(body: Buffer, what: string): JsonObject {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new OtlpPayloadError('JSON body is not valid UTF-8');
  }
  // First as if every lossy-looking token were outside strings, which spares walking the strings. A token that
  // was in fact inside one always leaves invalid JSON (the inserted quote ends the string and a number follows
  // it), so a parse that succeeds proves the guess; a failed one is redone exactly, with the exact error.
  const guessed = quoteLossyNumbers(text, true);
  let parsed: unknown;
  try {
    parsed = JSON.parse(guessed);
  } catch (error) {
    if (guessed === text) throw invalidJson(error);
    try {
      parsed = JSON.parse(quoteLossyNumbers(text));
    } catch (exactError) {
      throw invalidJson(exactError);
    }
  }
  return asObject(parsed, what);
}

function invalidJson(error: unknown): OtlpPayloadError {
  return new OtlpPayloadError(`body is not valid JSON: ${(error as Error).message}`);
}

function serialize(root: JsonObject): Buffer {
  return Buffer.from(stringify(root), 'utf8');
}

/**
 * What `serialize` writes for the rebuilt trace request, with the kept spans' texts from admission, written
 * straight into the buffer (joining them into one string first and encoding that copied the text twice).
 */
function serializeTraces(containers: JsonObject[], spanTexts: Map<JsonObject, string[]>): Buffer {
  const pieces: string[] = ['{"resourceSpans":'];
  pushArray(pieces, containers, (container) =>
    pushObject(pieces, container, (key, scopes) => {
      if (key !== 'scopeSpans') return false;
      pushArray(pieces, scopes as JsonObject[], (scope) =>
        pushObject(pieces, scope, (scopeKey) => {
          if (scopeKey !== 'spans') return false;
          pushArray(pieces, spanTexts.get(scope)!, (text) => pieces.push(text));
          return true;
        }),
      );
      return true;
    }),
  );
  pieces.push('}');
  return utf8Buffer(pieces);
}

/** An object as JSON.stringify writes it; `member` writes the members it knows and says so. */
function pushObject(pieces: string[], object: JsonObject, member: (key: string, value: unknown) => boolean): void {
  let separator = '{';
  for (const key of Object.keys(object)) {
    const value = object[key];
    if (value === undefined) continue;
    pieces.push(separator, JSON.stringify(key), ':');
    if (!member(key, value)) pieces.push(stringify(value));
    separator = ',';
  }
  pieces.push(separator === '{' ? '{}' : '}');
}

function pushArray<T>(pieces: string[], elements: readonly T[], element: (value: T) => void): void {
  pieces.push('[');
  for (let i = 0; i < elements.length; i++) {
    if (i > 0) pieces.push(',');
    element(elements[i]);
  }
  pieces.push(']');
}

function utf8Buffer(pieces: string[]): Buffer {
  let bytes = 0;
  for (const piece of pieces) bytes += Buffer.byteLength(piece);
  const buffer = Buffer.allocUnsafe(bytes);
  let offset = 0;
  for (const piece of pieces) offset += buffer.write(piece, offset);
  return buffer;
}

function stringify(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    // JSON.stringify recurses: a hostile nesting depth ends here rather than in a crash.
    throw new OtlpPayloadError(`JSON body cannot be re-encoded: ${(error as Error).message}`);
  }
}

/** What an attribute value weighs as the JSON text the gateway forwards (the exact UTF-8 length of its stringify). */
function measure(value: unknown): number {
  try {
    return jsonTextBytes(value);
  } catch (error) {
    // As stringify: a hostile nesting depth is a bad request, not a crash.
    throw new OtlpPayloadError(`JSON body cannot be re-encoded: ${(error as Error).message}`);
  }
}

// A number token in a value position (after `:`, `,` or `[`, the only places a JSON value starts inside an
// object or array) that JSON.parse could change: an integer beyond 2^53 has 16 digits or more, a number that
// overflows to Infinity a 3-digit exponent or an integer part of over 200 digits. Anchored on the value position,
// so the ids and timestamps OTel SDKs send as strings never match. Group 1 is the token, up to the match's end.
const LOSSY_NUMBER_CANDIDATE = /[:,[][ \t\n\r]*(-?(?:\d{16}|\d+(?:\.\d+)?[eE]\+?\d{3}))/g;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const JSON_INTEGER = /^-?\d+$/;

/**
 * Quotes the number tokens that would not survive a JSON.parse/JSON.stringify round trip, in linear time: a native
 * search finds the candidates, and only a token that would change is checked for being inside a string, by
 * walking the strings before it from where the last check stopped. With `outsideStrings` that walk is skipped:
 * see parseJsonObject. (-0 is left alone: quoting it would break an enum field, and no OTLP field gives -0.0
 * meaning.)
 */
export function quoteLossyNumbers(text: string, outsideStrings = false): string {
  const candidates = LOSSY_NUMBER_CANDIDATE;
  candidates.lastIndex = 0;
  const length = text.length;
  let parts: string[] | undefined;
  let copied = 0;
  // Strings are walked once, in text order, and only as far as a lossy token needs: the last one walked ends
  // at stringEnd, the next starts at nextQuote (-1: there is none; -2: not searched yet).
  let stringEnd = 0;
  let nextQuote = -2;
  let match: RegExpExecArray | null;
  while ((match = candidates.exec(text)) !== null) {
    let end = match.index + match[0].length;
    const start = end - match[1].length;
    while (end < length && isNumberChar(text.charCodeAt(end))) end++;
    candidates.lastIndex = end;
    const token = text.slice(start, end);
    if (!isLossy(token)) continue;
    if (!outsideStrings) {
      if (nextQuote === -2) nextQuote = text.indexOf('"');
      while (nextQuote !== -1 && nextQuote < start) {
        stringEnd = endOfString(text, nextQuote);
        nextQuote = text.indexOf('"', stringEnd);
      }
      // The last string walked opened before the token: the token is in it unless that string ended before it.
      if (start < stringEnd) continue;
    }
    parts ??= [];
    parts.push(text.slice(copied, start), '"', token, '"');
    copied = end;
  }
  if (parts === undefined) return text;
  parts.push(text.slice(copied));
  return parts.join('');
}

function endOfString(text: string, openingQuote: number): number {
  let from = openingQuote + 1;
  for (;;) {
    const quote = text.indexOf('"', from);
    if (quote < 0) return text.length;
    let backslashes = 0;
    for (let k = quote - 1; text.charCodeAt(k) === 0x5c; k--) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

function isNumberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}

function isLossy(token: string): boolean {
  if (!JSON_NUMBER.test(token)) return false;
  const value = Number(token);
  if (!Number.isFinite(value)) return true;
  return JSON_INTEGER.test(token) && !Number.isSafeInteger(value);
}

function hasOwn(object: JsonObject, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(object, key);
}

function asObject(value: unknown, where: string): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OtlpPayloadError(`${where} must be a JSON object`);
  }
  return value as JsonObject;
}

/** Reads a field under its lowerCamelCase name, folding in the snake_case spelling the collector also reads. */
function field(object: JsonObject, camel: string, snake: string | undefined, where: string): unknown {
  if (snake !== undefined && hasOwn(object, snake)) {
    if (hasOwn(object, camel)) throw new OtlpPayloadError(`${where} has both "${camel}" and "${snake}"`);
    object[camel] = object[snake];
    delete object[snake];
  }
  return object[camel];
}

function arrayField(object: JsonObject, [camel, snake]: Spelling, where: string): unknown[] {
  const value = field(object, camel, snake, where);
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new OtlpPayloadError(`${where}.${camel} must be a JSON array`);
  return value;
}
