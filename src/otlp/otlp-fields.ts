/**
 * The one table of OTLP v1's messages: for each, its fields' names, numbers and types, as opentelemetry-proto
 * declares them (common/v1/common.proto, resource/v1/resource.proto, trace/v1/trace.proto, metrics/v1/metrics.proto,
 * logs/v1/logs.proto, collector/{trace,metrics,logs}/v1/*_service.proto) and google/rpc/status.proto. Everything here
 * that reads or writes OTLP by hand takes its field numbers from it: the export policy's protobuf and JSON walkers,
 * what the Collector can decode (otlp-decodable.ts, otlp-json-decodable.ts), the sampling-reason slots and the
 * response bodies. proto/otlp.proto says the same to protobufjs (tests, benches); otlp-fields.spec.ts holds the two
 * to each other.
 *
 * Beyond today's .proto files, two fields the Collector's decoders (pdata) still read, which the gateway must
 * therefore know: field 1000 of Resource{Spans,Metrics,Logs} (deprecated_scope_*, named instrumentation_library_*
 * before opentelemetry-proto 1.0, and read in place of scope_* when that is empty) and Status.deprecated_code (1).
 */
import type { OtlpSignal } from './otlp-encoding';
import { WIRE_FIXED32, WIRE_FIXED64, WIRE_LENGTH_DELIMITED, WIRE_VARINT } from './otlp-wire';

/**
 * A scalar type of the .proto files. `TraceID` and `SpanID` are `bytes` on the wire that pdata reads into its own
 * types, 16 and 8 bytes or empty; `enum` is any of OTLP's enums (an int32 on the wire).
 */
export type OtlpScalarType =
  | 'string'
  | 'bytes'
  | 'TraceID'
  | 'SpanID'
  | 'bool'
  | 'enum'
  | 'int32'
  | 'int64'
  | 'uint32'
  | 'uint64'
  | 'sint32'
  | 'fixed32'
  | 'fixed64'
  | 'sfixed64'
  | 'double';

interface FieldNote {
  /** The oneof it is a member of. */
  readonly oneof?: string;
  /** Its name in older opentelemetry-proto versions, which the Collector's JSON reader still accepts. */
  readonly formerly?: string;
  /** Read by the Collector's protobuf decoder only: its JSON reader skips a member of this name as unknown. */
  readonly protobufOnly?: true;
}

/** `[number, type]`: the type is a scalar type or a message of the table, after `repeated ` when it is repeated. */
type FieldSpec = readonly [number: number, type: string, note?: FieldNote];

