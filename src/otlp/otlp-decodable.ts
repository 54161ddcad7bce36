/**
 * What the Collector's protobuf decoder (pdata) refuses in a well-framed OTLP message, checked without decoding it.
 * The Collector decodes a request whole: one value it refuses makes it answer 400 to the whole request, and every
 * export coalesced into that request is lost with it. So the gateway forwards nothing it could not decode.
 *
 * pdata's rules (its generated unmarshalers and its TraceID/SpanID types):
 * - a known field must come in its declared wire type: a length-delimited `kind`, a varint `name`, a fixed32
 *   `start_time_unix_nano` are each an error, whatever the value;
 * - trace ids are 16 bytes or empty, span ids 8 bytes or empty (`invalid length for SpanID`);
 * - groups (wire types 3 and 4) are not read: an unknown field that is a group fails the decoder unless empty, a
 *   known one always. No OTLP encoder writes one, so a group anywhere is refused.
 * And one rule pdata does not apply but proto3 does: strings are UTF-8. Go's protobuf runtime, which decoders behind
 * the Collector (and older Collectors' gRPC paths) use, refuses invalid UTF-8 in a string field.
 *
 * Framing (lengths past their message, varints over 10 bytes, field number 0, wire types 6 and 7) fails it as well,
 * and is reported the same way: the caller decides whether that refuses an item or the whole export.
 */
import { isUtf8 } from 'node:buffer';
import { OtlpField, OtlpMessageName, otlpField, otlpFields } from './otlp-fields';
import { WIRE_FIXED32, WIRE_FIXED64, WIRE_LENGTH_DELIMITED, WIRE_VARINT } from './otlp-wire';

// What a field of a message is, by field number (0: unknown to this schema, skipped as pdata skips it).
const UNKNOWN = 0;
const VARINT = 1;
const FIXED64 = 2;
const FIXED32 = 3;
const STRING = 4;
const BYTES = 5;
const TRACE_ID = 6;
const SPAN_ID = 7;
const MESSAGE = 8;
type FieldKind = typeof VARINT | typeof FIXED64 | typeof FIXED32 | typeof STRING | typeof BYTES | typeof TRACE_ID | typeof SPAN_ID | typeof MESSAGE;

/** The fields of one OTLP message, as the Collector's decoder reads them. */
export interface MessageRule {
  readonly name: string;
  /** FieldKind by field number. */
  readonly kinds: Uint8Array;
  readonly fieldNames: readonly string[];
  readonly messages: ReadonlyArray<MessageRule | undefined>;
}

function kindOf(field: OtlpField): FieldKind {
  if (field.message !== undefined) return MESSAGE;
  // A packed repeated number comes length-delimited: no message these rules check has one.
  if (field.repeated && field.wireType !== WIRE_LENGTH_DELIMITED) throw new Error(`${field.name}: packed fields are not checked`);
  switch (field.scalar) {
    case 'string':
      return STRING;
    case 'bytes':
      return BYTES;
    case 'TraceID':
      return TRACE_ID;
    case 'SpanID':
      return SPAN_ID;
    default:
      return field.wireType === WIRE_VARINT ? VARINT : field.wireType === WIRE_FIXED64 ? FIXED64 : FIXED32;
  }
}

const rules = new Map<OtlpMessageName, MessageRule>();

/** The rule of a message of the OTLP table, with the rules of the messages it holds (made once each). */
function messageRule(message: OtlpMessageName): MessageRule {
  const made = rules.get(message);
  if (made !== undefined) return made;
  const fields = otlpFields(message);
  const kinds = new Uint8Array(Math.max(...fields.map(({ number }) => number)) + 1);
  const fieldNames: string[] = [];
  const messages: Array<MessageRule | undefined> = [];
  const rule: MessageRule = { name: message, kinds, fieldNames, messages };
  // Kept before its fields are linked: AnyValue and ArrayValue hold each other.
  rules.set(message, rule);
  for (const field of fields) {
    kinds[field.number] = kindOf(field);
    fieldNames[field.number] = field.name;
    messages[field.number] = field.message === undefined ? undefined : messageRule(field.message);
  }
  return rule;
}

