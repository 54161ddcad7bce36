import { encodingOf, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { decodeExportResponse, OtlpPartialSuccess } from '../otlp/otlp-response';
import { parseRetryAfter } from '../otlp/retry-after';
import { fieldNumbers } from '../otlp/otlp-fields';
import { WIRE_LENGTH_DELIMITED, WireBody, WireReader } from '../otlp/otlp-wire';

/** A non-2xx answer as it came, so the gateway can pass a 4xx on to the client. */
interface CollectorRefusal {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly body: Buffer;
  readonly retryAfterSeconds?: number;
}

/**
 * What became of one export, decided in one place (`exportResult`), as the Collector's otlphttp exporter decides
 * every answer in one place:
 * - `accepted`: 2xx, with the collector's partial success;
 * - `retry`: 429, 502, 503, 504 or no answer at all (OTLP/HTTP's retryable answers), after the collector's
 *   Retry-After when it gave one;
 * - `too_large`: 413, the request was too large for the collector: smaller requests of the same data can pass;
 * - `bad_data`: 400, the collector could not decode the request (OTLP/HTTP: "data that cannot be decoded or is
 *   otherwise invalid"): a request without the bad part can pass;
 * - `refused`: any other answer (401, 403, 404, other 4xx, 500, 501...), which says nothing of what the request
 *   carried: a credential rotated, a route missing mid-deploy, a collector failing. OTLP's exporters give such data
 *   up; whoever holds data it promised to deliver (the outbox, parked delivery) keeps it and tries again later.
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
  | ({ readonly kind: 'too_large' } & CollectorRefusal)
  | ({ readonly kind: 'bad_data' } & CollectorRefusal)
  | ({ readonly kind: 'refused' } & CollectorRefusal);

/** An answer refusing a request for what it carried: the same data, cut smaller or without its bad part, can pass. */
export type RefusedForContent = Extract<ExportResult, { kind: 'too_large' | 'bad_data' }>;

/** An answer that says nothing of the data: held data is kept and sent again later. */
export type NotNow = Extract<ExportResult, { kind: 'retry' | 'refused' }>;

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
  /**
   * Never rejects: a transport failure is a `retry`. The gateway hands its exports over as the pieces it wrote
   * (WireBody), which the coalescing client joins straight into the request that carries them.
   */
  export(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer | WireBody, origin?: ExportOrigin): Promise<ExportResult>;
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
  if (status === 413) return { kind: 'too_large', status, contentType, body, retryAfterSeconds };
  if (status === 400) return { kind: 'bad_data', status, contentType, body, retryAfterSeconds };
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

/** The longest part of a collector's own words kept for a log line. */
const REASON_MAX_CHARS = 300;

/**
 * The collector's own words for a refusal, for a log line: the google.rpc.Status message of its answer (OTLP/HTTP
 * "Failures"), else its text; on one line and short. Only the answer is read, never the request, so no span content
 * and no credential of ours (OTLP_UPSTREAM_HEADERS) can reach the log through it.
 */
export function refusalReason(answer: { readonly status: number; readonly contentType?: string; readonly body?: Buffer }): string {
  const body = answer.body ?? Buffer.alloc(0);
  let words: string | undefined;
  try {
    const encoding = encodingOf(answer.contentType);
    if (encoding === 'json') {
      const status = JSON.parse(body.toString('utf8')) as { message?: unknown };
      if (typeof status.message === 'string') words = status.message;
    } else if (encoding === 'protobuf') words = rpcStatusMessage(body);
    else words = body.toString('utf8');
  } catch {
    words = undefined;
  }
  // Control characters (a newline above all) would let an answer forge log lines.
  const oneLine = [...(words ?? '')]
    .map((char) => (char < ' ' || char === '\u007f' ? ' ' : char))
    .join('')
    .replace(/ +/g, ' ')
    .trim();
  if (oneLine === '') return `HTTP ${answer.status}`;
  return oneLine.length > REASON_MAX_CHARS ? `${oneLine.slice(0, REASON_MAX_CHARS)}…` : oneLine;
}

const RPC_STATUS_MESSAGE = fieldNumbers('RpcStatus').message;

/** google.rpc.Status.message. */
function rpcStatusMessage(body: Buffer): string | undefined {
  const reader = new WireReader(body, 0, body.length);
  let message: string | undefined;
  while (!reader.atEnd()) {
    reader.readTag();
    if (reader.fieldNumber === RPC_STATUS_MESSAGE && reader.wireType === WIRE_LENGTH_DELIMITED) {
      const end = reader.readLengthDelimitedEnd();
      message = body.toString('utf8', reader.pos, end);
      reader.pos = end;
    } else reader.skipValue();
  }
  return message;
}
