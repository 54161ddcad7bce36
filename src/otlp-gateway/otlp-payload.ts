import { NO_SPAN_LIMITS } from './otlp-identity';
import { enforceJsonExport } from './otlp-json-enforcement';
import { enforceProtobufExport } from './otlp-protobuf-enforcement';

export type OtlpSignal = 'traces' | 'metrics' | 'logs';
export type OtlpEncoding = 'protobuf' | 'json';

/** What the auth decision says the exporting job may write (SPEC §5, §6). */
export interface GatewayGrant {
  jobId: number;
  projectId: number;
  pipelineId: number;
  runnerId: number;
  /** 32 lowercase or uppercase hex digits. */
  traceId: string;
}

/**
 * Bounds on one span (SPEC §6, GitLab's design: 4 KB a span). Sizes are measured in the encoding the export
 * came in: the span's protobuf bytes, or its JSON text; an attribute value's size is its UTF-8 (or raw bytes)
 * length for a string or bytes value, its encoded size otherwise.
 */
export interface SpanLimits {
  maxBytes: number;
  maxAttributes: number;
  maxAttributeValueBytes: number;
}

/** Spans the job may still send in this export under each shared limit (store: quota per job, rate per second). */
export interface SpanBudget {
  quota: number;
  rate: number;
}

/** Why spans were dropped, one count per reason (traces only). */
export interface SpanRejections {
  foreignTrace: number;
  overLimits: number;
  overQuota: number;
  overRate: number;
}

export interface EnforcedExport {
  /** The request to forward, in the encoding it arrived in. */
  body: Buffer;
  /** Spans, metric data points or log records left in `body`. */
  forwardedItems: number;
  /** Spans the gateway dropped (foreign trace, over the per-span limits, quota or rate); always 0 for metrics and logs. */
  rejectedItems: number;
  rejections?: SpanRejections;
  /** Why items were rejected, for the OTLP partial success `error_message`. */
  errorMessage?: string;
  /**
   * No item is left: the HTTP layer answers (with partial success when `rejectedItems > 0`) without calling
   * the collector. Also true for an export that carried no items at all.
   */
  nothingToForward: boolean;
}

/**
 * Applies SPEC §6 to one OTLP/HTTP export body: drops spans outside the grant's trace, over the per-span limits
 * or beyond the job's remaining budget; overwrites the CI identity attributes on every resource and wherever a
 * span, data point or log record carries them. Enforcement is an allow-list: every member that can hold spans,
 * metrics or logs is enforced (deprecated containers the Collector still reads are migrated into the current
 * ones) or dropped, never forwarded unchecked. Inside items, nothing else changes.
 *
 * @param spanBudget spans this job may still send; kept spans are counted in body order. A number is a quota
 *   with no rate. Ignored for metrics and logs.
 * @throws OtlpPayloadError when the body is not a well-formed export request of that signal and encoding.
 */
export function enforceExport(
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number | SpanBudget,
  spanLimits: SpanLimits = NO_SPAN_LIMITS,
): EnforcedExport {
  switch (encoding) {
    case 'protobuf':
      return enforceProtobufExport(signal, body, grant, spanBudget, spanLimits);
    case 'json':
      return enforceJsonExport(signal, body, grant, spanBudget, spanLimits);
    default: {
      const unknownEncoding: never = encoding;
      throw new TypeError(`unknown OTLP encoding ${String(unknownEncoding)}`);
    }
  }
}