const MESSAGES = {
  // common/v1
  AnyValue: {
    string_value: [1, 'string', { oneof: 'value' }],
    bool_value: [2, 'bool', { oneof: 'value' }],
    int_value: [3, 'int64', { oneof: 'value' }],
    double_value: [4, 'double', { oneof: 'value' }],
    array_value: [5, 'ArrayValue', { oneof: 'value' }],
    kvlist_value: [6, 'KeyValueList', { oneof: 'value' }],
    bytes_value: [7, 'bytes', { oneof: 'value' }],
  },
  ArrayValue: { values: [1, 'repeated AnyValue'] },
  KeyValueList: { values: [1, 'repeated KeyValue'] },
  KeyValue: {
    key: [1, 'string'],
    value: [2, 'AnyValue'],
  },
  InstrumentationScope: {
    name: [1, 'string'],
    version: [2, 'string'],
    attributes: [3, 'repeated KeyValue'],
    dropped_attributes_count: [4, 'uint32'],
  },
  EntityRef: {
    schema_url: [1, 'string'],
    type: [2, 'string'],
    id_keys: [3, 'repeated string'],
    description_keys: [4, 'repeated string'],
  },

  // resource/v1
  Resource: {
    attributes: [1, 'repeated KeyValue'],
    dropped_attributes_count: [2, 'uint32'],
    entity_refs: [3, 'repeated EntityRef'],
  },

  // trace/v1
  ResourceSpans: {
    resource: [1, 'Resource'],
    scope_spans: [2, 'repeated ScopeSpans'],
    schema_url: [3, 'string'],
    deprecated_scope_spans: [1000, 'repeated ScopeSpans', { formerly: 'instrumentation_library_spans' }],
  },
  ScopeSpans: {
    scope: [1, 'InstrumentationScope', { formerly: 'instrumentation_library' }],
    spans: [2, 'repeated Span'],
    schema_url: [3, 'string'],
  },
  Span: {
    trace_id: [1, 'TraceID'],
    span_id: [2, 'SpanID'],
    trace_state: [3, 'string'],
    parent_span_id: [4, 'SpanID'],
    name: [5, 'string'],
    kind: [6, 'enum'],
    start_time_unix_nano: [7, 'fixed64'],
    end_time_unix_nano: [8, 'fixed64'],
    attributes: [9, 'repeated KeyValue'],
    dropped_attributes_count: [10, 'uint32'],
    events: [11, 'repeated Span.Event'],
    dropped_events_count: [12, 'uint32'],
    links: [13, 'repeated Span.Link'],
    dropped_links_count: [14, 'uint32'],
    status: [15, 'Status'],
    flags: [16, 'fixed32'],
  },
  'Span.Event': {
    time_unix_nano: [1, 'fixed64'],
    name: [2, 'string'],
    attributes: [3, 'repeated KeyValue'],
    dropped_attributes_count: [4, 'uint32'],
  },
  'Span.Link': {
    trace_id: [1, 'TraceID'],
    span_id: [2, 'SpanID'],
    trace_state: [3, 'string'],
    attributes: [4, 'repeated KeyValue'],
    dropped_attributes_count: [5, 'uint32'],
    flags: [6, 'fixed32'],
  },
  Status: {
    // Reserved since opentelemetry-proto 0.9; older Collectors still read it as a varint.
    deprecated_code: [1, 'enum', { protobufOnly: true }],
    message: [2, 'string'],
    code: [3, 'enum'],
  },

  // metrics/v1
  ResourceMetrics: {
    resource: [1, 'Resource'],
    scope_metrics: [2, 'repeated ScopeMetrics'],
    schema_url: [3, 'string'],
    deprecated_scope_metrics: [1000, 'repeated ScopeMetrics', { formerly: 'instrumentation_library_metrics' }],
  },
  ScopeMetrics: {
    scope: [1, 'InstrumentationScope', { formerly: 'instrumentation_library' }],
    metrics: [2, 'repeated Metric'],
    schema_url: [3, 'string'],
  },
  Metric: {
    name: [1, 'string'],
    description: [2, 'string'],
    unit: [3, 'string'],
    gauge: [5, 'Gauge', { oneof: 'data' }],
    sum: [7, 'Sum', { oneof: 'data' }],
    histogram: [9, 'Histogram', { oneof: 'data' }],
    exponential_histogram: [10, 'ExponentialHistogram', { oneof: 'data' }],
    summary: [11, 'Summary', { oneof: 'data' }],
    metadata: [12, 'repeated KeyValue'],
  },
  Gauge: { data_points: [1, 'repeated NumberDataPoint'] },
  Sum: {
    data_points: [1, 'repeated NumberDataPoint'],
    aggregation_temporality: [2, 'enum'],
    is_monotonic: [3, 'bool'],
  },
  Histogram: {
    data_points: [1, 'repeated HistogramDataPoint'],
    aggregation_temporality: [2, 'enum'],
  },
  ExponentialHistogram: {
    data_points: [1, 'repeated ExponentialHistogramDataPoint'],
    aggregation_temporality: [2, 'enum'],
  },
  Summary: { data_points: [1, 'repeated SummaryDataPoint'] },
  NumberDataPoint: {
    start_time_unix_nano: [2, 'fixed64'],
    time_unix_nano: [3, 'fixed64'],
    as_double: [4, 'double', { oneof: 'value' }],
    exemplars: [5, 'repeated Exemplar'],
    as_int: [6, 'sfixed64', { oneof: 'value' }],
    attributes: [7, 'repeated KeyValue'],
    flags: [8, 'uint32'],
  },
  HistogramDataPoint: {
    start_time_unix_nano: [2, 'fixed64'],
    time_unix_nano: [3, 'fixed64'],
    count: [4, 'fixed64'],
    sum: [5, 'double'],
    bucket_counts: [6, 'repeated fixed64'],
    explicit_bounds: [7, 'repeated double'],
    exemplars: [8, 'repeated Exemplar'],
    attributes: [9, 'repeated KeyValue'],
    flags: [10, 'uint32'],
    min: [11, 'double'],
    max: [12, 'double'],
  },
  ExponentialHistogramDataPoint: {
    attributes: [1, 'repeated KeyValue'],
    start_time_unix_nano: [2, 'fixed64'],
    time_unix_nano: [3, 'fixed64'],
    count: [4, 'fixed64'],
    sum: [5, 'double'],
    scale: [6, 'sint32'],
    zero_count: [7, 'fixed64'],
    positive: [8, 'ExponentialHistogramDataPoint.Buckets'],
    negative: [9, 'ExponentialHistogramDataPoint.Buckets'],
    flags: [10, 'uint32'],
    exemplars: [11, 'repeated Exemplar'],
    min: [12, 'double'],
    max: [13, 'double'],
    zero_threshold: [14, 'double'],
  },
  'ExponentialHistogramDataPoint.Buckets': {
    offset: [1, 'sint32'],
    bucket_counts: [2, 'repeated uint64'],
  },
  SummaryDataPoint: {
    start_time_unix_nano: [2, 'fixed64'],
    time_unix_nano: [3, 'fixed64'],
    count: [4, 'fixed64'],
    sum: [5, 'double'],
    quantile_values: [6, 'repeated SummaryDataPoint.ValueAtQuantile'],
    attributes: [7, 'repeated KeyValue'],
    flags: [8, 'uint32'],
  },
  'SummaryDataPoint.ValueAtQuantile': {
    quantile: [1, 'double'],
    value: [2, 'double'],
  },
  Exemplar: {
    time_unix_nano: [2, 'fixed64'],
    as_double: [3, 'double', { oneof: 'value' }],
    span_id: [4, 'SpanID'],
    trace_id: [5, 'TraceID'],
    as_int: [6, 'sfixed64', { oneof: 'value' }],
    filtered_attributes: [7, 'repeated KeyValue'],
  },

  // logs/v1
  ResourceLogs: {
    resource: [1, 'Resource'],
    scope_logs: [2, 'repeated ScopeLogs'],
    schema_url: [3, 'string'],
    deprecated_scope_logs: [1000, 'repeated ScopeLogs', { formerly: 'instrumentation_library_logs' }],
  },
  ScopeLogs: {
    scope: [1, 'InstrumentationScope', { formerly: 'instrumentation_library' }],
    log_records: [2, 'repeated LogRecord'],
    schema_url: [3, 'string'],
  },
  LogRecord: {
    time_unix_nano: [1, 'fixed64'],
    severity_number: [2, 'enum'],
    severity_text: [3, 'string'],
    body: [5, 'AnyValue'],
    attributes: [6, 'repeated KeyValue'],
    dropped_attributes_count: [7, 'uint32'],
    flags: [8, 'fixed32'],
    trace_id: [9, 'TraceID'],
    span_id: [10, 'SpanID'],
    observed_time_unix_nano: [11, 'fixed64'],
    event_name: [12, 'string'],
  },

  // collector/*/v1
  ExportTraceServiceRequest: { resource_spans: [1, 'repeated ResourceSpans'] },
  ExportTraceServiceResponse: { partial_success: [1, 'ExportTracePartialSuccess'] },
  ExportTracePartialSuccess: {
    rejected_spans: [1, 'int64'],
    error_message: [2, 'string'],
  },
  ExportMetricsServiceRequest: { resource_metrics: [1, 'repeated ResourceMetrics'] },
  ExportMetricsServiceResponse: { partial_success: [1, 'ExportMetricsPartialSuccess'] },
  ExportMetricsPartialSuccess: {
    rejected_data_points: [1, 'int64'],
    error_message: [2, 'string'],
  },
  ExportLogsServiceRequest: { resource_logs: [1, 'repeated ResourceLogs'] },
  ExportLogsServiceResponse: { partial_success: [1, 'ExportLogsPartialSuccess'] },
  ExportLogsPartialSuccess: {
    rejected_log_records: [1, 'int64'],
    error_message: [2, 'string'],
  },

  // google/rpc/status.proto (details, google.protobuf.Any = 3, is never read or written here)
  RpcStatus: {
    code: [1, 'int32'],
    message: [2, 'string'],
  },
} as const satisfies Readonly<Record<string, Readonly<Record<string, FieldSpec>>>>;

