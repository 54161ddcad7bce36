import { DroppedPiece, exportBisecting } from '../collector/bisecting-export';
import type { CollectorClient, NotNow } from '../collector/collector-client';
import { cutTraceRequest, joinTraceRequests } from '../collector/trace-pieces';
import type { OtlpEncoding } from '../otlp/otlp-encoding';
import { OutcomeSamplingReason, settleProvisionalTraces, settleSamplingReason } from '../otlp/sampling-reason';
import { ClaimedEntry, KindDelivery, OutboxEntry } from '../outbox/outbox';
import type { ParkedEntry, ParkedEntryId } from './parking/parking';

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
export function parkedSpansAsEntries(entries: readonly ParkedEntry[], reason: OutcomeSamplingReason, enqueuedAt: number): OutboxEntry[] {
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

/** What became of a page: the entries done with, what the collector refused alone, and why the rest is kept. */
export interface PageDelivery {
  /** Delivered, each of its spans, except those the collector refused alone (`dropped`). */
  readonly done: ParkedEntry[];
  /** Spans (or exports that could not be cut) the collector refused alone, with its words: the only ones given up. */
  readonly dropped: readonly DroppedPiece[];
  /** Set when entries are kept: the collector's answer that said nothing of the data, or the round's time ran out. */
  readonly keptBy?: NotNow | 'deadline';
}

/**
 * Sends a page of exports settled with the reason (and, in protobuf, each span's `ot=th:0`), joined, as the outbox sends
 * its spans (exportBisecting): nothing is done with before a 2xx; a request refused as too large (413) or as holding
 * something the collector cannot decode (400) is halved, down to one span, until only what it refuses alone is left,
 * which alone is given up; any other answer (401, 403, 404, 5xx, a timeout) keeps the page for the next attempt.
 * An entry of which only some spans reached the collector before it stopped answering is kept whole: sent again, those
 * spans reach it twice (readers keep one copy per span id), which the rarity of a collector failing in the middle of
 * a bisection makes the better trade than a parking store able to rewrite an entry.
 */
export async function sendPage(
  collector: Pick<CollectorClient, 'export'>,
  encoding: OtlpEncoding,
  entries: readonly ParkedEntry[],
  reason: OutcomeSamplingReason,
  deadline = Infinity,
): Promise<PageDelivery> {
  const parts = entries.map((entry) => settleProvisionalTraces(encoding, entry.body, reason));
  // ExportTraceServiceRequest's one field is repeated: concatenated requests are one request (JSON is sent alone).
  const sent = await exportBisecting(
    collector,
    'traces',
    encoding,
    parts,
    { join: (pieces) => joinTraceRequests(encoding, pieces), cut: (piece) => cutTraceRequest(encoding, piece) },
    { deadline },
  );
  const done = entries.filter((_, i) => sent.parts[i].settled);
  return { done, dropped: sent.dropped, ...(sent.stoppedBy === undefined ? {} : { keptBy: sent.stoppedBy }) };
}

export type { ClaimedEntry, KindDelivery };
