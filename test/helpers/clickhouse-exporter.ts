import type { ClickHouse } from './clickhouse';
import { exportRequestType } from '../../src/otlp/otlp-proto';

/**
 * What the OpenTelemetry Collector's clickhouse exporter (collector-contrib 0.136, Map attributes)
 * writes into `otel_traces` for each span of an export: facts carried over from the exporter, so the
 * view is tested on exactly the rows it will read in the stack.
 *  - Timestamp is the span's start, Duration its end minus start in nanoseconds;
 *  - ids are lowercase hex, an all-zero parent is '';
 *  - SpanKind and StatusCode are the pdata enum names (`Internal`, `Ok`, `Error`, `Unset`);
 *  - ServiceName is the resource's `service.name`; attribute values are stored as text (an int as
 *    its decimal digits, a bool as true/false, arrays and maps as the JSON of their plain values, `["docker","linux"]`).
 * The Collector's OTLP/HTTP receiver takes protobuf (what runners send) and JSON (what the service sends
 * its own control-plane spans as); both decode to the same pdata, hence to the same rows.
 */
export interface OtelTracesRow {
  Timestamp: string;
  TraceId: string;
  SpanId: string;
  ParentSpanId: string;
  TraceState: string;
  SpanName: string;
  SpanKind: string;
  ServiceName: string;
  ResourceAttributes: Record<string, string>;
  ScopeName: string;
  ScopeVersion: string;
  SpanAttributes: Record<string, string>;
  Duration: string;
  StatusCode: string;
  StatusMessage: string;
  'Events.Timestamp': string[];
  'Events.Name': string[];
  'Events.Attributes': Array<Record<string, string>>;
  'Links.TraceId': string[];
  'Links.SpanId': string[];
  'Links.TraceState': string[];
  'Links.Attributes': Array<Record<string, string>>;
}

const ExportTraceServiceRequest = exportRequestType('traces');

const SPAN_KINDS = ['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer'];
const STATUS_CODES = ['Unset', 'Ok', 'Error'];

type Decoded = Record<string, unknown>;

function asText(value: Decoded | undefined): string {
  if (value === undefined) return '';
  if (value.stringValue !== undefined) return value.stringValue as string;
  if (value.intValue !== undefined) return String(value.intValue);
  if (value.boolValue !== undefined) return String(value.boolValue);
  if (value.doubleValue !== undefined) return String(value.doubleValue);
  // OTLP/JSON writes bytes as base64 already; protobufjs hands them over as bytes.
  if (value.bytesValue !== undefined)
    return typeof value.bytesValue === 'string' ? value.bytesValue : Buffer.from(value.bytesValue as Uint8Array).toString('base64');
  return JSON.stringify(asRaw(value));
}

/** pdata's `AsRaw`: arrays and maps as plain JSON values, which `AsString` marshals (`["docker","linux"]`). */
function asRaw(value: Decoded | undefined): unknown {
  if (value === undefined || value === null) return null;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.bytesValue !== undefined) return asText(value);
  const array = value.arrayValue as Decoded | undefined;
  if (array !== undefined) return ((array.values ?? []) as Decoded[]).map(asRaw);
  const kvlist = value.kvlistValue as Decoded | undefined;
  if (kvlist !== undefined) return Object.fromEntries(((kvlist.values ?? []) as Decoded[]).map((entry) => [entry.key, asRaw(entry.value as Decoded)]));
  return null;
}

function textMap(list: unknown): Record<string, string> {
  const map: Record<string, string> = {};
  for (const entry of (list ?? []) as Decoded[]) map[entry.key as string] = asText(entry.value as Decoded | undefined);
  return map;
}

/** An id as the exporter writes it: lowercase hex, '' when absent or all zero. OTLP/JSON writes ids as hex already. */
const hexId = (id: unknown) => {
  const hex = typeof id === 'string' ? id.toLowerCase() : Buffer.from((id as Uint8Array | undefined) ?? []).toString('hex');
  return /^0*$/.test(hex) ? '' : hex;
};

/** Enums as protobufjs decodes them (numbers) or as a JSON writer may name them (`SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`). */
function enumName(value: unknown, names: readonly string[], prefix: string): string {
  if (typeof value === 'string' && value.startsWith(prefix)) {
    const name = value.slice(prefix.length).toLowerCase();
    return names.find((candidate) => candidate.toLowerCase() === name) ?? '';
  }
  return names[Number(value ?? 0)] ?? '';
}

/** Unix nanoseconds as protobufjs (a string, with longs: String) or OTLP/JSON (a decimal string, or a number) gives them. */
const nanos = (value: unknown) => BigInt((value as string | number | undefined) ?? 0);

function isJson(body: Uint8Array, contentType: string | undefined): boolean {
  if (contentType !== undefined && contentType !== '') return contentType.split(';')[0].trim().toLowerCase() === 'application/json';
  // Without a content type: a protobuf ExportTraceServiceRequest starts with field 1 (0x0a), a JSON one with '{'.
  const first = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8').trimStart()[0];
  return first === '{';
}