type Messages = typeof MESSAGES;
export type OtlpMessageName = keyof Messages;
export type OtlpFieldName<M extends OtlpMessageName> = keyof Messages[M] & string;

/** One field of the table, with what its users derive from it. */
export interface OtlpField {
  readonly number: number;
  /** snake_case, as in the .proto files. */
  readonly name: string;
  /** lowerCamelCase, as OTLP/JSON writes it ("JSON Protobuf Encoding"). */
  readonly jsonName: string;
  /** The message it holds; undefined for a scalar. */
  readonly message: OtlpMessageName | undefined;
  /** Its scalar type; undefined for a message. */
  readonly scalar: OtlpScalarType | undefined;
  readonly repeated: boolean;
  /** The wire type of one value (packed repeated numbers aside). */
  readonly wireType: number;
  /** Its tag as one value of it is encoded: number and wire type. */
  readonly tag: number;
  readonly oneof: string | undefined;
  readonly formerly: string | undefined;
  readonly protobufOnly: boolean;
}

const SCALAR_WIRE_TYPES: Readonly<Record<OtlpScalarType, number>> = {
  string: WIRE_LENGTH_DELIMITED,
  bytes: WIRE_LENGTH_DELIMITED,
  TraceID: WIRE_LENGTH_DELIMITED,
  SpanID: WIRE_LENGTH_DELIMITED,
  bool: WIRE_VARINT,
  enum: WIRE_VARINT,
  int32: WIRE_VARINT,
  int64: WIRE_VARINT,
  uint32: WIRE_VARINT,
  uint64: WIRE_VARINT,
  sint32: WIRE_VARINT,
  fixed32: WIRE_FIXED32,
  fixed64: WIRE_FIXED64,
  sfixed64: WIRE_FIXED64,
  double: WIRE_FIXED64,
};