const KEY_VALUE = messageRule('KeyValue');
export const RESOURCE_RULE = messageRule('Resource');
export const SCOPE_RULE = messageRule('InstrumentationScope');
export const SPAN_RULE = messageRule('Span');
export const LOG_RECORD_RULE = messageRule('LogRecord');

/**
 * An OTLP protobuf body as the checks read it: bytes one by one, and four at a time through a view made once per body
 * (a view per string would cost more than the check).
 */
export class ProtobufBody {
  readonly view: DataView;

  constructor(readonly buf: Buffer) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
}

/**
 * Values nest (AnyValue in ArrayValue in AnyValue...): beyond this depth a message is refused rather than walked,
 * so a hostile nesting cannot exhaust the stack. No real attribute comes near it.
 */
export const MAX_MESSAGE_DEPTH = 64;

// The tags of KeyValue.key and .value, and of AnyValue's scalar members, in the form plainKeyValueDecodable reads
// (each under 128: one byte).
const KEY_VALUE_KEY_TAG = otlpField('KeyValue', 'key').tag;
const KEY_VALUE_VALUE_TAG = otlpField('KeyValue', 'value').tag;
const ANY_VALUE_STRING_TAG = otlpField('AnyValue', 'string_value').tag;
const ANY_VALUE_BOOL_TAG = otlpField('AnyValue', 'bool_value').tag;
const ANY_VALUE_INT_TAG = otlpField('AnyValue', 'int_value').tag;
const ANY_VALUE_DOUBLE_TAG = otlpField('AnyValue', 'double_value').tag;
const ANY_VALUE_BYTES_TAG = otlpField('AnyValue', 'bytes_value').tag;

const WIRE_TYPE_OF: Record<FieldKind, number> = {
  [VARINT]: WIRE_VARINT,
  [FIXED64]: WIRE_FIXED64,
  [FIXED32]: WIRE_FIXED32,
  [STRING]: WIRE_LENGTH_DELIMITED,
  [BYTES]: WIRE_LENGTH_DELIMITED,
  [TRACE_ID]: WIRE_LENGTH_DELIMITED,
  [SPAN_ID]: WIRE_LENGTH_DELIMITED,
  [MESSAGE]: WIRE_LENGTH_DELIMITED,
};

/**
 * Why the Collector could not decode the message `rule` in `buf[start, end)`, or `undefined` when it can. Reads
 * every field once, allocating nothing unless it finds something (or a non-ASCII string, checked natively).
 */
