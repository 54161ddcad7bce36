/**
 * OTLP/HTTP response bodies: Export*ServiceResponse with partial success, and google.rpc.Status for errors
 * (OTLP spec "OTLP/HTTP Response"). Their field numbers are the OTLP table's (otlp-fields.ts), the same for the three
 * signals; only the JSON name of the rejected count differs.
 */
import type { OtlpEncoding, OtlpSignal } from './otlp-encoding';
import { fieldNumbers, otlpField, otlpFields } from './otlp-fields';
import { OtlpPayloadError, WIRE_VARINT, WireReader, encodeBytesField, encodeStringField, encodeVarintField } from './otlp-wire';

/** The partial_success of an export response, whatever the signal. */
export interface OtlpPartialSuccess {
  /** rejected_spans, rejected_data_points or rejected_log_records. */
  rejectedItems: number;
  errorMessage: string;
}

export interface RpcStatus {
  /** A google.rpc.Code value. */
  code: number;
  message: string;
}

/** rejected_spans, rejected_data_points or rejected_log_records: the first field of the signal's partial success. */
function rejectedField(response: 'ExportTraceServiceResponse' | 'ExportMetricsServiceResponse' | 'ExportLogsServiceResponse'): [camel: string, snake: string] {
  const [rejected] = otlpFields(otlpField(response, 'partial_success').message!);
  return [rejected.jsonName, rejected.name];
}

const REJECTED_FIELD: Record<OtlpSignal, [camel: string, snake: string]> = {
  traces: rejectedField('ExportTraceServiceResponse'),
  metrics: rejectedField('ExportMetricsServiceResponse'),
  logs: rejectedField('ExportLogsServiceResponse'),
};

const RESPONSE_PARTIAL_SUCCESS = fieldNumbers('ExportTraceServiceResponse').partial_success;
const { rejected_spans: PARTIAL_SUCCESS_REJECTED, error_message: PARTIAL_SUCCESS_ERROR_MESSAGE } = fieldNumbers('ExportTracePartialSuccess');
const { code: STATUS_CODE, message: STATUS_MESSAGE } = fieldNumbers('RpcStatus');

/**
 * Encodes an Export*ServiceResponse. The partial_success member is written only when it says something
 * (OTLP: a full success carries no partial_success; a warning has rejected = 0 and a message).
 */
export function encodeExportResponse(signal: OtlpSignal, encoding: OtlpEncoding, partialSuccess?: OtlpPartialSuccess): Buffer {
  const meaningful = normalize(partialSuccess);
  if (encoding === 'json') {
    if (meaningful === undefined) return Buffer.from('{}');
    const partial: Record<string, string> = {};
    // int64 as a decimal string, the canonical proto3 JSON form.
    if (meaningful.rejectedItems > 0) partial[REJECTED_FIELD[signal][0]] = String(meaningful.rejectedItems);
    if (meaningful.errorMessage !== '') partial.errorMessage = meaningful.errorMessage;
    return Buffer.from(JSON.stringify({ partialSuccess: partial }), 'utf8');
  }
  if (meaningful === undefined) return Buffer.alloc(0);
  const inner: Buffer[] = [];
  if (meaningful.rejectedItems > 0) inner.push(encodeVarintField(PARTIAL_SUCCESS_REJECTED, meaningful.rejectedItems));
  if (meaningful.errorMessage !== '') {
    inner.push(encodeStringField(PARTIAL_SUCCESS_ERROR_MESSAGE, meaningful.errorMessage));
  }
  return encodeBytesField(RESPONSE_PARTIAL_SUCCESS, Buffer.concat(inner));
}

/**
 * Reads the partial success out of the collector's Export*ServiceResponse; `undefined` for a full success,
 * including an empty body.
 * @throws OtlpPayloadError when the body is not such a response.
 */
export function decodeExportResponse(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): OtlpPartialSuccess | undefined {
  const decoded = encoding === 'json' ? decodeJsonResponse(signal, body) : decodeProtobufResponse(body);
  // An absurd count from the collector is still a rejection, not a reason to fail the export.
  if (decoded !== undefined) decoded.rejectedItems = Math.min(decoded.rejectedItems, Number.MAX_SAFE_INTEGER);
  return normalize(decoded);
}

/** Adds rejected counts and joins messages: the client sees what the gateway and the collector both refused. */
export function mergePartialSuccess(...parts: Array<OtlpPartialSuccess | undefined>): OtlpPartialSuccess | undefined {
  let rejectedItems = 0;
  const messages: string[] = [];
  for (const part of parts) {
    if (part === undefined) continue;
    rejectedItems += part.rejectedItems;
    if (part.errorMessage !== '') messages.push(part.errorMessage);
  }
  return normalize({ rejectedItems, errorMessage: messages.join('; ') });
}