/** A snake_case field name as OTLP/JSON writes it. */
export function jsonName(name: string): string {
  return name.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase());
}

function isMessageName(type: string): type is OtlpMessageName {
  return Object.prototype.hasOwnProperty.call(MESSAGES, type);
}

function readField(message: string, name: string, [number, declared, note]: FieldSpec): OtlpField {
  const repeated = declared.startsWith('repeated ');
  const type = repeated ? declared.slice('repeated '.length) : declared;
  const scalar = Object.prototype.hasOwnProperty.call(SCALAR_WIRE_TYPES, type) ? (type as OtlpScalarType) : undefined;
  if (scalar === undefined && !isMessageName(type)) throw new Error(`${message}.${name}: ${type} is neither a scalar type nor a message of the table`);
  const wireType = scalar === undefined ? WIRE_LENGTH_DELIMITED : SCALAR_WIRE_TYPES[scalar];
  return {
    number,
    name,
    jsonName: jsonName(name),
    message: scalar === undefined ? (type as OtlpMessageName) : undefined,
    scalar,
    repeated,
    wireType,
    tag: number * 8 + wireType,
    oneof: note?.oneof,
    formerly: note?.formerly,
    protobufOnly: note?.protobufOnly === true,
  };
}

const FIELDS: ReadonlyMap<OtlpMessageName, readonly OtlpField[]> = new Map(
  Object.entries(MESSAGES).map(([message, fields]) => [
    message as OtlpMessageName,
    Object.entries(fields as Readonly<Record<string, FieldSpec>>).map(([name, spec]) => readField(message, name, spec)),
  ]),
);

/** The fields of a message, in table order. */
export function otlpFields(message: OtlpMessageName): readonly OtlpField[] {
  return FIELDS.get(message)!;
}

/** One field of a message, by its name. */
export function otlpField(message: OtlpMessageName, name: string): OtlpField {
  const field = otlpFields(message).find((candidate) => candidate.name === name);
  if (field === undefined) throw new Error(`${message} has no field ${name}`);
  return field;
}

/** The members of a oneof of a message, in table order. */
export function oneofFields(message: OtlpMessageName, oneof: string): readonly OtlpField[] {
  return otlpFields(message).filter((field) => field.oneof === oneof);
}

/**
 * The field numbers of a message by field name (`fieldNumbers('Span').trace_id` is 1). Hot paths copy the ones they
 * compare into constants of their own module, read without a property lookup.
 */
