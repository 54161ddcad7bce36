import fc from 'fast-check';
import * as protobuf from 'protobufjs';
import { enforceExport } from './enforce-export';
import type { EnforcedExport, GatewayGrant } from './otlp-types';
import { otlpProto } from '../../otlp/otlp-proto';
import { OtlpPayloadError, lengthDelimitedHeader } from '../../otlp/otlp-wire';

// Independent of the code under test: protobufjs with the OTLP schema, and the Collector's rules written against it.
const schema = otlpProto();
const TraceRequest = schema.lookupType('otlp.ExportTraceServiceRequest');
const LogsRequest = schema.lookupType('otlp.ExportLogsServiceRequest');
const Span = schema.lookupType('otlp.Span');

const GRANT: GatewayGrant = { jobId: 1001, projectId: 7, pipelineId: 500, runnerId: 17, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' };
const TRACE_ID = Buffer.from(GRANT.traceId, 'hex');

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function spanObject(name: string, extra: Json = {}): Json {
  return {
    traceId: TRACE_ID,
    spanId: Buffer.from(name.padEnd(8, '_').slice(0, 8)),
    parentSpanId: Buffer.from('parent__'),
    name,
    kind: 2,
    startTimeUnixNano: '1700000000000000123',
    endTimeUnixNano: '1700000000500000456',
    attributes: [
      { key: 'http.route', value: { stringValue: '/jobs/:id' } },
      { key: 'tags', value: { arrayValue: { values: [{ stringValue: 'a' }, { kvlistValue: { values: [{ key: 'k', value: { intValue: 3 } }] } }] } } },
    ],
    events: [{ timeUnixNano: '1700000000100000000', name: 'retry', attributes: [{ key: 'n', value: { intValue: 1 } }] }],
    links: [{ traceId: Buffer.alloc(16, 3), spanId: Buffer.alloc(8, 4), traceState: 'ot=th:0' }],
    status: { code: 2, message: 'failed' },
    ...extra,
  };
}

const spanBytes = (name: string, extra: Json = {}) => Buffer.from(Span.encode(Span.fromObject(spanObject(name, extra))).finish());
const field = (fieldNumber: number, payload: Buffer | number[]) => Buffer.concat([lengthDelimitedHeader(fieldNumber, payload.length), Buffer.from(payload)]);

/** A traces export of one resource and one scope holding these encoded spans. */
function exportOf(spans: Buffer[], resource: Buffer = field(1, field(1, [0x0a, 0x01, 0x73]))): Buffer {
  const scope = Buffer.concat([field(1, Buffer.from([0x0a, 0x01, 0x74])), ...spans.map((span) => field(2, span))]);
  return field(1, Buffer.concat([resource, field(2, scope)]));
}

function spanNames(body: Buffer): string[] {
  const request = TraceRequest.toObject(TraceRequest.decode(body)) as Json;
  return (request.resourceSpans ?? []).flatMap((rs: Json) => (rs.scopeSpans ?? []).flatMap((ss: Json) => (ss.spans ?? []).map((s: Json) => s.name)));
}

const enforce = (body: Buffer): EnforcedExport => enforceExport('traces', 'protobuf', body, GRANT, 1000);

/**
 * The Collector's decoder, as a predicate over the schema: every known field in its declared wire type, trace ids
 * of 16 bytes and span ids of 8 (or empty), UTF-8 strings, no groups, no field number 0, nothing truncated.
 * Throws with the path of the first value it would refuse.
 */
function collectorDecodes(type: protobuf.Type, reader: protobuf.Reader, end: number, path: string): void {
  while (reader.pos < end) {
    const tag = reader.uint32();
    const id = tag >>> 3;
    const wireType = tag & 7;
    if (id === 0 || wireType === 3 || wireType === 4 || wireType > 5) throw new Error(`${path}: tag ${tag}`);
    const known = type.fieldsById[id];
    if (known === undefined) {
      reader.skipType(wireType);
      if (reader.pos > end) throw new Error(`${path}: field ${id} runs past its message`);
      continue;
    }
    known.resolve();
    const where = `${path}.${known.name}`;
    const expected =
      known.resolvedType instanceof protobuf.Type
        ? 2
        : known.resolvedType instanceof protobuf.Enum
          ? 0
          : protobuf.types.basic[known.type as keyof typeof protobuf.types.basic];
    if (wireType !== expected) throw new Error(`${where}: wire type ${wireType}, not ${expected}`);
    if (known.resolvedType instanceof protobuf.Type) {
      const length = reader.uint32();
      if (reader.pos + length > end) throw new Error(`${where} runs past its message`);
      collectorDecodes(known.resolvedType, reader, reader.pos + length, where);
    } else if (known.type === 'string') {
      new TextDecoder('utf-8', { fatal: true }).decode(reader.bytes());
    } else if (known.type === 'bytes') {
      const bytes = reader.bytes();
      if (/traceId$/.test(known.name) && bytes.length !== 0 && bytes.length !== 16) throw new Error(`${where}: ${bytes.length} bytes`);
      if (/[sS]panId$/.test(known.name) && bytes.length !== 0 && bytes.length !== 8) throw new Error(`${where}: ${bytes.length} bytes`);
    } else {
      reader.skipType(wireType);
    }
    if (reader.pos > end) throw new Error(`${where} runs past its message`);
  }
}

function expectCollectorDecodes(body: Buffer): void {
  TraceRequest.decode(body);
  collectorDecodes(TraceRequest, protobuf.Reader.create(body), body.length, 'ExportTraceServiceRequest');
}

describe('protobuf spans the collector could not decode (the walker forwards only what it can)', () => {
  const good = spanBytes('good');

  it.each([
    ['a 7-byte span_id', Buffer.concat([spanBytes('bad'), field(2, Buffer.alloc(7, 1))]), 'Span.span_id is 7 bytes, not 8'],
    ['a 9-byte parent_span_id', Buffer.concat([spanBytes('bad'), field(4, Buffer.alloc(9, 1))]), 'Span.parent_span_id is 9 bytes, not 8'],
    ['a 15-byte trace_id in a link', Buffer.concat([spanBytes('bad'), field(13, field(1, Buffer.alloc(15, 1)))]), 'Span.Link.trace_id is 15 bytes, not 16'],
    ['a string field (name) with a varint wire type', Buffer.concat([spanBytes('bad'), Buffer.from([0x28, 0x01])]), 'Span.name has wire type 0, not 2'],
    [
      'a fixed64 field (end time) as fixed32',
      Buffer.concat([spanBytes('bad'), Buffer.from([0x45, 1, 2, 3, 4])]),
      'Span.end_time_unix_nano has wire type 5, not 1',
    ],
    ['invalid UTF-8 in the name', Buffer.concat([spanBytes('bad'), field(5, [0x62, 0xc3, 0x28])]), 'Span.name is not valid UTF-8'],
    [
      'invalid UTF-8 in an attribute value',
      Buffer.concat([spanBytes('bad'), field(9, Buffer.concat([field(1, Buffer.from('k')), field(2, field(1, [0xed, 0xa0, 0x80]))]))]),
      'AnyValue.string_value is not valid UTF-8',
    ],
    ['an event name with a fixed32 wire type', Buffer.concat([spanBytes('bad'), field(11, [0x15, 1, 2, 3, 4])]), 'Span.Event.name has wire type 5, not 2'],
    ['a status code that is length-delimited', Buffer.concat([spanBytes('bad'), field(15, field(3, [1]))]), 'Status.code has wire type 2, not 0'],
    [
      'a group in an unknown field',
      Buffer.concat([spanBytes('bad'), Buffer.from([0xa3, 0x06, 0x08, 0x01, 0xa4, 0x06])]),
      'Span: field 100 is a protobuf group',
    ],
    ['a truncated varint inside its status', Buffer.concat([spanBytes('bad'), Buffer.from([0x7a, 0x02, 0x18, 0xff])]), 'Status: malformed protobuf varint'],
    [
      'a bool attribute value sent as a fixed64',
      Buffer.concat([spanBytes('bad'), field(9, field(2, [0x11, 1, 2, 3, 4, 5, 6, 7, 8]))]),
      'AnyValue.bool_value has wire type 1, not 0',
    ],
  ])('rejects a span with %s through partial success, and forwards the rest of the export', (_name, bad, why) => {
    const body = exportOf([good, bad, good]);
    // The premise: the Collector would refuse the request as it came, and with it every export joined to it.
    expect(() => expectCollectorDecodes(body)).toThrow();
    const result = enforce(body);
    expect(result.forwardedItems).toBe(2);
    expect(result.rejectedItems).toBe(1);
    expect(result.rejections?.undecodable).toBe(1);
    expect(result.errorMessage).toBe(`1 span rejected: the collector cannot decode it (${why})`);
    expect(spanNames(result.body)).toEqual(['good', 'good']);
    expectCollectorDecodes(result.body);
  });

  it('forwards empty ids, which the collector reads as no id, and says which span was the first of several bad ones', () => {
    const rootSpan = spanBytes('root', { parentSpanId: Buffer.alloc(0) });
    const bad = [field(2, Buffer.alloc(7)), field(4, Buffer.alloc(9))].map((id) => Buffer.concat([spanBytes('bad'), id]));
    const result = enforce(exportOf([rootSpan, ...bad]));
    expect(spanNames(result.body)).toEqual(['root']);
    expect(result.errorMessage).toBe('2 spans rejected: the collector cannot decode them (first: Span.span_id is 7 bytes, not 8)');
  });

  it('leaves a span outside the grant to the trace check, whatever else is wrong with it', () => {
    const foreign = Buffer.concat([spanBytes('foreign', { traceId: Buffer.alloc(16, 9) }), field(2, Buffer.alloc(7))]);
    const result = enforce(exportOf([good, foreign]));
    expect(result.rejections).toMatchObject({ foreignTrace: 1, undecodable: 0 });
  });

  it.each([
    [
      'a resource attribute key that is not UTF-8',
      exportOf([good], field(1, field(1, field(1, [0xff])))),
      'ResourceSpans.resource: KeyValue.key is not valid UTF-8',
    ],
    [
      'an int resource attribute value sent length-delimited',
      exportOf([good], field(1, field(1, field(2, [0x18 | 2, 0])))),
      'AnyValue.int_value has wire type 2',
    ],
    [
      'a scope name sent as a varint',
      field(1, field(2, Buffer.concat([field(1, [0x08, 0x01]), field(2, good)]))),
      'ScopeSpans.scope: InstrumentationScope.name has wire type 0',
    ],
    [
      'a schema_url sent as a varint',
      field(1, Buffer.concat([field(2, field(2, good)), Buffer.from([0x18, 0x01])])),
      'ResourceSpans.schema_url (field 3) has wire type 0',
    ],
    [
      'a scope schema_url that is not UTF-8',
      field(1, field(2, Buffer.concat([field(2, good), field(3, [0xc0, 0x80])]))),
      'ScopeSpans.schema_url is not valid UTF-8',
    ],
  ])('refuses an export whose shared envelope holds %s, as for broken framing', (_name, body, why) => {
    expect(() => enforce(body)).toThrow(OtlpPayloadError);
    expect(() => enforce(body)).toThrow(why);
  });

  it.each([
    ['a 7-byte span_id', { spanId: Buffer.alloc(7, 1) }, 'LogRecord.span_id is 7 bytes, not 8'],
    ['a 15-byte trace_id', { traceId: Buffer.alloc(15, 1) }, 'LogRecord.trace_id is 15 bytes, not 16'],
    ['a bytes body, to which no UTF-8 rule applies', { body: { bytesValue: Buffer.from([1]) } }, undefined],
  ])('refuses a logs export whose record has %s, and forwards what the collector reads', (_name, record, why) => {
    const body = Buffer.from(
      LogsRequest.encode(LogsRequest.fromObject({ resourceLogs: [{ scopeLogs: [{ logRecords: [{ severityText: 'INFO', ...record }] }] }] })).finish(),
    );
    if (why === undefined) {
      expect(enforceExport('logs', 'protobuf', body, GRANT, 0).forwardedItems).toBe(1);
      return;
    }
    expect(() => enforceExport('logs', 'protobuf', body, GRANT, 0)).toThrow(why);
    const fine = Buffer.from(
      LogsRequest.encode(
        LogsRequest.fromObject({ resourceLogs: [{ scopeLogs: [{ logRecords: [{ traceId: TRACE_ID, spanId: Buffer.alloc(8, 1) }] }] }] }),
      ).finish(),
    );
    expect(enforceExport('logs', 'protobuf', fine, GRANT, 0).forwardedItems).toBe(1);
  });

  it('forwards only what the collector decodes, whatever bytes of a valid export are changed (property)', () => {
    // Every form of attribute value, so that changes land in each path the walker checks them by: strings short and
    // long (two-byte lengths), non-ASCII, ints of one and ten bytes, bool, double, bytes, arrays, an empty value.
    const scalars = spanBytes('scalars', {
      attributes: [
        { key: 'n', value: { intValue: 300 } },
        { key: 'neg', value: { intValue: -1 } },
        { key: 'ok', value: { boolValue: true } },
        { key: 'ratio', value: { doubleValue: 0.25 } },
        { key: 'raw', value: { bytesValue: Buffer.from([0xff, 0xc3]) } },
        { key: 'long', value: { stringValue: 'x'.repeat(200) } },
        { key: 'grüße', value: { stringValue: 'naïve €' } },
        { key: 'empty', value: {} },
      ],
    });
    const valid = exportOf([spanBytes('first'), spanBytes('second', { traceState: 'ot=th:c', flags: 769 }), scalars, spanBytes('third')]);
    expectCollectorDecodes(valid);
    expect(enforce(valid).forwardedItems).toBe(4);
    const mutation = fc.record({
      at: fc.nat({ max: valid.length - 1 }),
      byte: fc.integer({ min: 0, max: 255 }),
      kind: fc.constantFrom('set', 'insert', 'delete'),
    });
    const outcomes = { refused: 0, forwarded: 0, rejected: 0 };
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (mutations) => {
        const bytes = [...valid];
        for (const { at, byte, kind } of mutations) {
          const i = at % (bytes.length + 1);
          if (kind === 'set') bytes[i] = byte;
          else if (kind === 'insert') bytes.splice(i, 0, byte);
          else bytes.splice(i, 1);
        }
        let result: EnforcedExport;
        try {
          result = enforce(Buffer.from(bytes));
        } catch (error) {
          if (!(error instanceof OtlpPayloadError)) throw error;
          outcomes.refused++;
          return;
        }
        if (result.forwardedItems > 0) outcomes.forwarded++;
        if ((result.rejections?.undecodable ?? 0) > 0) outcomes.rejected++;
        if (!result.nothingToForward) expectCollectorDecodes(result.body);
      }),
      { numRuns: 3000, seed: 20240611 },
    );
    // The mutations reach every verdict: refused exports, rejected spans and forwarded ones.
    expect(outcomes.refused).toBeGreaterThan(0);
    expect(outcomes.rejected).toBeGreaterThan(0);
    expect(outcomes.forwarded).toBeGreaterThan(0);
  });
});

