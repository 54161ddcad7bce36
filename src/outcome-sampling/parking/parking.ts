import { createHash } from 'node:crypto';
import type { OutcomeSamplingReason } from '../../otlp/sampling-reason';

/**
 * The parking store (SPEC §11): a provisional pipeline's spans wait here, in its trace's slot, until GitLab
 * reports the pipeline's outcome; then they are kept (delivered once) or dropped (deleted). The decision and the
 * facts it reads are kept beside them, so what arrives after it follows it.
 */

/**
 * The decision on a provisional pipeline: kept for a reason, or dropped because its outcome matched nothing
 * in the policy (`outcome`) or because no outcome came before the time limit (`no_outcome`).
 */
export type TraceDecision =
  { readonly keep: true; readonly reason: OutcomeSamplingReason } | { readonly keep: false; readonly reason: 'outcome' | 'no_outcome' };

/**
 * What one parked entry holds: an enforced OTLP/HTTP traces export as it would be forwarded (`protobuf`,
 * `json`), or the control plane's own spans (`spans`: one `<outbox key> <ResourceSpans JSON>` a line).
 */
export type ParkedKind = 'protobuf' | 'json' | 'spans';

/** A parked entry without its body: what a page of a delivery is planned from. */
export interface ParkedEntryId {
  /**
   * Unique within the trace and the same for the same bytes (a digest of them), so an export parked again after
   * an answer that timed out is not parked twice.
   */
  readonly id: string;
  readonly kind: ParkedKind;
  readonly spans: number;
  readonly bytes: number;
}

export interface ParkedEntry extends ParkedEntryId {
  readonly body: Buffer;
}

/**
 * An entry to park as it comes: its body as it would be forwarded; `exempt` (the control plane's own spans, SPEC §11
 * "Bounds": never the ones sacrificed) when counted but never refused for a bound.
 */
export interface EntryToPark {
  readonly kind: ParkedKind;
  readonly body: Buffer;
  readonly spans: number;
  readonly exempt?: boolean;
}

export interface ParkingLimits {
  /** Spans and bytes one pipeline (trace) may park. */
  readonly maxTraceSpans: number;
  readonly maxTraceBytes: number;
  /** Bytes all pipelines may park together. */
  readonly maxTotalBytes: number;
  /** How long after a trace's first parked entry its decision is due without an outcome (the time limit). */
  readonly holdMs: number;
  /** How long a decision, and parked data not yet delivered, is remembered. */
  readonly rememberMs: number;
}

/** Which bound a refused entry hit (SPEC §11 "Bounds"). */
export type ParkingLimit = 'trace_spans' | 'trace_bytes' | 'total_bytes';

export type ParkOutcome =
  /** Kept (or kept already: the same bytes parked before). */
  | { readonly kind: 'parked' }
  /** Decided already: the entry was not parked; its caller follows the decision. */
  | { readonly kind: 'decided'; readonly decision: TraceDecision }
  /** A budget is full: nothing parked, nothing evicted; the caller falls back to the head decision. */
  | { readonly kind: 'full'; readonly limit: ParkingLimit };

/** How the root pipeline ended, as its terminal Pipeline Hook says. */
export interface RootOutcome {
  readonly status: string;
  /** Epoch ms. */
  readonly createdAt: number;
  readonly finishedAt: number;
}

/** What the decision reads besides the root pipeline's own hook: collected from pickups and other hooks. */
export interface OutcomeFacts {
  /** Statuses GitLab reported for the trace's pipelines and jobs (child pipelines, allowed-to-fail jobs). */
  readonly statuses: readonly string[];
  /** The longest queue wait of any of its jobs, in milliseconds. */
  readonly longestQueueMs: number;
  /** What the time limit decides without an outcome (the policy's `when_no_outcome` at pickup); absent: keep. */
  readonly whenNoOutcome?: 'keep' | 'drop';
  /** The root pipeline's end, once its terminal hook came (and until GitLab runs it again). */
  readonly rootEnd?: RootOutcome;
  /** Child pipelines GitLab last said were running: a drop waits for them (SPEC §11, a child may end after its root). */
  readonly runningChildren: readonly number[];
  /** Jobs of the root pipeline that had finished when it ended: a `running` hook that names only these is an old one. */
  readonly finishedRootJobs: readonly number[];
}

/** What a hook or a pickup adds to a trace's facts. */
export interface FactsUpdate {
  readonly statuses?: readonly string[];
  readonly longestQueueMs?: number;
  readonly whenNoOutcome?: 'keep' | 'drop';
  /** The root's end; null forgets it (the pipeline runs again). */
  readonly rootEnd?: RootOutcome | null;
  readonly childRunning?: number;
  readonly childEnded?: number;
  readonly finishedRootJobs?: readonly number[];
}

