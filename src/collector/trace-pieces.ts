import type { OtlpEncoding } from '../otlp/otlp-encoding';
import { ENVELOPE_FIELDS } from '../otlp/otlp-fields';
import { lengthDelimitedHeader, WIRE_LENGTH_DELIMITED, WireReader } from '../otlp/otlp-wire';

/*
 * Traces cut into one span per piece, and pieces joined into one request: what a sender that keeps its spans does when
 * the collector refuses a request for its size (413) or for a part it cannot decode (400), so that only the span at
 * fault is given up (see exportBisecting). Only on that path: a delivery the collector takes never comes here.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** A `ResourceSpans` (OTLP/JSON, either spelling) as one `ResourceSpans` per span, each keeping its resource and scope. */
function jsonResourceSpansPerSpan(resourceSpans: Json): Json[] {
  const scopesKey = 'scopeSpans' in resourceSpans ? 'scopeSpans' : 'scope_spans';
  const scopes = resourceSpans[scopesKey];
  if (!Array.isArray(scopes)) return [resourceSpans];
  return scopes.filter(isObject).flatMap((scope) => {
    const spans = scope.spans;
    if (!Array.isArray(spans)) return [];
    return spans.map((span: unknown) => ({ ...resourceSpans, [scopesKey]: [{ ...scope, spans: [span] }] }));
  });
}

/**
 * OTLP/JSON `ResourceSpans` joined by commas (an outbox entry: one span's, or a bundle's) as one `ResourceSpans` per
 * span; [] when that is one span already, or the text is not such a list (nothing smaller can be made of it).
 */
export function cutJsonResourceSpans(text: string): string[] {
  let list: unknown;
  try {
    list = JSON.parse(`[${text}]`);
  } catch {
    return [];
  }
  if (!Array.isArray(list) || !list.every(isObject)) return [];
  const pieces = list.flatMap(jsonResourceSpansPerSpan);
  return pieces.length > 1 ? pieces.map((piece) => JSON.stringify(piece)) : [];
}

/** The fields of a message at `[start, end)` split into the repeated field `repeated`'s occurrences and everything else, as bytes. */
function fieldsOf(body: Buffer, start: number, end: number, repeated: number): { rest: Buffer[]; items: Buffer[] } {
  const reader = new WireReader(body, start, end);
  const rest: Buffer[] = [];
  const items: Buffer[] = [];
  while (!reader.atEnd()) {
    const fieldStart = reader.pos;
    reader.readTag();
    if (reader.fieldNumber === repeated && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const valueEnd = reader.readLengthDelimitedEnd();
      items.push(body.subarray(reader.pos, valueEnd));
      reader.pos = valueEnd;
    } else {
      reader.skipValue();
      rest.push(body.subarray(fieldStart, reader.pos));
    }
  }
  return { rest, items };
}

const message = (fields: readonly Buffer[]): Buffer => Buffer.concat(fields);
const field = (fieldNumber: number, value: Buffer): Buffer => Buffer.concat([lengthDelimitedHeader(fieldNumber, value.length), value]);

/**
 * An ExportTraceServiceRequest (resource_spans = 1) → ResourceSpans (scope_spans = 2) → ScopeSpans (spans = 2) cut
 * into one request per span, each with its resource's and its scope's other fields as they came (unknown ones too).
 */
function protobufRequestPerSpan(body: Buffer): Buffer[] {
  const { containers, scopes, items } = ENVELOPE_FIELDS;
  const request = fieldsOf(body, 0, body.length, containers);
  const pieces: Buffer[] = [];
  for (const resourceSpans of request.items) {
    const resource = fieldsOf(resourceSpans, 0, resourceSpans.length, scopes);
    for (const scopeSpans of resource.items) {
      const scope = fieldsOf(scopeSpans, 0, scopeSpans.length, items);
      for (const span of scope.items) {
        const oneScope = message([...scope.rest, field(items, span)]);
        const oneResource = message([...resource.rest, field(scopes, oneScope)]);
        pieces.push(message([...request.rest, field(containers, oneResource)]));
      }
    }
  }
  return pieces;
}

/**
 * A traces export request cut into one request per span; [] when it holds one span or none, or does not decode (the
 * collector's refusal then stands for the whole of it).
 */
export function cutTraceRequest(encoding: OtlpEncoding, body: Buffer): Buffer[] {
  let pieces: Buffer[];
  try {
    if (encoding === 'protobuf') pieces = protobufRequestPerSpan(body);
    else {
      const request = JSON.parse(body.toString('utf8')) as unknown;
      if (!isObject(request)) return [];
      const key = 'resourceSpans' in request ? 'resourceSpans' : 'resource_spans';
      const resources = request[key];
      if (!Array.isArray(resources)) return [];
      pieces = resources
        .filter(isObject)
        .flatMap(jsonResourceSpansPerSpan)
        .map((piece) => Buffer.from(JSON.stringify({ ...request, [key]: [piece] })));
    }
  } catch {
    return [];
  }
  return pieces.length > 1 ? pieces : [];
}

/**
 * Traces export requests as one request. Protobuf: placed one after another (a request is one repeated field). JSON:
 * their `resourceSpans` in one list, read again only here, on the path of a refusal (a JSON page is sent alone).
 */
export function joinTraceRequests(encoding: OtlpEncoding, requests: readonly Buffer[]): Buffer {
  if (requests.length === 1 || encoding === 'protobuf') return requests.length === 1 ? requests[0] : Buffer.concat(requests);
  const resourceSpans = requests.flatMap((request) => {
    const parsed = JSON.parse(request.toString('utf8')) as Json;
    return (parsed.resourceSpans ?? parsed.resource_spans ?? []) as unknown[];
  });
  return Buffer.from(JSON.stringify({ resourceSpans }));
}
