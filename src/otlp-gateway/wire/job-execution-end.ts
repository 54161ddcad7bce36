import type { OtlpEncoding } from '../../otlp/otlp-encoding';
import { WIRE_FIXED64, WIRE_LENGTH_DELIMITED, WireReader } from '../../otlp/otlp-wire';

/**
 * How a job ended, as its runner's `job_execution` span says: the span's end and its `ci.job.status`
 * attribute (GitLab Runner writes it there). SPEC §10 closes the job span from this when no GitLab
 * webhook will.
 */
export interface JobExecutionEnd {
  readonly endMs: number;
  readonly status?: string;
}

const JOB_EXECUTION = 'job_execution';
const JOB_EXECUTION_BYTES = Buffer.from(JOB_EXECUTION);
const STATUS_KEY = 'ci.job.status';
const STATUS_ERROR = 2;

/**
 * The `job_execution` spans of an export (already enforced: well formed, in the grant's trace) whose
 * parent is `jobSpanId`. Almost every export has none: a byte search rules them out before any parsing.
 */
export function jobExecutionEnds(encoding: OtlpEncoding, body: Buffer, jobSpanId: string): JobExecutionEnd[] {
  if (body.indexOf(JOB_EXECUTION_BYTES) < 0) return [];
  return encoding === 'json' ? fromJson(body, jobSpanId) : fromProtobuf(body, jobSpanId);
}

/**
 * The same from the spans enforcement found named `job_execution` (byte ranges of `body`, protobuf): no
 * search of the whole export, which cost the gateway a share of its CPU per export (issue 21 profile).
 */
export function jobExecutionEndsOf(body: Buffer, spans: ReadonlyArray<readonly [number, number]>, jobSpanId: string): JobExecutionEnd[] {
  const ends: JobExecutionEnd[] = [];
  for (const [start, end] of spans) {
    const read = readSpan(new WireReader(body, start, end));
    if (read.name === JOB_EXECUTION && read.parentSpanId === jobSpanId) ends.push({ endMs: read.endMs, status: read.status });
  }
  return ends;
}

type Json = Record<string, unknown>;
const list = (value: unknown): Json[] => (Array.isArray(value) ? (value as Json[]) : []);

function fromJson(body: Buffer, jobSpanId: string): JobExecutionEnd[] {
  const ends: JobExecutionEnd[] = [];
  const request = JSON.parse(body.toString('utf8')) as Json;
  for (const resourceSpans of list(request.resourceSpans)) {
    for (const scopeSpans of list(resourceSpans.scopeSpans)) {
      for (const span of list(scopeSpans.spans)) {
        if (span.name !== JOB_EXECUTION || String(span.parentSpanId ?? '').toLowerCase() !== jobSpanId) continue;
        const status = list(span.attributes).find((attribute) => attribute.key === STATUS_KEY);
        const statusValue = (status?.value as Json | undefined)?.stringValue;
        const failed = (span.status as Json | undefined)?.code === STATUS_ERROR;
        ends.push({
          endMs: Number(BigInt(String(span.endTimeUnixNano ?? '0')) / 1_000_000n),
          status: typeof statusValue === 'string' ? statusValue : failed ? 'failed' : undefined,
        });
      }
    }
  }
  return ends;
}

/** Walks ExportTraceServiceRequest → ResourceSpans(1) → ScopeSpans(2) → Span(2), reading only what it needs. */
function fromProtobuf(body: Buffer, jobSpanId: string): JobExecutionEnd[] {
  const ends: JobExecutionEnd[] = [];
  const each = (reader: WireReader, field: number, visit: (inner: WireReader) => void) => {
    while (!reader.atEnd()) {
      reader.readTag();
      if (reader.fieldNumber === field && reader.wireType === WIRE_LENGTH_DELIMITED) {
        const end = reader.readLengthDelimitedEnd();
        visit(new WireReader(reader.buf, reader.pos, end));
        reader.pos = end;
      } else reader.skipValue();
    }
  };
  each(new WireReader(body, 0, body.length), 1, (resourceSpans) =>
    each(resourceSpans, 2, (scopeSpans) =>
      each(scopeSpans, 2, (span) => {
        const read = readSpan(span);
        if (read.name === JOB_EXECUTION && read.parentSpanId === jobSpanId) ends.push({ endMs: read.endMs, status: read.status });
      }),
    ),
  );
  return ends;
}

function readSpan(span: WireReader): { name?: string; parentSpanId?: string; endMs: number; status?: string } {
  let name: string | undefined;
  let parentSpanId: string | undefined;
  let endMs = 0;
  let status: string | undefined;
  let failed = false;
  const bytes = () => {
    const end = span.readLengthDelimitedEnd();
    const value = span.buf.subarray(span.pos, end);
    span.pos = end;
    return value;
  };
  while (!span.atEnd()) {
    span.readTag();
    if (span.fieldNumber === 4 && span.wireType === WIRE_LENGTH_DELIMITED) parentSpanId = bytes().toString('hex');
    else if (span.fieldNumber === 5 && span.wireType === WIRE_LENGTH_DELIMITED) name = bytes().toString('utf8');
    else if (span.fieldNumber === 8 && span.wireType === WIRE_FIXED64) {
      endMs = Number(span.buf.readBigUInt64LE(span.pos) / 1_000_000n);
      span.pos += 8;
    } else if (span.fieldNumber === 9 && span.wireType === WIRE_LENGTH_DELIMITED) {
      const end = span.readLengthDelimitedEnd();
      const attribute = keyValue(new WireReader(span.buf, span.pos, end));
      if (attribute.key === STATUS_KEY) status = attribute.value;
      span.pos = end;
    } else if (span.fieldNumber === 15 && span.wireType === WIRE_LENGTH_DELIMITED) {
      const end = span.readLengthDelimitedEnd();
      const statusReader = new WireReader(span.buf, span.pos, end);
      while (!statusReader.atEnd()) {
        statusReader.readTag();
        if (statusReader.fieldNumber === 3 && statusReader.wireType === 0) failed = statusReader.readVarint() === STATUS_ERROR;
        else statusReader.skipValue();
      }
      span.pos = end;
    } else span.skipValue();
  }
  return { name, parentSpanId, endMs, status: status ?? (failed ? 'failed' : undefined) };
}

/** A KeyValue's key, and its value when it is a string (AnyValue field 1). */
function keyValue(reader: WireReader): { key?: string; value?: string } {
  let key: string | undefined;
  let value: string | undefined;
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === 1 && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const end = reader.readLengthDelimitedEnd();
      key = reader.buf.toString('utf8', reader.pos, end);
      reader.pos = end;
    } else if (reader.fieldNumber === 2 && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const end = reader.readLengthDelimitedEnd();
      const any = new WireReader(reader.buf, reader.pos, end);
      while (!any.atEnd()) {
        any.readTag();
        if (any.fieldNumber === 1 && any.wireType === WIRE_LENGTH_DELIMITED) {
          const valueEnd = any.readLengthDelimitedEnd();
          value = any.buf.toString('utf8', any.pos, valueEnd);
          any.pos = valueEnd;
        } else any.skipValue();
      }
      reader.pos = end;
    } else reader.skipValue();
  }
  return { key, value };
}
