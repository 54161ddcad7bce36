import { encodingOf, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { decodeExportResponse, OtlpPartialSuccess } from '../otlp/otlp-response';
import { parseRetryAfter } from '../otlp/retry-after';

/**
 * What became of one export, decided in one place (`exportResult`) by OTLP/HTTP's rules, as the Collector's
 * otlphttp exporter decides them: 2xx accepted, with the collector's partial success; 429, 502, 503, 504 or
 * no answer at all retried, after the collector's Retry-After when it gave one; any other answer refused,
 * since sending the same data again gets the same answer.
 */
export type ExportResult =
  | { readonly kind: 'accepted'; readonly status: number; readonly partialSuccess: OtlpPartialSuccess | undefined }
  | {
      readonly kind: 'retry';
      /** The collector's status, or why there was none: no connection, or no answer in time. */
      readonly happened: number | 'unreachable' | 'timeout';
      readonly retryAfterSeconds?: number;
      readonly contentType?: string;
      readonly body?: Buffer;
    }
  | {
      readonly kind: 'refused';
      readonly status: number;
      /** The collector's answer as it came, so the gateway can pass a 4xx on to the client. */
      readonly contentType: string | undefined;
      readonly body: Buffer;
      readonly retryAfterSeconds?: number;
    };

/** How an export came to be, when that lets a collector do less with it. */
export interface ExportOrigin {
  /**
   * The body is this service's own OTLP/JSON, written by JSON.stringify (the outbox's spans): well formed and on one
   * line, so the collector in this process keeps it as it is instead of decoding it again to check it.
   */
  readonly own?: boolean;
}

/** What the gateway and the pipeline spans send through: the collector at OTLP_UPSTREAM_URL, or the embedded one. */
export interface CollectorClient {
  /** Never rejects: a transport failure is a `retry`. */
  export(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer, origin?: ExportOrigin): Promise<ExportResult>;
  reachable(): Promise<boolean>;
  close(): Promise<void>;
}

/** An OTLP/HTTP answer to an export, as it came. */
export interface CollectorAnswer {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly retryAfter: string | undefined;
  readonly body: Buffer;
}

/** OTLP/HTTP "Retryable Response Codes". */
const RETRYABLE = new Set([429, 502, 503, 504]);

/** The one decision on an answer to an export of `encoding` (see ExportResult). */
export function exportResult(signal: OtlpSignal, encoding: OtlpEncoding, answer: CollectorAnswer): ExportResult {
  const { status, contentType, body } = answer;
  if (status >= 200 && status < 300) return { kind: 'accepted', status, partialSuccess: partialSuccessOf(signal, encodingOf(contentType) ?? encoding, body) };
  const retryAfterSeconds = parseRetryAfter(answer.retryAfter);
  if (RETRYABLE.has(status)) return { kind: 'retry', happened: status, retryAfterSeconds, contentType, body };
  return { kind: 'refused', status, contentType, body, retryAfterSeconds };
}

function partialSuccessOf(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): OtlpPartialSuccess | undefined {
  try {
    return decodeExportResponse(signal, encoding, body);
  } catch {
    // The collector accepted the data; an unreadable answer must not make anyone send it again.
    return undefined;
  }
}
