import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { exportSplittingRefused } from '../collector/split-refused';
import type { OtlpEncoding } from '../otlp/otlp-encoding';
import { settleProvisionalTraces, settleSamplingReason } from '../otlp/sampling-reason';
import { ClaimedEntry, KindDelivery, OutboxEntry } from '../outbox/outbox';
import type { KeepReason, ParkedEntry, ParkedEntryId } from './parking/parking';

/** Parked bytes sent in one upstream request at most: well under the Collector's default 20 MiB request limit. */
export const MAX_DELIVERY_BYTES = 4 * 1024 * 1024;

/** The outbox entry kind of a kept pipeline's parked spans: `parked:<trace id>`, its body the keep reason. */
export const PARKED_KIND = 'parked';

/**
 * The next page of a kept trace's delivery, planned from ids alone: first every control-plane span (they go to the
 * outbox, where SPEC §10's dedup keeps each once), then protobuf exports up to MAX_DELIVERY_BYTES (concatenated
 * requests are one request), else one JSON export alone.
 */
export function nextPage(ids: readonly ParkedEntryId[]): ParkedEntryId[] {
  const spans = ids.filter((id) => id.kind === 'spans');
  if (spans.length > 0) return spans;
  const protobuf = ids.filter((id) => id.kind === 'protobuf');
  if (protobuf.length > 0) {
    const page: ParkedEntryId[] = [];
    let bytes = 0;
    for (const id of protobuf) {
      if (page.length > 0 && bytes + id.bytes > MAX_DELIVERY_BYTES) break;
      page.push(id);
      bytes += id.bytes;
    }
    return page;
  }
  return ids.slice(0, 1);
}

/** Control-plane spans parked as `<outbox key> <ResourceSpans JSON>` lines, as outbox entries settled with the reason. */
export function parkedSpansAsEntries(entries: readonly ParkedEntry[], reason: KeepReason, enqueuedAt: number): OutboxEntry[] {
  const byKey = new Map<string, OutboxEntry>();
  for (const entry of entries) {
    for (const line of entry.body.toString().split('\n')) {
      const space = line.indexOf(' ');
      const key = line.slice(0, space);
      if (space > 0 && !byKey.has(key))
        byKey.set(key, { key, body: settleSamplingReason('json', Buffer.from(line.slice(space + 1)), reason).toString(), enqueuedAt });
    }
  }
  // A pipeline span's versions in order (`<span id>@<version>`, versions of one length): the older first.
  return [...byKey.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * Sends a page of exports settled with the reason (and, in protobuf, each span's `ot=th:0`), joined; a joined request the collector refuses as a whole is sent
 * again one export at a time (exportSplittingRefused), so one export it cannot take never costs the others. Answers
 * which entries are done (accepted, or refused for good) and, when the collector asked to wait, that result.
 */
export async function sendPage(
  collector: Pick<CollectorClient, 'export'>,
  encoding: OtlpEncoding,
  entries: readonly ParkedEntry[],
  reason: KeepReason,
  onRefused: (entries: number, status: number) => void,
): Promise<{ done: ParkedEntry[]; retry?: ExportResult }> {
  const parts = entries.map((entry) => settleProvisionalTraces(encoding, entry.body, reason));
  // ExportTraceServiceRequest's one field is repeated: concatenated requests are one request (JSON is sent alone).
  const sent = await exportSplittingRefused(collector, 'traces', encoding, parts, (joined) => Buffer.concat(joined));
  const results = sent.split ? sent.results : entries.map(() => sent.result);
  const done: ParkedEntry[] = [];
  let retry: ExportResult | undefined;
  for (const [i, result] of results.entries()) {
    if (result.kind === 'retry') retry ??= result;
    else {
      if (result.kind === 'refused') onRefused(1, result.status);
      done.push(entries[i]);
    }
  }
  return retry === undefined ? { done } : { done, retry };
}

export type { ClaimedEntry, KindDelivery };
