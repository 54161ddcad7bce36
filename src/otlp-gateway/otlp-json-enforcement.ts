/**
 * SPEC §6 enforcement on OTLP/HTTP JSON bodies (OTLP spec "JSON Protobuf Encoding": lowerCamelCase keys,
 * hex trace and span ids, enums as integers, 64-bit integers as strings or numbers).
 *
 * The body is parsed, edited in place and serialized again, so every member the gateway does not touch keeps
 * its value. Two parser differences with the collector are closed on purpose:
 * - the collector's pdata JSON reader also accepts the original snake_case field names, so an export written
 *   with `scope_spans` / `trace_id` must not slip past a filter that only looks at `scopeSpans` / `traceId`;
 * - JSON.parse rounds integers beyond 2^53, so such numbers (fixed64 timestamps written as numbers) are quoted
 *   before parsing: OTLP/JSON accepts 64-bit integers as decimal strings, so the value reaches the collector
 *   unchanged.
 */
import {
  IDENTITY_ATTRIBUTE_KEYS,
  SpanAdmission,
  countedResult,
  grantTraceIdHex,
  identityAttributes,
} from './otlp-identity';
import type { EnforcedExport, GatewayGrant, OtlpSignal } from './otlp-payload';
import { OtlpPayloadError } from './otlp-wire';

type JsonObject = Record<string, unknown>;

interface SignalFields {
  request: string;
  resources: [camel: string, snake: string];
  container: string;
  scopes: [camel: string, snake: string];
  scope: string;
  items: [camel: string, snake: string | undefined];
}

const SIGNAL_FIELDS: Record<OtlpSignal, SignalFields> = {
  traces: {
    request: 'ExportTraceServiceRequest',
    resources: ['resourceSpans', 'resource_spans'],
    container: 'ResourceSpans',
    scopes: ['scopeSpans', 'scope_spans'],
    scope: 'ScopeSpans',
    items: ['spans', undefined],
  },
  metrics: {
    request: 'ExportMetricsServiceRequest',
    resources: ['resourceMetrics', 'resource_metrics'],
    container: 'ResourceMetrics',
    scopes: ['scopeMetrics', 'scope_metrics'],
    scope: 'ScopeMetrics',
    items: ['metrics', undefined],
  },
  logs: {
    request: 'ExportLogsServiceRequest',
    resources: ['resourceLogs', 'resource_logs'],
    container: 'ResourceLogs',
    scopes: ['scopeLogs', 'scope_logs'],
    scope: 'ScopeLogs',
    items: ['logRecords', 'log_records'],
  },
};

// Pre-1.0 container names that old collectors still read; this gateway does not look inside them.
const LEGACY_SCOPE_FIELDS = ['instrumentationLibrarySpans', 'instrumentation_library_spans'];

const METRIC_DATA_FIELDS: ReadonlyArray<[camel: string, snake: string | undefined]> = [
  ['gauge', undefined],
  ['sum', undefined],
  ['histogram', undefined],
  ['exponentialHistogram', 'exponential_histogram'],
  ['summary', undefined],
];

export function enforceJsonExport(
  signal: OtlpSignal,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number,
): EnforcedExport {
  const fields = SIGNAL_FIELDS[signal];
  const root = parseJsonObject(body, fields.request);
  const traceIdHex = grantTraceIdHex(grant);
  const identity = identityAttributes(grant);
  const admission = new SpanAdmission(spanBudget);
  let items = 0;

  const resources = arrayField(root, fields.resources, fields.request);
  const keptResources: unknown[] = [];
  for (const entry of resources) {
    const container = asObject(entry, fields.container);
    const scopes = arrayField(container, fields.scopes, fields.container);
    if (signal === 'traces') {
      for (const legacy of LEGACY_SCOPE_FIELDS) {
        if (hasOwn(container, legacy)) {
          throw new OtlpPayloadError(
            `ResourceSpans.${legacy} was removed from OTLP and is not accepted; send scopeSpans`,
          );
        }
      }
      const keptScopes = scopes.filter((scope) =>
        filterScopeSpans(asObject(scope, fields.scope), traceIdHex, admission),
      );
      // Scopes the filter emptied leave a resource that describes nothing: dropped with them.
      if (scopes.length > 0 && keptScopes.length === 0) continue;
      if (keptScopes.length !== scopes.length) container[fields.scopes[0]] = keptScopes;
    } else {
      for (const scope of scopes) {
        const scopeObject = asObject(scope, fields.scope);
        const scopeItems = arrayField(scopeObject, fields.items, fields.scope);
        items += signal === 'metrics' ? countMetricDataPoints(scopeItems) : scopeItems.length;
      }
    }
    stampResource(container, identity, fields.container);
    keptResources.push(container);
  }
  if (keptResources.length !== resources.length) root[fields.resources[0]] = keptResources;

  const forwarded = serialize(root);
  return signal === 'traces' ? admission.result(forwarded) : countedResult(forwarded, items);
}

