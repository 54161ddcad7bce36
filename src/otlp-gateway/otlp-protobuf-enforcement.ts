/**
 * SPEC §6 enforcement on OTLP/HTTP protobuf bodies by editing the wire format in place.
 *
 * Chosen over decoding with protobufjs and re-encoding (bench/otlp-payload.bench.js): only the envelope is
 * walked (request → Resource* → Scope* → item) and every byte the gateway does not change is copied as a slice
 * of the request, so it is both faster and lossless: a protobufjs round trip silently drops every field its
 * schema does not know, which would break "never lose data it was not asked to drop".
 *
 * Field numbers are those of opentelemetry-proto v1 (collector/*\/v1/*_service.proto, trace/v1/trace.proto,
 * metrics/v1/metrics.proto, logs/v1/logs.proto, resource/v1/resource.proto, common/v1/common.proto).
 */
import {
  IDENTITY_ATTRIBUTE_KEYS,
  SpanAdmission,
  countedResult,
  grantTraceIdHex,
  identityAttributes,
} from './otlp-identity';
import type { EnforcedExport, GatewayGrant, OtlpSignal } from './otlp-payload';
import {
  ChunkList,
  OtlpPayloadError,
  WireReader,
  encodeBytesField,
  encodeStringField,
  encodeVarintField,
} from './otlp-wire';

// Export*ServiceRequest.resource_{spans,metrics,logs}
const REQUEST_RESOURCES = 1;
// Resource{Spans,Metrics,Logs}
const CONTAINER_RESOURCE = 1;
const CONTAINER_SCOPES = 2;
// ResourceSpans `reserved 1000`: the pre-1.0 instrumentation_library_spans. Collectors that still read it
// would accept spans from there that this gateway never looked at.
const CONTAINER_LEGACY_SCOPES = 1000;
// Scope{Spans,Metrics,Logs}.{spans,metrics,log_records}
const SCOPE_ITEMS = 2;
const SPAN_TRACE_ID = 1;
// Metric.data oneof: gauge, sum, histogram, exponential_histogram, summary; each has data_points = 1.
const METRIC_DATA_FIELDS: ReadonlySet<number> = new Set([5, 7, 9, 10, 11]);
const METRIC_DATA_POINTS = 1;
const RESOURCE_ATTRIBUTES = 1;
const KEY_VALUE_KEY = 1;
const KEY_VALUE_VALUE = 2;
const ANY_VALUE_STRING = 1;
const ANY_VALUE_INT = 3;

const SIGNAL_NAMES: Record<OtlpSignal, { container: string; scope: string; item: string }> = {
  traces: { container: 'ResourceSpans', scope: 'ScopeSpans', item: 'Span' },
  metrics: { container: 'ResourceMetrics', scope: 'ScopeMetrics', item: 'Metric' },
  logs: { container: 'ResourceLogs', scope: 'ScopeLogs', item: 'LogRecord' },
};

interface Enforcement {
  signal: OtlpSignal;
  body: Buffer;
  traceId: Buffer;
  /** Resource.attributes fields carrying the grant's identity, appended to every resource. */
  identity: Buffer;
  admission: SpanAdmission;
  /** Data points or log records seen (metrics, logs). */
  items: number;
}

export function enforceProtobufExport(
  signal: OtlpSignal,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number,
): EnforcedExport {
  const enforcement: Enforcement = {
    signal,
    body,
    traceId: Buffer.from(grantTraceIdHex(grant), 'hex'),
    identity: encodeIdentityAttributes(grant),
    admission: new SpanAdmission(spanBudget),
    items: 0,
  };
  const out = new ChunkList(body);
  const reader = new WireReader(body, 0, body.length);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === REQUEST_RESOURCES) {
      const end = reader.expectLengthDelimited(SIGNAL_NAMES[signal].container);
      const container = rewriteContainer(enforcement, reader.pos, end);
      if (container !== undefined) out.pushMessage(REQUEST_RESOURCES, container);
      reader.pos = end;
    } else {
      reader.skipValue();
      out.copy(fieldStart, reader.pos);
    }
  }
  const forwarded = out.toBuffer();
  return signal === 'traces'
    ? enforcement.admission.result(forwarded)
    : countedResult(forwarded, enforcement.items);
}

/**
 * Rewrites one Resource{Spans,Metrics,Logs}; `undefined` when the spans filter emptied it.
 * Every occurrence of `resource` is merged into one (protobuf merges repeated occurrences of a message field,
 * so splitting attributes across two occurrences must not hide a spoofed key), written first.
 */
