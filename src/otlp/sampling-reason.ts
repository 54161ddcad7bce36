/**
 * The `ci.sampling.reason` resource attribute (SPEC §11) in the bodies the gateway forwards or parks. A head-sampled
 * export says `head`; a provisional export is enforced before its pipeline's outcome is known, so each of its
 * resources carries a slot that `settleSamplingReason` later fills with the outcome, without enforcing or encoding
 * the body again: parked bodies go to the collector as stored, concatenated (issue 28), protobuf ones with the
 * outcome's trace_state appended to each span (`settleProvisionalTraces`).
 */
import { SAMPLING_REASONS, SAMPLING_REASON_ATTRIBUTE, SamplingReason } from './ci-identity';
import type { OtlpEncoding } from './otlp-encoding';
import { ENVELOPE_FIELDS, fieldNumbers } from './otlp-fields';
import { ChunkList, WIRE_LENGTH_DELIMITED, WireReader, encodeBytesField, encodeStringField, lengthDelimitedHeader } from './otlp-wire';

export { SAMPLING_REASON_ATTRIBUTE };
export type { SamplingReason };

/** A reason the outcome decision keeps a provisionally traced pipeline for: what a slot is settled with. */
export type OutcomeSamplingReason = Exclude<SamplingReason, 'head'>;

/**
 * The tracestate of a pipeline traced provisionally, and of every span kept by its outcome: kept with probability 1,
 * which is honest, since the outcome does not depend on the trace's randomness (SPEC §11).
 */
export const OUTCOME_TRACE_STATE = 'ot=th:0';

/** What a provisional export's slot says until it is settled; never a reason a collector should see. */
export const PENDING_SAMPLING_REASON = 'pending';
export type ResourceSamplingReason = SamplingReason | typeof PENDING_SAMPLING_REASON;

// The envelope's fields, the same for all three signals, down to a resource's attributes; and a span's trace_state.
const { containers: REQUEST_RESOURCES, resource: CONTAINER_RESOURCE, scopes: CONTAINER_SCOPES, items: SCOPE_SPANS } = ENVELOPE_FIELDS;
const RESOURCE_ATTRIBUTES = fieldNumbers('Resource').attributes;
const { key: KEY_VALUE_KEY, value: KEY_VALUE_VALUE } = fieldNumbers('KeyValue');
const ANY_VALUE_STRING = fieldNumbers('AnyValue').string_value;
const SPAN_TRACE_STATE = fieldNumbers('Span').trace_state;

/**
 * The padding of a slot's AnyValue: a bytes field no version of AnyValue defines, so every protobuf decoder
 * (protobufjs, Go's, the Collector's pdata) skips it as an unknown field and reads the string value alone. AnyValue
 * is a oneof of seven members numbered 1 to 7; 1000 leaves room for any member OTLP may add.
 */
const SLOT_PADDING_FIELD = 1000;
const SLOT_TEXTS: readonly string[] = [...SAMPLING_REASONS, PENDING_SAMPLING_REASON];
const SLOT_TEXT_BYTES = Math.max(...SLOT_TEXTS.map((text) => Buffer.byteLength(text)));

/**
 * A slot's AnyValue: `string_value` = the reason, then field 1000 padded so that every reason gives the same length
 * (2 + 10 + 3 = 15 bytes): settling overwrites bytes and never moves one, so every length prefix around it holds.
 */
function slotAnyValue(text: string): Buffer {
  const value = Buffer.from(text, 'utf8');
  return Buffer.concat([encodeBytesField(ANY_VALUE_STRING, value), encodeBytesField(SLOT_PADDING_FIELD, Buffer.alloc(SLOT_TEXT_BYTES - value.length))]);
}

const SLOT_ANY_VALUE_BYTES = slotAnyValue(PENDING_SAMPLING_REASON).length;
if (!SLOT_TEXTS.every((text) => slotAnyValue(text).length === SLOT_ANY_VALUE_BYTES)) throw new Error('sampling reason slots must have one length');
const SLOT_KEY = encodeStringField(KEY_VALUE_KEY, SAMPLING_REASON_ATTRIBUTE);
/** The slot's KeyValue up to and including the string_value tag; what follows it is rewritten. */
const SLOT_PREFIX = Buffer.concat([SLOT_KEY, lengthDelimitedHeader(KEY_VALUE_VALUE, SLOT_ANY_VALUE_BYTES), Buffer.of(slotAnyValue('')[0])]);
const SLOT_KEY_VALUE_BYTES = SLOT_KEY.length + lengthDelimitedHeader(KEY_VALUE_VALUE, SLOT_ANY_VALUE_BYTES).length + SLOT_ANY_VALUE_BYTES;
/** The bytes after the prefix for each reason. */
const SLOT_TAILS: ReadonlyMap<string, Buffer> = new Map(SLOT_TEXTS.map((text) => [text, slotAnyValue(text).subarray(1)]));