export function fieldNumbers<M extends OtlpMessageName>(message: M): { readonly [F in OtlpFieldName<M>]: number } {
  return Object.fromEntries(otlpFields(message).map((field) => [field.name, field.number])) as { readonly [F in OtlpFieldName<M>]: number };
}

/**
 * An export request's envelope for one signal: request → container (Resource{Spans,Metrics,Logs}) → scope
 * (Scope{Spans,Metrics,Logs}) → item (Span, Metric, LogRecord), and the fields that lead from one to the next.
 */
export interface OtlpEnvelope {
  readonly request: OtlpMessageName;
  readonly container: OtlpMessageName;
  readonly scope: OtlpMessageName;
  readonly item: OtlpMessageName;
  /** resource_spans, resource_metrics, resource_logs. */
  readonly containers: OtlpField;
  readonly resource: OtlpField;
  /** scope_spans, scope_metrics, scope_logs. */
  readonly scopes: OtlpField;
  /** Field 1000: see the top of this file. */
  readonly deprecatedScopes: OtlpField;
  readonly containerSchemaUrl: OtlpField;
  readonly scopeScope: OtlpField;
  /** spans, metrics, log_records. */
  readonly items: OtlpField;
  readonly scopeSchemaUrl: OtlpField;
}

function envelope(request: OtlpMessageName): OtlpEnvelope {
  // Each level holds one repeated field of the level below; a container holds two, its current scopes and field 1000.
  const below = (message: OtlpMessageName, current: boolean) =>
    otlpFields(message).find((field) => field.repeated && field.message !== undefined && (field.formerly === undefined) === current)!;
  const named = (message: OtlpMessageName, name: string) => otlpFields(message).find((field) => field.name === name)!;
  const containers = below(request, true);
  const container = containers.message!;
  const scopes = below(container, true);
  const scope = scopes.message!;
  const items = below(scope, true);
  return {
    request,
    container,
    scope,
    item: items.message!,
    containers,
    resource: named(container, 'resource'),
    scopes,
    deprecatedScopes: below(container, false),
    containerSchemaUrl: named(container, 'schema_url'),
    scopeScope: named(scope, 'scope'),
    items,
    scopeSchemaUrl: named(scope, 'schema_url'),
  };
}

export const OTLP_ENVELOPES: Readonly<Record<OtlpSignal, OtlpEnvelope>> = {
  traces: envelope('ExportTraceServiceRequest'),
  metrics: envelope('ExportMetricsServiceRequest'),
  logs: envelope('ExportLogsServiceRequest'),
};

/**
 * The envelope's field numbers, the same for the three signals (checked here): code that walks the envelope of any
 * signal (the protobuf walker, the sampling-reason slots) reads these.
 */
export const ENVELOPE_FIELDS = {
  containers: OTLP_ENVELOPES.traces.containers.number,
  resource: OTLP_ENVELOPES.traces.resource.number,
  scopes: OTLP_ENVELOPES.traces.scopes.number,
  deprecatedScopes: OTLP_ENVELOPES.traces.deprecatedScopes.number,
  containerSchemaUrl: OTLP_ENVELOPES.traces.containerSchemaUrl.number,
  scopeScope: OTLP_ENVELOPES.traces.scopeScope.number,
  items: OTLP_ENVELOPES.traces.items.number,
  scopeSchemaUrl: OTLP_ENVELOPES.traces.scopeSchemaUrl.number,
} as const;

for (const signalEnvelope of Object.values(OTLP_ENVELOPES)) {
  for (const [role, number] of Object.entries(ENVELOPE_FIELDS)) {
    const field = signalEnvelope[role as keyof typeof ENVELOPE_FIELDS];
    if (field.number !== number) throw new Error(`${signalEnvelope.request}: ${field.name} is field ${field.number}, not ${number} as for traces`);
  }
}

/** Span.SpanKind (trace/v1), as both encodings write it: by number. */
export const SPAN_KIND = { UNSPECIFIED: 0, INTERNAL: 1, SERVER: 2, CLIENT: 3, PRODUCER: 4, CONSUMER: 5 } as const;

/** Status.StatusCode (trace/v1), as both encodings write it: by number. */
export const STATUS_CODE = { UNSET: 0, OK: 1, ERROR: 2 } as const;