/** Keeps the spans the admission lets through; false when it removed every span of a non-empty scope. */
function filterScopeSpans(scope: JsonObject, traceIdHex: string, admission: SpanAdmission): boolean {
  const spans = arrayField(scope, ['spans', undefined], 'ScopeSpans');
  const kept = spans.filter((span) => admission.admit(spanTraceId(asObject(span, 'Span')) === traceIdHex));
  if (kept.length === spans.length) return true;
  scope.spans = kept;
  return kept.length > 0;
}

function spanTraceId(span: JsonObject): string {
  const traceId = field(span, 'traceId', 'trace_id', 'Span');
  if (traceId === undefined || traceId === null) return '';
  if (typeof traceId !== 'string') throw new OtlpPayloadError('Span.traceId must be a hex string');
  // Hex is case-insensitive for the collector's decoder, so an uppercase copy of the job's id is the same trace.
  return traceId.toLowerCase();
}

function countMetricDataPoints(metrics: unknown[]): number {
  let points = 0;
  for (const entry of metrics) {
    const metric = asObject(entry, 'Metric');
    let dataFields = 0;
    for (const [camel, snake] of METRIC_DATA_FIELDS) {
      const data = field(metric, camel, snake, 'Metric');
      if (data === undefined || data === null) continue;
      if (++dataFields > 1) {
        throw new OtlpPayloadError('Metric has more than one of gauge, sum, histogram, exponentialHistogram, summary');
      }
      points += arrayField(asObject(data, `Metric.${camel}`), ['dataPoints', 'data_points'], `Metric.${camel}`).length;
    }
  }
  return points;
}

function stampResource(container: JsonObject, identity: ReturnType<typeof identityAttributes>, where: string): void {
  const stamped = identity.map(({ key, value }) => ({
    key,
    // int64 as a decimal string: the canonical proto3 JSON form, exact for any id.
    value: value.kind === 'int' ? { intValue: String(value.int) } : { stringValue: value.string },
  }));
  const resource = container.resource;
  if (resource === undefined || resource === null) {
    container.resource = { attributes: stamped };
    return;
  }
  const resourceObject = asObject(resource, `${where}.resource`);
  const attributes = arrayField(resourceObject, ['attributes', undefined], 'Resource');
  const kept = attributes.filter((attribute) => {
    const keyValue = asObject(attribute, 'Resource.attributes[]');
    return !(typeof keyValue.key === 'string' && IDENTITY_ATTRIBUTE_KEYS.has(keyValue.key));
  });
  resourceObject.attributes = kept.concat(stamped);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function parseJsonObject(body: Buffer, what: string): JsonObject {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new OtlpPayloadError('JSON body is not valid UTF-8');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(quoteLossyNumbers(text));
  } catch (error) {
    throw new OtlpPayloadError(`body is not valid JSON: ${(error as Error).message}`);
  }
  return asObject(parsed, what);
}

function serialize(root: JsonObject): Buffer {
  try {
    return Buffer.from(JSON.stringify(root), 'utf8');
  } catch (error) {
    // JSON.stringify recurses: a hostile nesting depth ends here rather than in a crash.
    throw new OtlpPayloadError(`JSON body cannot be re-encoded: ${(error as Error).message}`);
  }
}

// A number token right after `:`, `,` or `[` (the only places a JSON value starts inside an object or array)
// that JSON.parse could change: 16+ digits or an exponent. False positives inside strings only cost the slow
// path below. (-0 is left alone: quoting it would break an enum field, and no OTLP field gives -0.0 meaning.)
const LOSSY_NUMBER_HINT = /[:,[]\s*-?(?:\d{16}|\d+(?:\.\d*)?[eE])/;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const JSON_INTEGER = /^-?\d+$/;

/** Quotes number tokens that would not survive a JSON.parse/JSON.stringify round trip. Linear time. */
export function quoteLossyNumbers(text: string): string {
  if (!LOSSY_NUMBER_HINT.test(text)) return text;
  const parts: string[] = [];
  let copied = 0;
  let i = 0;
  const length = text.length;
  while (i < length) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = endOfString(text, i);
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      let j = i + 1;
      while (j < length && isNumberChar(text.charCodeAt(j))) j++;
      const token = text.slice(i, j);
      if (isLossy(token)) {
        parts.push(text.slice(copied, i), '"', token, '"');
        copied = j;
      }
      i = j;
    } else {
      i++;
    }
  }
  if (copied === 0) return text;
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

function arrayField(object: JsonObject, [camel, snake]: [string, string | undefined], where: string): unknown[] {
  const value = field(object, camel, snake, where);
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new OtlpPayloadError(`${where}.${camel} must be a JSON array`);
  return value;
}