/**
 * The `ci.sampling.reason` KeyValue (without its Resource.attributes tag) the protobuf walker writes on every
 * resource: a plain string for a reason already known, the fixed-length slot for the placeholder.
 */
export function protobufSamplingReason(reason: ResourceSamplingReason): Buffer {
  const anyValue = reason === PENDING_SAMPLING_REASON ? slotAnyValue(reason) : encodeStringField(ANY_VALUE_STRING, reason);
  return Buffer.concat([SLOT_KEY, encodeBytesField(KEY_VALUE_VALUE, anyValue)]);
}

/** The `ci.sampling.reason` member the JSON walker writes on every resource. Frozen: shared by every export of a grant. */
export function jsonSamplingReason(reason: ResourceSamplingReason): Readonly<Record<string, unknown>> {
  return Object.freeze({ key: SAMPLING_REASON_ATTRIBUTE, value: Object.freeze({ stringValue: reason }) });
}

const JSON_PLACEHOLDER = Buffer.from(JSON.stringify(jsonSamplingReason(PENDING_SAMPLING_REASON)), 'utf8');
const OUTCOME_REASONS = SAMPLING_REASONS.filter((reason) => reason !== 'head');
const JSON_SETTLED: ReadonlyMap<string, Buffer> = new Map(
  OUTCOME_REASONS.map((reason) => [reason, Buffer.from(JSON.stringify(jsonSamplingReason(reason)), 'utf8')]),
);

/**
 * Writes the outcome into every `ci.sampling.reason` slot of a body the export policy enforced for a provisional
 * grant (any signal; protobuf bodies may be several enforced requests concatenated). One pass, nothing decoded:
 *
 * - protobuf: the slots are overwritten in place and `body` itself is returned. Only the envelope is walked (request
 *   → Resource{Spans,Metrics,Logs} → Resource → attributes, everything else skipped by its length), and a slot is
 *   recognised by its exact bytes there (key, AnyValue length, string_value tag). Spans are never looked into: an
 *   exporter's span attribute that copies a slot byte for byte stays as it was written. (A search of the whole body
 *   for those bytes would also find them inside an exporter's string whose end cuts the slot short, and rewriting
 *   the bytes past that string could make the span, and every export concatenated with it, undecodable.) On
 *   resources the slot is always the gateway's: the walker drops an exporter's own `ci.sampling.reason` there.
 * - JSON: a new body with each placeholder member replaced. The placeholder is the exact text the walker writes
 *   (`{"key":"ci.sampling.reason","value":{"stringValue":"pending"}}`); in the JSON.stringify output the walker
 *   forwards, a quote inside a string is always escaped, so every match is a whole KeyValue object. An exporter's
 *   span attribute written exactly so is such an object: only its own value changes.
 *
 * @throws OtlpPayloadError when a protobuf body is not a well-formed export request (it was not enforced).
 */
export function settleSamplingReason(encoding: OtlpEncoding, body: Buffer, reason: OutcomeSamplingReason): Buffer {
  // Checked at run time too: a slot settled with anything else would carry a value no reader expects.
  if (!JSON_SETTLED.has(reason)) throw new TypeError(`not an outcome sampling reason: ${String(reason)}`);
  switch (encoding) {
    case 'protobuf':
      settleProtobufSlots(body, SLOT_TAILS.get(reason)!);
      return body;
    case 'json':
      return replaceAll(body, JSON_PLACEHOLDER, JSON_SETTLED.get(reason)!);
    default: {
      const unknownEncoding: never = encoding;
      throw new TypeError(`unknown OTLP encoding ${String(unknownEncoding)}`);
    }
  }
}

/**
 * A provisional traces export as it goes to the collector once its pipeline is kept (SPEC §11): settled with the
 * reason (settleSamplingReason) and every span saying trace_state `ot=th:0`. The JSON walker wrote that already; a
 * protobuf export is parked without it (appending a field to every span rewrites the whole body, and most provisional
 * pipelines are dropped), so here each span of each request gets it appended: a singular proto3 field's last
 * occurrence is the one decoders keep, so it overrides a trace_state the exporter wrote, and a span that says it
 * already (parked by a replica that still stamped at parking) says it twice, with the same value. A new body for
 * protobuf, nothing but the length prefixes around the spans and the appended fields changed.
 *
 * @throws OtlpPayloadError when a protobuf body is not a well-formed export request (it was not enforced).
 */