describe('OTLP/JSON spans the collector could not read (the walker forwards only what it can)', () => {
  const good = (name: string): Json => ({
    traceId: GRANT.traceId,
    spanId: '0102030405060708',
    parentSpanId: '',
    name,
    kind: 'SPAN_KIND_SERVER',
    startTimeUnixNano: '1700000000000000123',
    endTimeUnixNano: 1700000000500000,
    attributes: [
      { key: 'n', value: { intValue: '3' } },
      { key: 'b', value: { bytesValue: 'AQI=' } },
      { key: 'd', value: { doubleValue: 'NaN' } },
    ],
    events: [{ timeUnixNano: '1700000000100000000', name: 'retry' }],
    links: [{ traceId: 'AB'.repeat(16), spanId: 'cd'.repeat(8) }],
    status: { code: 2, message: 'failed' },
  });
  const exportOf = (spans: Json[], envelope: Json = {}, scope: Json = {}) =>
    Buffer.from(JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 't' }, spans, ...scope }], ...envelope }] }));
  const namesOf = (body: Buffer) =>
    (JSON.parse(body.toString()) as Json).resourceSpans.flatMap((rs: Json) => rs.scopeSpans.flatMap((ss: Json) => ss.spans.map((s: Json) => s.name)));

  it.each([
    ['a 14-digit spanId', { spanId: '01020304050607' }, 'Span.spanId is not 16 hex digits'],
    ['an 18-digit parentSpanId', { parentSpanId: '010203040506070809' }, 'Span.parentSpanId is not 16 hex digits'],
    ['a spanId that is not hex', { span_id: 'zz02030405060708' }, 'Span.span_id is not 16 hex digits'],
    ['a name that is a number', { name: 42 }, 'Span.name is not a string'],
    ['a kind that is a boolean', { kind: true }, 'Span.kind is not an enum number or name'],
    ['a start time that is not a number', { startTimeUnixNano: 'soon' }, 'Span.startTimeUnixNano is not a uint64'],
    ['a negative dropped count', { droppedAttributesCount: -1 }, 'Span.droppedAttributesCount is not a uint32'],
    ['a boolean attribute that is a string', { attributes: [{ key: 'b', value: { boolValue: 'yes' } }] }, 'AnyValue.boolValue is not true or false'],
    ['bytes that are not base64', { attributes: [{ key: 'b', value: { bytesValue: 'not base64!' } }] }, 'AnyValue.bytesValue is not padded base64'],
    ['a link with a 31-digit traceId', { links: [{ traceId: 'a'.repeat(31) }] }, 'Span.Link.traceId is not 32 hex digits'],
    ['a status that is an array', { status: [] }, 'Status is not an object'],
    ['events that are not an array', { events: {} }, 'Span.events is not an array'],
  ])('rejects a span with %s through partial success, and forwards the rest of the export', (_name, change, why) => {
    const bad = { ...good('bad'), ...change };
    const result = enforceExport('traces', 'json', exportOf([good('good'), bad, good('good')]), GRANT, 1000);
    expect(result.rejections).toMatchObject({ foreignTrace: 0, undecodable: 1 });
    expect(result.errorMessage).toBe(`1 span rejected: the collector cannot decode it (${why})`);
    expect(namesOf(result.body)).toEqual(['good', 'good']);
  });

  it.each([
    [
      'a resource attribute key that is a number',
      exportOf([good('good')], { resource: { attributes: [{ key: 1 }] } }),
      'ResourceSpans.resource: KeyValue.key is not a string',
    ],
    ['a scope name that is a number', exportOf([good('good')], {}, { scope: { name: 7 } }), 'ScopeSpans.scope: InstrumentationScope.name is not a string'],
    ['a schemaUrl that is an object', exportOf([good('good')], { schemaUrl: {} }), 'ResourceSpans.schemaUrl must be a string'],
  ])('refuses an export whose shared envelope holds %s', (_name, body, why) => {
    expect(() => enforceExport('traces', 'json', body, GRANT, 1000)).toThrow(why);
  });

  it('refuses a logs export whose record has a span id of the wrong length, and forwards well-formed ids', () => {
    const logs = (record: Json) => Buffer.from(JSON.stringify({ resourceLogs: [{ scopeLogs: [{ logRecords: [{ severityText: 'INFO', ...record }] }] }] }));
    expect(() => enforceExport('logs', 'json', logs({ spanId: '0102' }), GRANT, 0)).toThrow('LogRecord: LogRecord.spanId is not 16 hex digits');
    expect(enforceExport('logs', 'json', logs({ traceId: GRANT.traceId, spanId: '0102030405060708' }), GRANT, 0).forwardedItems).toBe(1);
  });
});