function rewriteContainer(enforcement: Enforcement, start: number, end: number): ChunkList | undefined {
  const { body, signal } = enforcement;
  const names = SIGNAL_NAMES[signal];
  const resource = new ChunkList(body);
  const rest = new ChunkList(body);
  let scopesSeen = 0;
  let scopesKept = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === CONTAINER_RESOURCE) {
      const resourceEnd = reader.expectLengthDelimited('Resource');
      stripIdentityAttributes(body, reader.pos, resourceEnd, resource);
      reader.pos = resourceEnd;
    } else if (reader.fieldNumber === CONTAINER_SCOPES) {
      const scopeEnd = reader.expectLengthDelimited(names.scope);
      scopesSeen++;
      if (signal === 'traces') {
        const scope = filterScopeSpans(enforcement, reader.pos, scopeEnd);
        if (scope === 'unchanged') rest.copy(fieldStart, scopeEnd);
        else if (scope !== 'emptied') rest.pushMessage(CONTAINER_SCOPES, scope);
        if (scope !== 'emptied') scopesKept++;
      } else {
        enforcement.items +=
          signal === 'metrics'
            ? countScopeMetrics(body, reader.pos, scopeEnd)
            : countScopeLogs(body, reader.pos, scopeEnd);
        rest.copy(fieldStart, scopeEnd);
        scopesKept++;
      }
      reader.pos = scopeEnd;
    } else if (reader.fieldNumber === CONTAINER_LEGACY_SCOPES && signal === 'traces') {
      throw new OtlpPayloadError(
        'ResourceSpans field 1000 (instrumentation_library_spans, removed from OTLP) is not accepted; send scope_spans',
      );
    } else {
      reader.skipValue();
      rest.copy(fieldStart, reader.pos);
    }
  }
  // Scopes the filter emptied leave a resource that describes nothing: dropped with them.
  if (scopesSeen > 0 && scopesKept === 0) return undefined;
  resource.push(enforcement.identity);
  const container = new ChunkList(body);
  container.pushMessage(CONTAINER_RESOURCE, resource);
  container.pushAll(rest);
  return container;
}

/** Copies a Resource's fields except KeyValues whose key the gateway owns. */
function stripIdentityAttributes(body: Buffer, start: number, end: number, resource: ChunkList): void {
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === RESOURCE_ATTRIBUTES) {
      const attributeEnd = reader.expectLengthDelimited('Resource.attributes');
      if (!IDENTITY_ATTRIBUTE_KEYS.has(keyValueKey(body, reader.pos, attributeEnd))) {
        resource.copy(fieldStart, attributeEnd);
      }
      reader.pos = attributeEnd;
    } else {
      reader.skipValue();
      resource.copy(fieldStart, reader.pos);
    }
  }
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

type ScopeOutcome = 'unchanged' | 'emptied' | ChunkList;

function filterScopeSpans(enforcement: Enforcement, start: number, end: number): ScopeOutcome {
  const { body, admission, traceId } = enforcement;
  const scope = new ChunkList(body);
  let kept = 0;
  let dropped = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === SCOPE_ITEMS) {
      const spanEnd = reader.expectLengthDelimited('Span');
      if (admission.admit(spanInTrace(body, reader.pos, spanEnd, traceId))) {
        scope.copy(fieldStart, spanEnd);
        kept++;
      } else {
        dropped++;
      }
      reader.pos = spanEnd;
    } else {
      reader.skipValue();
      scope.copy(fieldStart, reader.pos);
    }
  }
  if (dropped === 0) return 'unchanged';
  return kept === 0 ? 'emptied' : scope;
}

function spanInTrace(body: Buffer, start: number, end: number, traceId: Buffer): boolean {
  let idStart = -1;
  let idEnd = -1;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === SPAN_TRACE_ID) {
      idEnd = reader.expectLengthDelimited('Span.trace_id');
      idStart = reader.pos;
      reader.pos = idEnd;
    } else {
      reader.skipValue();
    }
  }
  if (idEnd - idStart !== traceId.length) return false;
  for (let i = 0; i < traceId.length; i++) {
    if (body[idStart + i] !== traceId[i]) return false;
  }
  return true;
}

function countScopeMetrics(body: Buffer, start: number, end: number): number {
  let points = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === SCOPE_ITEMS) {
      const metricEnd = reader.expectLengthDelimited('Metric');
      points += countMetricDataPoints(body, reader.pos, metricEnd);
      reader.pos = metricEnd;
    } else {
      reader.skipValue();
    }
  }
  return points;
}

function countMetricDataPoints(body: Buffer, start: number, end: number): number {
  // Metric.data is a oneof: when several members occur, the last one is what a decoder keeps (occurrences of
  // the same member merge, so their points add up).
  let dataField = 0;
  let points = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (METRIC_DATA_FIELDS.has(reader.fieldNumber)) {
      const field = reader.fieldNumber;
      const dataEnd = reader.expectLengthDelimited('Metric data');
      const found = countFields(body, reader.pos, dataEnd, METRIC_DATA_POINTS, 'data point');
      points = field === dataField ? points + found : found;
      dataField = field;
      reader.pos = dataEnd;
    } else {
      reader.skipValue();
    }
  }
  return points;
}

function countScopeLogs(body: Buffer, start: number, end: number): number {
  return countFields(body, start, end, SCOPE_ITEMS, 'LogRecord');
}

function countFields(body: Buffer, start: number, end: number, fieldNumber: number, name: string): number {
  let count = 0;
  const reader = new WireReader(body, start, end);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === fieldNumber) {
      reader.pos = reader.expectLengthDelimited(name);
      count++;
    } else {
      reader.skipValue();
    }
  }
  return count;
}

function encodeIdentityAttributes(grant: GatewayGrant): Buffer {
  const fields = identityAttributes(grant).map(({ key, value }) => {
    const anyValue =
      value.kind === 'int'
        ? encodeVarintField(ANY_VALUE_INT, value.int)
        : encodeStringField(ANY_VALUE_STRING, value.string);
    const keyValue = Buffer.concat([
      encodeStringField(KEY_VALUE_KEY, key),
      encodeBytesField(KEY_VALUE_VALUE, anyValue),
    ]);
    return encodeBytesField(RESOURCE_ATTRIBUTES, keyValue);
  });
  return Buffer.concat(fields);
}