export function settleProvisionalTraces(encoding: OtlpEncoding, body: Buffer, reason: OutcomeSamplingReason): Buffer {
  const settled = settleSamplingReason(encoding, body, reason);
  return encoding === 'protobuf' ? withOutcomeTraceState(settled) : settled;
}

const OUTCOME_TRACE_STATE_FIELD = encodeStringField(SPAN_TRACE_STATE, OUTCOME_TRACE_STATE);

/** Every span of a protobuf traces body (concatenated requests too) with OUTCOME_TRACE_STATE appended. */
function withOutcomeTraceState(body: Buffer): Buffer {
  // One level of the envelope: each `fieldNumber` field rewritten by `inner`, every other field copied as it is.
  const rewriteEach = (out: ChunkList, start: number, end: number, fieldNumber: number, inner: (start: number, end: number) => void) => {
    const reader = new WireReader(body, start, end);
    while (!reader.atEnd()) {
      const fieldStart = reader.pos;
      const valueEnd = lengthDelimitedField(reader, fieldNumber);
      if (valueEnd < 0) out.copy(fieldStart, reader.pos);
      else {
        inner(reader.pos, valueEnd);
        reader.pos = valueEnd;
      }
    }
  };
  const out = new ChunkList(body);
  rewriteEach(out, 0, body.length, REQUEST_RESOURCES, (containerStart, containerEnd) => {
    const container = new ChunkList(body);
    rewriteEach(container, containerStart, containerEnd, CONTAINER_SCOPES, (scopeStart, scopeEnd) => {
      const scope = new ChunkList(body);
      rewriteEach(scope, scopeStart, scopeEnd, SCOPE_SPANS, (spanStart, spanEnd) => {
        scope.push(lengthDelimitedHeader(SCOPE_SPANS, spanEnd - spanStart + OUTCOME_TRACE_STATE_FIELD.length));
        scope.copy(spanStart, spanEnd);
        scope.push(OUTCOME_TRACE_STATE_FIELD);
      });
      container.pushMessage(CONTAINER_SCOPES, scope);
    });
    out.pushMessage(REQUEST_RESOURCES, container);
  });
  return out.toBuffer();
}

function settleProtobufSlots(body: Buffer, tail: Buffer): void {
  const request = new WireReader(body, 0, body.length);
  while (!request.atEnd()) {
    const containerEnd = lengthDelimitedField(request, REQUEST_RESOURCES);
    if (containerEnd < 0) continue;
    const container = new WireReader(body, request.pos, containerEnd);
    while (!container.atEnd()) {
      const resourceEnd = lengthDelimitedField(container, CONTAINER_RESOURCE);
      if (resourceEnd < 0) continue;
      const resource = new WireReader(body, container.pos, resourceEnd);
      while (!resource.atEnd()) {
        const attributeEnd = lengthDelimitedField(resource, RESOURCE_ATTRIBUTES);
        if (attributeEnd < 0) continue;
        const start = resource.pos;
        if (attributeEnd - start === SLOT_KEY_VALUE_BYTES && body.compare(SLOT_PREFIX, 0, SLOT_PREFIX.length, start, start + SLOT_PREFIX.length) === 0) {
          tail.copy(body, start + SLOT_PREFIX.length);
        }
        resource.pos = attributeEnd;
      }
      container.pos = resourceEnd;
    }
    request.pos = containerEnd;
  }
}

/** Reads the next field: the end of its value when it is `fieldNumber`, length-delimited; -1 (value skipped) otherwise. */
function lengthDelimitedField(reader: WireReader, fieldNumber: number): number {
  reader.readTag();
  if (reader.fieldNumber === fieldNumber && reader.wireType === WIRE_LENGTH_DELIMITED) return reader.readLengthDelimitedEnd();
  reader.skipValue();
  return -1;
}

/** `body` with every occurrence of `from` replaced by `to`; the bytes are ASCII, so a match is never inside a UTF-8 character. */
function replaceAll(body: Buffer, from: Buffer, to: Buffer): Buffer {
  const pieces: Buffer[] = [];
  let copied = 0;
  for (let at = body.indexOf(from); at !== -1; at = body.indexOf(from, copied)) {
    pieces.push(body.subarray(copied, at), to);
    copied = at + from.length;
  }
  if (copied === 0) return body;
  pieces.push(body.subarray(copied));
  return Buffer.concat(pieces);
}