export function undecodableReason(body: ProtobufBody, start: number, end: number, rule: MessageRule, depth = 0): string | undefined {
  const { buf } = body;
  if (depth > MAX_MESSAGE_DEPTH) return `${rule.name}: nested deeper than ${MAX_MESSAGE_DEPTH} messages`;
  const { kinds } = rule;
  let pos = start;
  while (pos < end) {
    // Tag: a field number of 1 .. 2^29-1 in at most 5 bytes, as WireReader reads it. One byte (fields 1 to 15) is
    // read without the loop: nearly every tag of OTLP.
    let tag = buf[pos++];
    if (tag >= 0x80) {
      tag &= 0x7f;
      let shift = 128;
      for (let i = 1; ; i++) {
        if (pos >= end || i === 5) return `${rule.name}: malformed protobuf tag`;
        const byte = buf[pos++];
        tag += (byte & 0x7f) * shift;
        if (byte < 0x80) break;
        shift *= 128;
      }
    }
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field < 1 || field > 0x1fffffff) return `${rule.name}: protobuf field number ${field}`;
    const kind = field < kinds.length ? kinds[field] : UNKNOWN;
    if (wireType === 2) {
      if (pos >= end) return `${rule.name}: malformed protobuf length`;
      let length = buf[pos++];
      if (length >= 0x80) {
        length &= 0x7f;
        let shift = 128;
        for (let i = 1; ; i++) {
          if (pos >= end || i === 10) return `${rule.name}: malformed protobuf length`;
          const byte = buf[pos++];
          length += (byte & 0x7f) * shift;
          if (byte < 0x80) break;
          shift *= 128;
        }
      }
      const valueEnd = pos + length;
      if (valueEnd > end) return `${rule.name}: field ${field} runs past its message`;
      if (kind === STRING) {
        if (!utf8(body, pos, valueEnd)) return `${rule.name}.${rule.fieldNames[field]} is not valid UTF-8`;
      } else if (kind === TRACE_ID) {
        if (length !== 16 && length !== 0) return `${rule.name}.${rule.fieldNames[field]} is ${length} bytes, not 16`;
      } else if (kind === SPAN_ID) {
        if (length !== 8 && length !== 0) return `${rule.name}.${rule.fieldNames[field]} is ${length} bytes, not 8`;
      } else if (kind === MESSAGE) {
        const message = rule.messages[field]!;
        if (message !== KEY_VALUE || !plainKeyValueDecodable(body, pos, valueEnd)) {
          const reason = undecodableReason(body, pos, valueEnd, message, depth + 1);
          if (reason !== undefined) return reason;
        }
      } else if (kind !== UNKNOWN && kind !== BYTES) {
        return wrongWireType(rule, field, wireType);
      }
      pos = valueEnd;
    } else if (wireType === 0) {
      const varintEnd = Math.min(pos + 10, end);
      while (pos < varintEnd && buf[pos] >= 0x80) pos++;
      if (pos >= varintEnd) return `${rule.name}: malformed protobuf varint`;
      pos++;
      if (kind !== UNKNOWN && kind !== VARINT) return wrongWireType(rule, field, wireType);
    } else if (wireType === 1 || wireType === 5) {
      pos += wireType === 1 ? 8 : 4;
      if (pos > end) return `${rule.name}: truncated fixed-width field ${field}`;
      if (kind !== UNKNOWN && kind !== (wireType === 1 ? FIXED64 : FIXED32)) return wrongWireType(rule, field, wireType);
    } else if (wireType === 3 || wireType === 4) {
      return `${rule.name}: field ${field} is a protobuf group`;
    } else {
      return `${rule.name}: field ${field} has wire type ${wireType}`;
    }
  }
  return undefined;
}

/**
 * Whether field `field` of `rule` may come in `wireType` when that is not length-delimited (see
 * lengthDelimitedDecodable): a known field only in its declared one, an unknown one in any but a group.
 */
export function wireTypeDecodable(rule: MessageRule, field: number, wireType: number): boolean {
  const kind = field < rule.kinds.length ? rule.kinds[field] : UNKNOWN;
  if (kind === UNKNOWN) return wireType === 0 || wireType === 1 || wireType === 5;
  return (wireType === 0 && kind === VARINT) || (wireType === 1 && kind === FIXED64) || (wireType === 5 && kind === FIXED32);
}

/**
 * Whether the Collector decodes `buf[start, end)` as the length-delimited value of field `field` of `rule`, the field
 * being one level below a message the caller walks itself (a span's fields, as the protobuf walker reads them). The
 * same answer as undecodableReason on the enclosing message, field by field, so a caller that walks a message's
 * fields once for its own purposes need not walk them a second time; attributes in their usual form are checked
 * without the general walk. Ask undecodableReason for the reason of a false.
 */
export function lengthDelimitedDecodable(body: ProtobufBody, rule: MessageRule, field: number, start: number, end: number): boolean {
  const kind = field < rule.kinds.length ? rule.kinds[field] : UNKNOWN;
  if (kind === STRING) return utf8(body, start, end);
  if (kind === MESSAGE) {
    const message = rule.messages[field]!;
    if (message === KEY_VALUE && plainKeyValueDecodable(body, start, end)) return true;
    return undecodableReason(body, start, end, message, 1) === undefined;
  }
  if (kind === TRACE_ID) return end - start === 16 || end === start;
  if (kind === SPAN_ID) return end - start === 8 || end === start;
  return kind === UNKNOWN || kind === BYTES;
}

/**
 * True for a KeyValue as every OTLP encoder writes it, a key under 128 bytes and then one scalar AnyValue (string,
 * bool, int, double or bytes) under 16 KiB, that the Collector decodes: checked in a straight line, without the
 * general walk's calls per field. False for every other form, decodable or not: undecodableReason decides those.
 */