/** Encodes the google.rpc.Status body of an OTLP/HTTP 4xx or 5xx answer. */
export function encodeRpcStatus(encoding: OtlpEncoding, status: RpcStatus): Buffer {
  if (!Number.isInteger(status.code) || status.code < 0 || status.code > 0x7fffffff) {
    throw new TypeError(`google.rpc.Status code must be a non-negative int32, got ${status.code}`);
  }
  if (encoding === 'json') return Buffer.from(JSON.stringify({ code: status.code, message: status.message }), 'utf8');
  const fields: Buffer[] = [];
  if (status.code !== 0) fields.push(encodeVarintField(STATUS_CODE, status.code));
  if (status.message !== '') fields.push(encodeStringField(STATUS_MESSAGE, status.message));
  return Buffer.concat(fields);
}

function normalize(partialSuccess: OtlpPartialSuccess | undefined): OtlpPartialSuccess | undefined {
  if (partialSuccess === undefined) return undefined;
  const { rejectedItems, errorMessage } = partialSuccess;
  if (!Number.isSafeInteger(rejectedItems) || rejectedItems < 0) {
    throw new TypeError(`rejected item count must be a non-negative integer, got ${rejectedItems}`);
  }
  if (rejectedItems === 0 && errorMessage === '') return undefined;
  return { rejectedItems, errorMessage };
}

function decodeProtobufResponse(body: Buffer): OtlpPartialSuccess | undefined {
  let partialSuccess: OtlpPartialSuccess | undefined;
  const reader = new WireReader(body, 0, body.length);
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber !== RESPONSE_PARTIAL_SUCCESS) {
      reader.skipValue();
      continue;
    }
    const end = reader.expectLengthDelimited('partial_success');
    // Repeated occurrences of a message field merge; within it, the last scalar wins.
    partialSuccess ??= { rejectedItems: 0, errorMessage: '' };
    const inner = new WireReader(body, reader.pos, end);
    while (!inner.atEnd()) {
      inner.readTag();
      if (inner.fieldNumber === PARTIAL_SUCCESS_REJECTED) {
        if (inner.wireType !== WIRE_VARINT) {
          throw new OtlpPayloadError('partial_success rejected count is not a varint');
        }
        partialSuccess.rejectedItems = inner.readInt64();
      } else if (inner.fieldNumber === PARTIAL_SUCCESS_ERROR_MESSAGE) {
        const messageEnd = inner.expectLengthDelimited('partial_success.error_message');
        partialSuccess.errorMessage = body.toString('utf8', inner.pos, messageEnd);
        inner.pos = messageEnd;
      } else {
        inner.skipValue();
      }
    }
    reader.pos = end;
  }
  if (partialSuccess !== undefined && partialSuccess.rejectedItems < 0) {
    throw new OtlpPayloadError('partial_success rejected count is negative');
  }
  return partialSuccess;
}

function decodeJsonResponse(signal: OtlpSignal, body: Buffer): OtlpPartialSuccess | undefined {
  const text = body.toString('utf8');
  if (text.trim() === '') return undefined;
  let root: unknown;
  try {
    root = JSON.parse(text);
  } catch (error) {
    throw new OtlpPayloadError(`export response is not valid JSON: ${(error as Error).message}`);
  }
  if (!isObject(root)) throw new OtlpPayloadError('export response must be a JSON object');
  const partial = root.partialSuccess ?? root.partial_success;
  if (partial === undefined || partial === null) return undefined;
  if (!isObject(partial)) throw new OtlpPayloadError('partialSuccess must be a JSON object');
  const [camel, snake] = REJECTED_FIELD[signal];
  const rejected = partial[camel] ?? partial[snake];
  const message = partial.errorMessage ?? partial.error_message;
  if (message !== undefined && message !== null && typeof message !== 'string') {
    throw new OtlpPayloadError('partialSuccess.errorMessage must be a string');
  }
  return { rejectedItems: parseCount(rejected, camel), errorMessage: message ?? '' };
}

function parseCount(value: unknown, name: string): number {
  if (value === undefined || value === null) return 0;
  // proto3 JSON writes int64 as a decimal string but readers must accept numbers too.
  const count = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof count !== 'number' || !Number.isInteger(count) || count < 0) {
    throw new OtlpPayloadError(`partialSuccess.${name} must be a non-negative integer`);
  }
  return count;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
