import { randomBytes } from 'node:crypto';
import type { DroppedPiece } from '../collector/bisecting-export';
import type { ExportResult } from '../collector/collector-client';

/**
 * The outbox (SPEC §10 "Delivery"): what the control plane must get to the collector, kept in the store until
 * the collector has it, so a collector outage or a restart loses nothing, and each entry once. Its owners put
 * entries in; the deliverer (outbox-deliverer.ts) claims them, one replica each, and sends them.
 *
 * Most entries are control-plane spans: the body is one OTLP/JSON `ResourceSpans`, the key the span id (with its
 * version for a versioned span). Other kinds are registered by the feature that owns them (an
 * {@link OutboxEntryKind}): their key starts with `<kind>:` and the deliverer hands them to their owner.
 */

/** One entry waiting for the collector. */
export interface OutboxEntry {
  /** Unique: an entry whose key was enqueued before (within `rememberMs`) is a copy and is dropped. */
  readonly key: string;
  /** A span's OTLP/JSON `ResourceSpans`, or what its kind's owner stored; a bundle's, its spans' joined by commas. */
  readonly body: string;
  /** Epoch milliseconds it entered the outbox. */
  readonly enqueuedAt: number;
  /** A bundle's spans (see {@link bundled}), each kept once by its own key. */
  readonly members?: readonly OutboxEntry[];
}

/**
 * Spans one bundle carries at most. A pickup batch's queue-wait spans go to the outbox as bundles: one entry, one
 * claim and one acknowledgement for up to this many spans rather than one each, which at a pickup rate was about a
 * tenth of the service's CPU (issue 37). Each span in it still counts in the outbox's bound, depth and claims, and is
 * kept once by its own key.
 */
export const BUNDLE_MAX_SPANS = 25;

/**
 * Entries in bundles of at most BUNDLE_MAX_SPANS (one left alone stays its own entry). A bundle's key is its first
 * span's with a nonce (two bundles never share a key, so one never overwrites another's body) and, after `*`, the
 * number of spans, which the stores read as the entry's weight. A store queues a bundle whole when none of its spans
 * was enqueued before and all fit; otherwise it enqueues the spans one by one, as entries of their own, each once.
 */
export function bundled(entries: readonly OutboxEntry[]): OutboxEntry[] {
  const out: OutboxEntry[] = [];
  for (let start = 0; start < entries.length; start += BUNDLE_MAX_SPANS) {
    const members = entries.slice(start, start + BUNDLE_MAX_SPANS);
    if (members.length === 1) out.push(members[0]);
    else
      out.push({
        key: `${members[0].key}~${randomBytes(6).toString('hex')}*${members.length}`,
        body: members.map((member) => member.body).join(','),
        enqueuedAt: members[0].enqueuedAt,
        members,
      });
  }
  return out;
}

/** A bundle's key ends `~<hex nonce>*<count>`: as the Redis store's scripts read it too (BUNDLE_WEIGHT there). */
const BUNDLE_KEY_END = /~[0-9a-f]+\*(\d+)$/;

/** Spans an entry carries: a bundle's count, else one. */
export function weightOf(key: string): number {
  const bundle = BUNDLE_KEY_END.exec(key);
  return bundle === null ? 1 : Number(bundle[1]);
}

/** An entry handed to one deliverer, which must acknowledge it, retry it or put it back. */
export interface ClaimedEntry extends Omit<OutboxEntry, 'body'> {
  /**
   * The body's bytes as stored: spans go on to the collector as they are, never made a string of again (at a pickup
   * rate, every copy of every queue-wait span on the JavaScript heap is garbage the pickups wait on).
   */
  readonly body: Buffer;
  /** Deliveries tried before this one. */
  readonly attempts: number;
  /**
   * Claimed before by a deliverer that never answered (it stopped mid-delivery, and its lease ran out): that delivery
   * may have reached the collector, so this one can make a second copy. Counted, never skipped (SPEC §10: an outage
   * or a restart loses nothing).
   */
  readonly leaseRanOut: boolean;
}

