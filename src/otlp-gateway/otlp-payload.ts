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

export interface EnforcedExport {
  /** The request to forward, in the encoding it arrived in. */
  body: Buffer;
  /** Spans, metric data points or log records left in `body`. */
  forwardedItems: number;
  /** Spans the gateway dropped (foreign trace or over quota); always 0 for metrics and logs. */
  rejectedItems: number;
  /** Why items were rejected, for the OTLP partial success `error_message`. */
  errorMessage?: string;
  /**
   * No item is left: the HTTP layer answers (with partial success when `rejectedItems > 0`) without calling
   * the collector. Also true for an export that carried no items at all.
   */
  nothingToForward: boolean;
}

/**
 * Applies SPEC §6 to one OTLP/HTTP export body: drops spans outside the grant's trace or beyond the job's
 * remaining span quota, and overwrites the CI identity resource attributes on every resource. Nothing else in
 * the body changes.
 *
 * @param spanBudget spans this job may still send; kept spans are counted in body order. Ignored for
 *   metrics and logs.
 * @throws OtlpPayloadError when the body is not a well-formed export request of that signal and encoding.
 */
export function enforceExport(
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number,
): EnforcedExport {
  switch (encoding) {
    case 'protobuf':
      return enforceProtobufExport(signal, body, grant, spanBudget);
    case 'json':
      return enforceJsonExport(signal, body, grant, spanBudget);
    default: {
      const unknownEncoding: never = encoding;
      throw new TypeError(`unknown OTLP encoding ${String(unknownEncoding)}`);
    }
  }
}