export function plainKeyValueDecodable(body: ProtobufBody, start: number, end: number): boolean {
  const { buf } = body;
  if (end - start < 2 || buf[start] !== KEY_VALUE_KEY_TAG) return false;
  const keyStart = start + 2;
  const keyEnd = keyStart + buf[start + 1];
  if (buf[start + 1] >= 0x80 || keyEnd > end) return false;
  if (keyEnd === end) return utf8(body, keyStart, keyEnd);
  const lengthAt = keyEnd + 1;
  if (buf[keyEnd] !== KEY_VALUE_VALUE_TAG || lengthDelimitedEnd(buf, lengthAt, end) !== end) return false;
  let pos = buf[lengthAt] < 0x80 ? lengthAt + 1 : lengthAt + 2;
  if (pos === end) return utf8(body, keyStart, keyEnd);
  // The AnyValue: one field, ending where the KeyValue ends.
  const tag = buf[pos++];
  if (tag === ANY_VALUE_STRING_TAG) {
    if (lengthDelimitedEnd(buf, pos, end) !== end) return false;
    // Key, framing and value in one pass when they are all ASCII, as they nearly always are.
    return ascii(body, keyStart, end) || (utf8(body, keyStart, keyEnd) && utf8(body, buf[pos] < 0x80 ? pos + 1 : pos + 2, end));
  }
  if (tag === ANY_VALUE_BYTES_TAG) return lengthDelimitedEnd(buf, pos, end) === end && utf8(body, keyStart, keyEnd);
  if (tag === ANY_VALUE_BOOL_TAG || tag === ANY_VALUE_INT_TAG) {
    // A varint of at most 10 bytes whose last byte is the KeyValue's last.
    if (end - pos > 10 || buf[end - 1] >= 0x80) return false;
    for (let i = pos; i < end - 1; i++) if (buf[i] < 0x80) return false;
    return utf8(body, keyStart, keyEnd);
  }
  return tag === ANY_VALUE_DOUBLE_TAG && end - pos === 8 && utf8(body, keyStart, keyEnd);
}

/** The end of the length-delimited value whose one- or two-byte length is at `pos`; -1 for any other. */
function lengthDelimitedEnd(buf: Buffer, pos: number, end: number): number {
  if (pos >= end) return -1;
  const low = buf[pos];
  if (low < 0x80) return pos + 1 + low;
  if (pos + 1 >= end || buf[pos + 1] >= 0x80) return -1;
  return pos + 2 + ((low & 0x7f) | (buf[pos + 1] << 7));
}

function wrongWireType(rule: MessageRule, field: number, wireType: number): string {
  const kind = rule.kinds[field] as FieldKind;
  return `${rule.name}.${rule.fieldNames[field]} has wire type ${wireType}, not ${WIRE_TYPE_OF[kind]}`;
}

/**
 * UTF-8 as Go's protobuf runtime checks it: ASCII, nearly every OTLP string, in JavaScript; anything else by Node's
 * validator (on a subarray, whose allocation costs several times the ASCII check of a short string).
 */
export function utf8(body: ProtobufBody, start: number, end: number): boolean {
  return ascii(body, start, end) || isUtf8(body.buf.subarray(start, end));
}

/**
 * No byte of `[start, end)` is over 0x7f: four bytes a read, eight a step, the last eight overlapping the ones before
 * rather than a loop over the few left (OTLP strings are short: 18 bytes on average in the bench's batch). A third of
 * the cost of a test per byte on that batch.
 */
function ascii({ buf, view }: ProtobufBody, start: number, end: number): boolean {
  let bits = 0;
  if (end - start >= 8) {
    for (let i = start; i < end - 8; i += 8) bits |= view.getUint32(i, true) | view.getUint32(i + 4, true);
    bits |= view.getUint32(end - 8, true) | view.getUint32(end - 4, true);
  } else if (end - start >= 4) {
    bits = view.getUint32(start, true) | view.getUint32(end - 4, true);
  } else {
    for (let i = start; i < end; i++) bits |= buf[i];
  }
  return (bits & 0x80808080) === 0;
}
