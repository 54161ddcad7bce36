import * as protobuf from 'protobufjs';
import type { OtlpSignal } from './otlp-encoding';
import { otlpProto } from './otlp-proto';
import { decodeExportResponse, encodeExportResponse, encodeRpcStatus, mergePartialSuccess } from './otlp-response';
import { OtlpPayloadError } from './otlp-wire';

// Independent codec for the same messages: protobufjs with the OTLP schema.
const schema = otlpProto();
const RESPONSES: Record<OtlpSignal, { type: protobuf.Type; rejected: string }> = {
  traces: { type: schema.lookupType('otlp.ExportTraceServiceResponse'), rejected: 'rejectedSpans' },
  metrics: { type: schema.lookupType('otlp.ExportMetricsServiceResponse'), rejected: 'rejectedDataPoints' },
  logs: { type: schema.lookupType('otlp.ExportLogsServiceResponse'), rejected: 'rejectedLogRecords' },
};
const RpcStatus = schema.lookupType('otlp.RpcStatus');

describe.each(['traces', 'metrics', 'logs'] as const)('%s export responses', (signal) => {
  const { type, rejected } = RESPONSES[signal];
  const partialSuccess = { rejectedItems: 3, errorMessage: "3 spans rejected: trace_id is not this CI job's trace" };

  it('encodes partial success in protobuf as the OTLP message', () => {
    const body = encodeExportResponse(signal, 'protobuf', partialSuccess);

    expect(type.toObject(type.decode(body), { longs: Number })).toEqual({
      partialSuccess: { [rejected]: 3, errorMessage: partialSuccess.errorMessage },
    });
  });

  it('encodes partial success in JSON with the signal-specific field name', () => {
    const body = encodeExportResponse(signal, 'json', partialSuccess);

    expect(JSON.parse(body.toString())).toEqual({
      partialSuccess: { [rejected]: '3', errorMessage: partialSuccess.errorMessage },
    });
  });

  it('writes a plain success when there is nothing to report', () => {
    expect(encodeExportResponse(signal, 'protobuf')).toHaveLength(0);
    const nothing = { rejectedItems: 0, errorMessage: '' };
    expect(JSON.parse(encodeExportResponse(signal, 'json', nothing).toString())).toEqual({});
  });

  it.each(['protobuf', 'json'] as const)('round-trips through its own decoder (%s)', (encoding) => {
    expect(decodeExportResponse(signal, encoding, encodeExportResponse(signal, encoding, partialSuccess))).toEqual(partialSuccess);
    const warning = { rejectedItems: 0, errorMessage: 'sampling applied' };
    expect(decodeExportResponse(signal, encoding, encodeExportResponse(signal, encoding, warning))).toEqual(warning);
  });

  it("reads the collector's protobuf response, including unknown fields and an empty body", () => {
    const collectorBody = Buffer.concat([
      Buffer.from(type.encode(type.fromObject({ partialSuccess: { [rejected]: 5, errorMessage: 'queue full' } })).finish()),
      Buffer.from([0xa0, 0x06, 0x01]), // unknown varint field 100
    ]);

    expect(decodeExportResponse(signal, 'protobuf', collectorBody)).toEqual({
      rejectedItems: 5,
      errorMessage: 'queue full',
    });
    expect(decodeExportResponse(signal, 'protobuf', Buffer.alloc(0))).toBeUndefined();
  });

  it("reads the collector's JSON response with int64 as string or number", () => {
    const asString = Buffer.from(JSON.stringify({ partialSuccess: { [rejected]: '5', errorMessage: 'x' } }));
    const asNumber = Buffer.from(JSON.stringify({ partialSuccess: { [rejected]: 5 } }));

    expect(decodeExportResponse(signal, 'json', asString)).toEqual({ rejectedItems: 5, errorMessage: 'x' });
    expect(decodeExportResponse(signal, 'json', asNumber)).toEqual({ rejectedItems: 5, errorMessage: '' });
    expect(decodeExportResponse(signal, 'json', Buffer.from('{}'))).toBeUndefined();
    expect(decodeExportResponse(signal, 'json', Buffer.alloc(0))).toBeUndefined();
  });

  it.each([
    ['protobuf', Buffer.from([0x0a, 0x09, 0x08])],
    ['protobuf', Buffer.from([0x0a, 0x02, 0x0a, 0x05])],
    ['json', Buffer.from('<html>bad gateway</html>')],
    ['json', Buffer.from(JSON.stringify({ partialSuccess: { [rejected]: 'many' } }))],
  ] as const)('refuses a malformed %s response body', (encoding, body) => {
    expect(() => decodeExportResponse(signal, encoding, body)).toThrow(OtlpPayloadError);
  });
});

describe('mergePartialSuccess', () => {
  it("adds the gateway's and the collector's rejections and keeps both messages", () => {
    const gateway = { rejectedItems: 2, errorMessage: "2 spans rejected: trace_id is not this CI job's trace" };
    const collector = decodeExportResponse('traces', 'json', Buffer.from('{"partialSuccess":{"rejectedSpans":"1","errorMessage":"span too large"}}'));

    expect(mergePartialSuccess(gateway, collector)).toEqual({
      rejectedItems: 3,
      errorMessage: "2 spans rejected: trace_id is not this CI job's trace; span too large",
    });
  });

  it('is a plain success when neither side rejected anything', () => {
    expect(mergePartialSuccess(undefined, undefined)).toBeUndefined();
    const collectorOnly = { rejectedItems: 1, errorMessage: '' };
    expect(mergePartialSuccess(undefined, collectorOnly)).toEqual(collectorOnly);
  });
});

describe('encodeRpcStatus', () => {
  it('encodes google.rpc.Status in protobuf', () => {
    const body = encodeRpcStatus('protobuf', { code: 8, message: 'span quota exhausted' });

    expect(RpcStatus.toObject(RpcStatus.decode(body))).toEqual({ code: 8, message: 'span quota exhausted' });
  });

  it('encodes google.rpc.Status in JSON', () => {
    expect(JSON.parse(encodeRpcStatus('json', { code: 16, message: 'bad token' }).toString())).toEqual({
      code: 16,
      message: 'bad token',
    });
  });

  it('refuses a code that is not an int32 status code', () => {
    expect(() => encodeRpcStatus('json', { code: -1, message: '' })).toThrow(TypeError);
  });
});