function decodeTraces(body: Uint8Array, contentType: string | undefined): Decoded {
  if (isJson(body, contentType)) return JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8')) as Decoded;
  return ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(body), { longs: String, defaults: false }) as Decoded;
}

/** A span row with what the exporter writes for a span without events or links. */
export function otelSpanRow(
  span: Pick<OtelTracesRow, 'Timestamp' | 'TraceId' | 'SpanId' | 'SpanName' | 'ResourceAttributes'> & Partial<OtelTracesRow>,
): OtelTracesRow {
  return {
    ParentSpanId: '',
    TraceState: '',
    SpanKind: 'Internal',
    ServiceName: span.ResourceAttributes['service.name'] ?? '',
    ScopeName: '',
    ScopeVersion: '',
    SpanAttributes: {},
    Duration: '0',
    StatusCode: 'Unset',
    StatusMessage: '',
    'Events.Timestamp': [],
    'Events.Name': [],
    'Events.Attributes': [],
    'Links.TraceId': [],
    'Links.SpanId': [],
    'Links.TraceState': [],
    'Links.Attributes': [],
    ...span,
  };
}

/** Unix nanoseconds as ClickHouse reads a DateTime64(9) in UTC. */
export function dateTime64(nanos: bigint | string): string {
  const value = BigInt(nanos);
  const seconds = value / 1_000_000_000n;
  const fraction = (value % 1_000_000_000n).toString().padStart(9, '0');
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19).replace('T', ' ')}.${fraction}`;
}

/**
 * The exporter's rows for one OTLP/HTTP trace export: protobuf, or JSON (`application/json`: hex ids,
 * decimal-string times, `intValue` strings) as the service sends its control-plane spans. The content
 * type decides; without one, the body's first byte does.
 */
export function otelTracesRows(body: Uint8Array, contentType?: string): OtelTracesRow[] {
  const request = decodeTraces(body, contentType);
  const rows: OtelTracesRow[] = [];
  for (const resourceSpans of (request.resourceSpans ?? []) as Decoded[]) {
    const resource = textMap((resourceSpans.resource as Decoded | undefined)?.attributes);
    for (const scopeSpans of (resourceSpans.scopeSpans ?? []) as Decoded[]) {
      const scope = (scopeSpans.scope ?? {}) as Decoded;
      for (const span of (scopeSpans.spans ?? []) as Decoded[]) {
        const start = nanos(span.startTimeUnixNano);
        const end = nanos(span.endTimeUnixNano);
        const status = (span.status ?? {}) as Decoded;
        const events = (span.events ?? []) as Decoded[];
        const links = (span.links ?? []) as Decoded[];
        rows.push({
          Timestamp: dateTime64(start),
          TraceId: hexId(span.traceId),
          SpanId: hexId(span.spanId),
          ParentSpanId: hexId(span.parentSpanId),
          TraceState: (span.traceState as string | undefined) ?? '',
          SpanName: span.name as string,
          SpanKind: enumName(span.kind, SPAN_KINDS, 'SPAN_KIND_'),
          ServiceName: resource['service.name'] ?? '',
          ResourceAttributes: resource,
          ScopeName: (scope.name as string | undefined) ?? '',
          ScopeVersion: (scope.version as string | undefined) ?? '',
          SpanAttributes: textMap(span.attributes),
          Duration: (end - start).toString(),
          StatusCode: enumName(status.code, STATUS_CODES, 'STATUS_CODE_'),
          StatusMessage: (status.message as string | undefined) ?? '',
          'Events.Timestamp': events.map((event) => dateTime64(nanos(event.timeUnixNano))),
          'Events.Name': events.map((event) => event.name as string),
          'Events.Attributes': events.map((event) => textMap(event.attributes)),
          'Links.TraceId': links.map((link) => hexId(link.traceId)),
          'Links.SpanId': links.map((link) => hexId(link.spanId)),
          'Links.TraceState': links.map((link) => (link.traceState as string | undefined) ?? ''),
          'Links.Attributes': links.map((link) => textMap(link.attributes)),
        });
      }
    }
  }
  return rows;
}

/** Inserts rows into otel.otel_traces as the exporter does: by column name. */
export async function insertOtelTraces(clickhouse: ClickHouse, rows: readonly OtelTracesRow[]): Promise<void> {
  if (rows.length === 0) return;
  await clickhouse.query(`INSERT INTO otel.otel_traces FORMAT JSONEachRow\n${rows.map((row) => JSON.stringify(row)).join('\n')}`);
}

/** The exporter's rows for OTLP/JSON `ResourceSpans`, each received as an export of its own (as the service and PipelineTrace send them). */
export function otelTracesRowsOfResourceSpans(exports: readonly unknown[]): OtelTracesRow[] {
  return exports.flatMap((resourceSpans) => otelTracesRows(Buffer.from(JSON.stringify({ resourceSpans: [resourceSpans] })), 'application/json'));
}