export interface ParkingUsage {
  readonly traces: number;
  readonly spans: number;
  readonly bytes: number;
}

export interface ParkingStore {
  /**
   * Parks one entry for `traceId` in one atomic step: refused when the trace is decided already (the decision
   * is answered) or a budget is full. The first entry of a trace puts it in the time-limit index; the same bytes
   * parked again are kept once.
   */
  park(traceId: string, entry: EntryToPark, limits: ParkingLimits): Promise<ParkOutcome>;
  /** Adds to a trace's facts, kept `ttlMs` at least. */
  noteFacts(traceId: string, facts: FactsUpdate, ttlMs: number): Promise<void>;
  readFacts(traceId: string): Promise<OutcomeFacts>;
  /**
   * Statuses of jobs of a pipeline that no trace of this store may know of yet (the decorator did not trace them),
   * kept under the pipeline's id `ttlMs` at least, for its Pipeline Hooks to read with `jobStatusesOf`.
   */
  notePipelineJobStatuses(pipelineId: number, statuses: readonly string[], ttlMs: number): Promise<void>;
  jobStatusesOf(pipelineId: number): Promise<string[]>;
  /** Records the decision unless one is recorded already (the first one stands). Answers the one recorded; remembered `rememberMs`. */
  decide(traceId: string, decision: TraceDecision, rememberMs: number): Promise<{ readonly decision: TraceDecision; readonly changed: boolean }>;
  findDecision(traceId: string): Promise<TraceDecision | null>;
  /**
   * GitLab runs the pipeline again: forgets a `drop` (a keep stays) and the root's end, and puts the trace back in
   * the time-limit index, due `holdMs` from now. Answers whether a drop was forgotten.
   */
  reopen(traceId: string, holdMs: number): Promise<boolean>;
  /** Every entry parked for the trace, without bodies (a trace can hold tens of MiB: its bodies are read in pages). */
  parkedIds(traceId: string): Promise<ParkedEntryId[]>;
  /** The entries named, with their bodies (those gone meanwhile are left out). */
  parkedEntries(traceId: string, ids: readonly ParkedEntryId[]): Promise<ParkedEntry[]>;
  /** Removes entries (delivered) and gives their bytes back to the budget. */
  release(traceId: string, entryIds: readonly string[]): Promise<void>;
  /** Deletes everything parked for the trace without reading it (a drop), and gives it all back to the budget. */
  drop(traceId: string): Promise<void>;
  /** The trace holds nothing more: it leaves the time-limit index and whatever it still had reserved is given back. */
  finish(traceId: string): Promise<void>;
  /** The sweep looks at the trace again at `dueAt` (epoch ms). */
  schedule(traceId: string, dueAt: number): Promise<void>;
  /** Up to `max` traces whose time is due, each handed to one caller for `leaseMs`. */
  claimOverdue(max: number, leaseMs: number): Promise<string[]>;
  usage(): Promise<ParkingUsage>;
}

/**
 * The digest that makes an export parked again (a runner's retry after an answer that timed out: the same bytes)
 * land on the same entry. It reads the body's length, its first and its last 4 KiB, not all of it: hashing every
 * byte of a 46 KiB export cost the parking path about a quarter of its CPU (measured with the outcome-sampling bench),
 * and two exports of a job that differ only in their middle do not occur (an SDK's next batch carries other span
 * ids and times from its first span on). The worst a collision could do is keep one export of a job's own trace
 * for two, in that job's own trace. Not a security boundary.
 */
const DIGEST_EDGE_BYTES = 4096;

function parkedDigest(body: Buffer): string {
  const hash = createHash('sha1');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(body.length);
  hash.update(length);
  if (body.length <= 2 * DIGEST_EDGE_BYTES) hash.update(body);
  else hash.update(body.subarray(0, DIGEST_EDGE_BYTES)).update(body.subarray(body.length - DIGEST_EDGE_BYTES));
  return hash.digest('hex').slice(0, 20);
}

/** An entry's id: `<digest>:<kind>:<spans>:<bytes>`, so the entry says what it is without a second record. */
export function parkedEntryId(digest: string, kind: ParkedKind, spans: number, bytes: number): ParkedEntryId {
  return { id: `${digest}:${kind}:${spans}:${bytes}`, kind, spans, bytes };
}

/** The id an entry is parked under, so the same bytes of the same kind land on the same entry. */
export function idToPark(entry: EntryToPark): ParkedEntryId {
  return parkedEntryId(parkedDigest(entry.body), entry.kind, entry.spans, entry.body.length);
}

export function parsedEntryId(id: string): ParkedEntryId {
  const [, kind, spans, bytes] = id.split(':');
  return { id, kind: kind as ParkedKind, spans: Number(spans), bytes: Number(bytes ?? 0) };
}
