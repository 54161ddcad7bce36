import type { OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import type { WireBody } from '../otlp/otlp-wire';
import type { CollectorClient, ExportResult } from './collector-client';

/** What became of parts sent joined: one answer for the joined request, or one per part once it was split. */
export type JoinedExportResult =
  { readonly split: false; readonly result: ExportResult } | { readonly split: true; readonly status: number; readonly results: ExportResult[] };

/**
 * True for an answer that refuses a request as a whole with a 4xx (400, 413, 422...), as the Collector answers a
 * request it cannot decode: every exporter treats a 4xx as final, so one bad part would lose every part joined to
 * it. 429 is no such answer (it is retried, all parts alike), nor is a 5xx.
 */
export function refusedWhole(result: ExportResult): result is Extract<ExportResult, { kind: 'refused' | 'too_large' | 'bad_data' }> {
  return result.kind !== 'accepted' && result.kind !== 'retry' && result.status >= 400 && result.status < 500;
}

/**
 * Sends `parts` joined into one request; when the collector refuses that request whole (refusedWhole) and it held
 * more than one part, sends each part alone, at once, so that each is answered from its own request: the good parts
 * are delivered and only the bad one is refused. The reusable form of "send joined, and on a whole-request 4xx
 * split per part", for the gateway's coalescing client, whose exporters answer each part themselves. Whoever
 * keeps data until it is delivered (the outbox, parked delivery) uses exportBisecting instead.
 */
export async function exportSplittingRefused<Part extends Buffer | WireBody>(
  collector: Pick<CollectorClient, 'export'>,
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  parts: readonly Part[],
  join: (parts: readonly Part[]) => Buffer,
): Promise<JoinedExportResult> {
  const result = await collector.export(signal, encoding, parts.length === 1 ? parts[0] : join(parts));
  if (parts.length === 1 || !refusedWhole(result)) return { split: false, result };
  const results = await Promise.all(parts.map((part) => collector.export(signal, encoding, part)));
  return { split: true, status: result.status, results };
}