export interface OutboxLimits {
  /** Spans the outbox holds at most (a bundle counts its spans); beyond, new ones are refused (and counted), never blocking. */
  readonly maxSpans: number;
  /** How long a key is remembered after it was enqueued, so a later copy is recognised. */
  readonly rememberMs: number;
}

/**
 * No bound on the outbox's size: for entries that something else bounds already (a kept pipeline's pointer and
 * its parked control-plane spans, counted in the parking budget, SPEC §11), which must never be refused.
 */
export const ADMIT_ALWAYS = Number.MAX_SAFE_INTEGER;

/** Counted in spans: a bundle queued whole counts each of its spans. */
export interface EnqueueOutcome {
  readonly queued: number;
  /** Entries already enqueued (or delivered) once: dropped, as SPEC §10 wants each span once. */
  readonly duplicates: number;
  /** Entries refused because the outbox was full. */
  readonly refused: number;
}

export interface OutboxDepth {
  /** Spans waiting: a bundle counts its spans. */
  readonly spans: number;
  /** Epoch milliseconds the oldest waiting entry entered the outbox. */
  readonly oldestEnqueuedAt?: number;
}

export interface OutboxStore {
  /**
   * Adds entries whose key was never enqueued before, while the outbox has room, each in one atomic step. A bundle is
   * queued whole, or else split into its spans (see {@link bundled}).
   */
  enqueue(entries: readonly OutboxEntry[], limits: OutboxLimits): Promise<EnqueueOutcome>;
  /**
   * Hands out due entries carrying up to `max` spans (a bundle counts its spans; one is handed out whatever its
   * weight), each to one caller only: a claimed entry is due again after
   * `leaseMs` unless acknowledged, retried or put back, so a deliverer that dies loses nothing; claimed again then,
   * it says so (`leaseRanOut`).
   */
  claim(max: number, leaseMs: number): Promise<ClaimedEntry[]>;
  /** Delivered: the entries leave the outbox (their keys stay remembered). */
  acknowledge(keys: readonly string[]): Promise<void>;
  /** Not delivered: due again after `delayMs`, one more attempt counted. */
  retry(keys: readonly string[], delayMs: number): Promise<void>;
  /** Not tried, or partly delivered with more to come: due again at once, no attempt counted. */
  putBack(keys: readonly string[]): Promise<void>;
  depth(): Promise<OutboxDepth>;
}

/** What one delivery of an owner's entry did: the collector's answer, and whether part of the entry still waits. */
export interface KindDelivery {
  /**
   * `accepted`: this round's part is done with; any other answer keeps the entry, sent again after a backoff (an owner
   * bisects what the collector refuses for its content: exportBisecting); `deadline`: the round's time ran out before a
   * request, the entry is due again at once.
   */
  readonly result: ExportResult | 'deadline';
  /** Part was delivered and more waits: the entry is due again at once (a round carries one request per entry). */
  readonly more: boolean;
  /** What the collector refused alone and was given up: counted and logged by the deliverer. */
  readonly dropped?: readonly DroppedPiece[];
}

/**
 * An entry kind its owner registers with the deliverer: keys `<name>:…` are handed to `deliver`, one entry per
 * round, so one round never carries more than its lease allows.
 */
export interface OutboxEntryKind {
  readonly name: string;
  /** No request may start after `deadline` (performance.now()): the entry's lease would run out under it. */
  deliver(entry: ClaimedEntry, deadline: number): Promise<KindDelivery>;
}

export const kindKey = (kind: string, id: string): string => `${kind}:${id}`;

/** The kind of a key (`<kind>:…`), or undefined for spans'. Span keys are hex, with `@<version>` at most; a bundle's, `<hex>~<nonce>*<count>`. */
export function kindOf(key: string): string | undefined {
  const colon = key.indexOf(':');
  return colon < 0 ? undefined : key.slice(0, colon);
}
