import * as protobuf from 'protobufjs';
import { ENVELOPE_FIELDS, OTLP_ENVELOPES, OtlpMessageName, SPAN_KIND, STATUS_CODE, fieldNumbers, otlpFields } from './otlp-fields';
import { otlpProto } from './otlp-proto';
import { WIRE_LENGTH_DELIMITED, WIRE_VARINT } from './otlp-wire';

// The schema protobufjs reads (tests, benches), with its message and enum types resolved.
const schema = otlpProto();
schema.resolveAll();

function protoMessages(namespace: protobuf.NamespaceBase, prefix = ''): string[] {
  return namespace.nestedArray.flatMap((nested) =>
    nested instanceof protobuf.Type ? [`${prefix}${nested.name}`, ...protoMessages(nested, `${prefix}${nested.name}.`)] : [],
  );
}
const PROTO_MESSAGES = protoMessages(schema.lookup('otlp') as protobuf.Namespace) as OtlpMessageName[];

function protoWireType(field: protobuf.Field): number {
  if (field.resolvedType instanceof protobuf.Type) return WIRE_LENGTH_DELIMITED;
  if (field.resolvedType instanceof protobuf.Enum) return WIRE_VARINT;
  return (protobuf.types.basic as Record<string, number>)[field.type];
}

/** A real oneof's name; proto3 `optional` makes a synthetic one, `_<field>`, which says only that presence is kept. */
function oneofOf(field: protobuf.Field): string | undefined {
  const oneof = field.partOf?.name;
  return oneof === undefined || oneof.startsWith('_') ? undefined : oneof;
}

describe('the OTLP table', () => {
  it.each(PROTO_MESSAGES)('holds %s as proto/otlp.proto declares it: every field, its number, name, type and label', (message) => {
    const type = schema.lookupType(`otlp.${message}`);
    const table = otlpFields(message);
    expect(table).toBeDefined();
    // What pdata still reads beyond today's .proto files (see otlp-fields.ts) is the table's alone.
    const current = table.filter((field) => field.number !== 1000 && !field.protobufOnly);
    expect(current.map((field) => field.number).sort((a, b) => a - b)).toEqual(type.fieldsArray.map((field) => field.id).sort((a, b) => a - b));
    for (const field of current) {
      const declared = type.fieldsById[field.number];
      expect([field.jsonName, field.repeated, field.wireType, field.oneof]).toEqual([
        declared.name,
        declared.repeated,
        protoWireType(declared),
        oneofOf(declared),
      ]);
      if (field.message !== undefined) expect(declared.resolvedType?.fullName).toBe(`.otlp.${field.message}`);
    }
  });

  it('refers to no message the .proto files lack', () => {
    const messages = new Set(PROTO_MESSAGES);
    for (const signal of ['traces', 'metrics', 'logs'] as const) {
      const { request, container, scope, item } = OTLP_ENVELOPES[signal];
      for (const message of [request, container, scope, item]) expect(messages).toContain(message);
    }
    for (const message of PROTO_MESSAGES) {
      for (const field of otlpFields(message)) if (field.message !== undefined) expect(messages).toContain(field.message);
    }
  });

  it("walks each signal's envelope through the same field numbers, deprecated scopes at 1000 under their former names too", () => {
    expect(ENVELOPE_FIELDS).toEqual({
      containers: 1,
      resource: 1,
      scopes: 2,
      deprecatedScopes: 1000,
      containerSchemaUrl: 3,
      scopeScope: 1,
      items: 2,
      scopeSchemaUrl: 3,
    });
    const names = (signal: 'traces' | 'metrics' | 'logs') => {
      const { containers, scopes, deprecatedScopes, items } = OTLP_ENVELOPES[signal];
      return [containers.jsonName, scopes.jsonName, deprecatedScopes.jsonName, deprecatedScopes.formerly, items.jsonName];
    };
    expect(names('traces')).toEqual(['resourceSpans', 'scopeSpans', 'deprecatedScopeSpans', 'instrumentation_library_spans', 'spans']);
    expect(names('metrics')).toEqual(['resourceMetrics', 'scopeMetrics', 'deprecatedScopeMetrics', 'instrumentation_library_metrics', 'metrics']);
    expect(names('logs')).toEqual(['resourceLogs', 'scopeLogs', 'deprecatedScopeLogs', 'instrumentation_library_logs', 'logRecords']);
  });

  it('gives field numbers by name, as the .proto files do', () => {
    expect(fieldNumbers('Span')).toMatchObject({ trace_id: 1, name: 5, attributes: 9, status: 15, flags: 16 });
    expect(fieldNumbers('Status')).toEqual({ deprecated_code: 1, message: 2, code: 3 });
  });

  it('numbers span kinds and status codes as the .proto files do', () => {
    const values = (name: string, prefix: string) =>
      Object.fromEntries(Object.entries(schema.lookupEnum(name).values).map(([value, number]) => [value.slice(prefix.length), number]));
    expect(SPAN_KIND).toEqual(values('otlp.Span.SpanKind', 'SPAN_KIND_'));
    expect(STATUS_CODE).toEqual(values('otlp.Status.StatusCode', 'STATUS_CODE_'));
  });
});
