/** The three OTLP signals, each exported to `/v1/<signal>` (OTLP/HTTP "Request"). */
export const OTLP_SIGNALS = ['traces', 'metrics', 'logs'] as const;
export type OtlpSignal = (typeof OTLP_SIGNALS)[number];

/** The two OTLP/HTTP encodings: binary protobuf and the OTLP/JSON mapping. */
export type OtlpEncoding = 'protobuf' | 'json';

/** The media type each encoding is sent and answered with (OTLP/HTTP "Binary Protobuf Encoding", "JSON Protobuf Encoding"). */
export const OTLP_MEDIA_TYPES: Readonly<Record<OtlpEncoding, string>> = { protobuf: 'application/x-protobuf', json: 'application/json' };

/**
 * The encoding a Content-Type names, parameters (`; charset=utf-8`) and case aside; undefined for any other
 * media type, which an OTLP/HTTP receiver answers 415.
 */
export function encodingOf(contentType: string | undefined): OtlpEncoding | undefined {
  if (contentType === undefined) return undefined;
  const end = contentType.indexOf(';');
  const mediaType = (end < 0 ? contentType : contentType.slice(0, end)).trim().toLowerCase();
  if (mediaType === 'application/x-protobuf') return 'protobuf';
  if (mediaType === 'application/json') return 'json';
  return undefined;
}

/** The signal an OTLP/HTTP path exports (`/v1/traces` → traces); undefined for any other path. */
export function signalOfPath(path: string): OtlpSignal | undefined {
  return OTLP_SIGNALS.find((signal) => path === `/v1/${signal}`);
}
