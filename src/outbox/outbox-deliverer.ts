import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DroppedPiece, exportBisecting, PieceCutter } from '../collector/bisecting-export';
import type { CollectorClient, NotNow } from '../collector/collector-client';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import { cutJsonResourceSpans } from '../collector/trace-pieces';
import { CollectorConfig } from '../config/sections/collector';
import { OutboxConfig } from '../config/sections/outbox';
import { ADMIT_ALWAYS, BUNDLE_MAX_SPANS, ClaimedEntry, kindOf, OutboxEntry, OutboxEntryKind, OutboxLimits, OutboxStore, weightOf } from './outbox';
import { OUTBOX_STORE } from './outbox.constants';
import { OutboxMetrics } from './outbox.metrics';

/**
 * Spans claimed by one store call and sent in one export, at most. Redis serves nothing else while the claim's script
 * runs, and every pickup's grant write waits behind it: claims of 500 held it 2.6 ms on average and up to 8 ms while a
 * backlog drained (SLOWLOG during `bench:job-payload`), which was the decorator's p99; claims of 100 stay near 1 ms.
 */
const BATCH_SPANS = 100;
/** How often an idle deliverer looks at the outbox (spans enqueued by this process wake it sooner). */
const IDLE_POLL_MS = 1000;
/**
 * How long spans enqueued here wait for others before a delivery: pickups come hundreds a second, each with
 * a queue wait, and a delivery per pickup (claim, send, acknowledge) cost the decorator more than its own
 * work (bench/job-payload.bench.ts). A full batch is delivered without waiting.
 */
const LINGER_MS = 100;
/** The outbox's depth (for its metrics and readiness) is read with every delivery, and this often while idle. */
const DEPTH_EVERY_MS = 1000;
/** An OTLP/JSON export around the claimed `ResourceSpans`, joined as bytes. */
const EXPORT_START = Buffer.from('{"resourceSpans":[');
const COMMA = Buffer.from(',');
const EXPORT_END = Buffer.from(']}');
const FIRST_BACKOFF_MS = 500;
/** A collector's Retry-After is honoured up to this. */
const MAX_RETRY_AFTER_MS = 300_000;

/** How long before its lease runs out a round sends nothing more: a request started before then is answered in time. */
const LEASE_MARGIN_MS = 2000;

/** The outbox's spans in one request: their `ResourceSpans` joined as an OTLP/JSON export, cut per span when refused. */
const OUTBOX_PIECES: PieceCutter = {
  join: (pieces) => Buffer.concat([EXPORT_START, ...pieces.flatMap((piece, i) => (i === 0 ? [piece] : [COMMA, piece])), EXPORT_END]),
  cut: (piece) => cutJsonResourceSpans(piece.toString('utf8')).map((text) => Buffer.from(text)),
};

/** The wait before data the collector did not take is sent again, and what to call the failure (its status, or why none). */
export interface RetryDelay {
  readonly reason: string;
  readonly delayMs: number;
}

/**
 * The wait after an answer that says nothing of the data (SPEC §10: kept, never dropped): the longer of the entry's
 * exponential backoff (`attempts` deliveries tried before, with ±20 % jitter from `random`) and the collector's
 * Retry-After, the latter honoured up to MAX_RETRY_AFTER_MS.
 */
export function retryDelayOf(result: NotNow, attempts: number, maxBackoffMs: number, random = Math.random()): RetryDelay {
  const backoff = Math.min(maxBackoffMs, FIRST_BACKOFF_MS * 2 ** Math.min(attempts, 20)) * (0.8 + random * 0.4);
  const delayMs = Math.min(MAX_RETRY_AFTER_MS, Math.max(backoff, (result.retryAfterSeconds ?? 0) * 1000));
  return { reason: String(result.kind === 'retry' ? result.happened : result.status), delayMs };
}

/**
 * Sends the outbox to the collector (SPEC §10): claims due entries (each to one replica, for a lease, so a
 * replica that dies mid-send loses nothing: the lease runs out and another sends them), exports the spans among
 * them as one OTLP/JSON request through the collector client, and acknowledges them only once the collector
 * answered 2xx (issue 56 item 7: nothing before). A request the collector refuses for its size (413) or for what it
 * cannot decode (400) is bisected (exportBisecting) until only the spans it refuses alone are left: those are
 * dropped, counted and logged with the collector's words, the rest delivered. Every other answer (401, 403, 404,
 * 5xx, a timeout, no connection) keeps every span, backs off exponentially per entry, up to
 * OUTBOX_MAX_BACKOFF_SECONDS, or the collector's Retry-After, and readiness says `outbox_delivery: degraded` until
 * a delivery succeeds again. Entries of a registered kind go to their owner, one per round; a round starts no
 * request its lease would not outlive. A span is sent twice only if this process stops
 * between the collector's 2xx and the acknowledgement (a window of one store round trip; a graceful stop finishes
 * the delivery in flight first): the next claimer is told the lease ran out, and counts it.
 */
@Injectable()
export class OutboxDeliverer implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(OutboxDeliverer.name);
  private readonly leaseMs: number;
  private readonly maxBackoffMs: number;
  private readonly kinds = new Map<string, OutboxEntryKind>();
  private running: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  private finishIdle: (() => void) | undefined;
  private kicked = false;
  private depthReadAt = -Infinity;
  private failing: string | undefined;
  /** The last delivery the collector answered was not taken: readiness says so until one is. */
  private collectorFailing = false;
  private readonly timeoutMs: number;
  /** Spans of a bundle left to send when one round delivered part of it: enqueued again under keys of their own. */
  private readonly requeueLimits: OutboxLimits;
  /** Keys the collector took whose acknowledgement the store did not answer: acknowledged first thing next round. */
  private unacknowledged: string[] = [];

  constructor(
    config: OutboxConfig,
    collectorConfig: CollectorConfig,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(COLLECTOR_CLIENT) private readonly collector: Pick<CollectorClient, 'export'>,
    private readonly metrics: OutboxMetrics,
  ) {
    // Longer than the two sends a round can make (a kind's entry, then the spans), so a lease never runs out
    // under a send still in flight.
    this.leaseMs = collectorConfig.upstreamTimeoutMs * 2 + 5000;
    this.timeoutMs = collectorConfig.upstreamTimeoutMs;
    this.maxBackoffMs = config.maxBackoffSeconds * 1000;
    // They were counted in the outbox's bound when first enqueued, and leave it with the entry that held them.
    this.requeueLimits = { maxSpans: ADMIT_ALWAYS, rememberMs: config.dedupSeconds * 1000 };
  }

  /** Whether the collector has not taken the last delivery: readiness' `outbox_delivery` says `degraded` meanwhile. */
  get deliveryFailing(): boolean {
    return this.collectorFailing;
  }

  /** An owner's entry kind: keys `<name>:…` are delivered by it. */
  register(kind: OutboxEntryKind): void {
    this.kinds.set(kind.name, kind);
  }

  onApplicationBootstrap(): void {
    this.running = this.loop();
  }

  /** Finishes the delivery in flight (bounded by the collector timeout), then stops. */
  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    this.finishIdle?.();
    await this.running;
  }

  /** Entries were just enqueued here: deliver them after a short linger rather than at the next poll. */
  kick(): void {
    this.kicked = true;
    this.wake?.();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let more = false;
      try {
        more = await this.deliverOnce();
        this.recovered('store');
      } catch (error) {
        this.failed('store', `outbox: the store cannot be read: ${(error as Error).message}`);
      }
      if (!more) await this.idle();
    }
  }

  /** One claim: at most one owner's entry and one export of spans; true when more may be waiting (look again at once). */
  private async deliverOnce(): Promise<boolean> {
    if (this.unacknowledged.length > 0) {
      // Within their lease still (a round is far shorter): acknowledged now, they are not sent again.
      await this.store.acknowledge(this.unacknowledged);
      this.unacknowledged = [];
    }
    const claimed = await this.store.claim(BATCH_SPANS, this.leaseMs);
    // No request starts after this: answered within the collector's timeout, it ends before the lease does.
    const deadline = performance.now() + this.leaseMs - this.timeoutMs - LEASE_MARGIN_MS;
    // With each delivery, and once a second while idle.
    if (claimed.length > 0 || performance.now() - this.depthReadAt >= DEPTH_EVERY_MS) {
      this.depthReadAt = performance.now();
      this.metrics.outboxDepth(await this.store.depth());
    }
    if (claimed.length === 0) return false;
    this.noteLeasesRanOut(claimed);
    const spans: ClaimedEntry[] = [];
    const owned: ClaimedEntry[] = [];
    for (const entry of claimed) {
      const kind = kindOf(entry.key);
      if (kind === undefined) spans.push(entry);
      else if (this.kinds.has(kind)) owned.push(entry);
      // A kind no module of this process registered (a gateway-only replica's): left for one that does.
      else await this.store.retry([entry.key], this.maxBackoffMs);
    }
    // One owner's entry a round: the others are put back, due at once, for the next round (no attempt counted).
    if (owned.length > 1) await this.store.putBack(owned.slice(1).map((entry) => entry.key));
    // A claim stops short of BATCH_SPANS when the next bundle would not fit: within a bundle of full, more may wait.
    let more = owned.length > 1 || spansIn(claimed) > BATCH_SPANS - BUNDLE_MAX_SPANS;
    if (owned.length > 0) more = (await this.deliverOwned(owned[0], deadline)) || more;
    if (spans.length === 0) return more;
    return (await this.deliverSpans(spans, deadline)) && more;
  }

  /** The outbox's own spans, as one OTLP/JSON export (bisected when refused for what it carries); true unless kept for later. */
  private async deliverSpans(claimed: ClaimedEntry[], deadline: number): Promise<boolean> {
    const sent = await exportBisecting(
      this.collector,
      'traces',
      'json',
      claimed.map((span) => span.body),
      OUTBOX_PIECES,
      { deadline, origin: { own: true } },
    );
    const done = claimed.filter((_, i) => sent.parts[i].settled);
    const partly = claimed.flatMap((entry, i) => (!sent.parts[i].settled && sent.parts[i].touched ? [{ entry, rest: sent.parts[i].rest }] : []));
    const kept = claimed.filter((_, i) => !sent.parts[i].settled && !sent.parts[i].touched);
    // What was left of a bundle goes back as spans of their own before the bundle leaves: none is sent twice, none lost.
    if (partly.length > 0) await this.requeueRest(partly);
    await this.acknowledge([...done, ...partly.map(({ entry }) => entry)].map((span) => span.key));
    const spans = spansIn(done);
    this.noteDropped(sent.dropped.map((piece) => ({ piece, key: claimed[piece.part].key })));
    if (done.length > 0) this.metrics.deliveredSpans(done, Math.max(0, spans - sent.dropped.length));
    if (sent.rejected > 0) this.logger.warn(`the collector rejected ${sent.rejected} of ${spans} pipeline spans (partial success); not retried`);
    if (sent.stoppedBy === undefined) {
      this.deliveredAgain();
      return true;
    }
    if (sent.stoppedBy === 'deadline') {
      await this.store.putBack(kept.map((span) => span.key));
      return true;
    }
    const delay = retryDelayOf(sent.stoppedBy, Math.max(...kept.map((span) => span.attempts), 0), this.maxBackoffMs);
    await this.store.retry(
      kept.map((span) => span.key),
      delay.delayMs,
    );
    const left = spansIn(kept) + partly.reduce((sum, { rest }) => sum + rest.length, 0);
    this.notTaken(delay, `outbox: ${left} pipeline spans kept, not delivered (${delay.reason}); next attempt in ${Math.round(delay.delayMs)} ms`);
    return false;
  }

  /** One entry of a registered kind, by its owner: acknowledged once wholly delivered, put back while more of it waits. */
  private async deliverOwned(entry: ClaimedEntry, deadline: number): Promise<boolean> {
    const { result, more, dropped = [] } = await this.kinds.get(kindOf(entry.key)!)!.deliver(entry, deadline);
    this.noteDropped(dropped.map((piece) => ({ piece, key: entry.key })));
    if (result === 'deadline') {
      await this.store.putBack([entry.key]);
      return true;
    }
    if (result.kind !== 'accepted') {
      // An owner's answer the collector gave about the data (413, 400) that the owner did not bisect is no reason to
      // give its entry up either: kept, like every answer but a 2xx.
      const notNow: NotNow = result.kind === 'retry' || result.kind === 'refused' ? result : { ...result, kind: 'refused' };
      const delay = retryDelayOf(notNow, entry.attempts, this.maxBackoffMs);
      await this.store.retry([entry.key], delay.delayMs);
      this.notTaken(delay, `outbox: ${entry.key} kept, not delivered (${delay.reason}); next attempt in ${Math.round(delay.delayMs)} ms`);
      return false;
    }
    this.deliveredAgain();
    if (more) await this.store.putBack([entry.key]);
    else await this.acknowledge([entry.key]);
    return more;
  }

  /**
   * The spans of partly delivered entries (a bundle bisected when the collector stopped taking requests halfway)
   * that are still to send, enqueued as entries of their own (`<key>~<nonce>*1`: a fresh key, one span's weight).
   */
  private async requeueRest(partly: readonly { entry: ClaimedEntry; rest: readonly Buffer[] }[]): Promise<void> {
    const entries: OutboxEntry[] = [];
    for (const { entry, rest } of partly) {
      const base = entry.key.split('~')[0];
      for (const piece of rest)
        entries.push({ key: `${base}~${randomBytes(6).toString('hex')}*1`, body: piece.toString('utf8'), enqueuedAt: entry.enqueuedAt });
    }
    await this.store.enqueue(entries, this.requeueLimits);
  }

  /** Each span the collector refused alone (413 or 400, cut as small as it goes): counted by status, and said once each. */
  private noteDropped(dropped: readonly { piece: DroppedPiece; key: string }[]): void {
    for (const { piece, key } of dropped) {
      this.metrics.droppedSpan(piece.status);
      this.logger.error(
        `outbox: the collector refused ${kindOf(key) === undefined ? `pipeline span ${spanIdOf(piece.body) ?? key}` : `a piece of ${key}`} alone with ${piece.status} (${piece.kind === 'too_large' ? 'too large' : 'cannot decode it'}: ${piece.reason}); dropped, the rest delivered`,
      );
    }
  }

  /** The collector took a delivery: readiness is ready again, and the log says delivery resumed once. */
  private deliveredAgain(): void {
    this.collectorFailing = false;
    this.recovered('collector');
  }

  /** The collector did not take a delivery: counted by status, readiness degraded, said once until it recovers. */
  private notTaken(delay: RetryDelay, message: string): void {
    this.collectorFailing = true;
    this.metrics.deliveryFailed(delay.reason);
    this.failed('collector', message);
  }

  /**
   * Delivered entries leave the outbox. If the store does not answer, they are kept to be acknowledged again at the
   * start of the next round, before their lease runs out, rather than sent again by whoever claims them next.
   */
  private async acknowledge(keys: readonly string[]): Promise<void> {
    try {
      await this.store.acknowledge(keys);
    } catch (error) {
      this.unacknowledged.push(...keys);
      throw error;
    }
  }

  /**
   * Until the next poll, or a linger after a kick (spans enqueued meanwhile go out in the same delivery).
   * Its timers never keep a process alive: a service has its servers for that, and an app a test forgot to
   * close must not hang its run.
   */
  private idle(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        this.finishIdle = undefined;
        resolve();
      };
      let timer = setTimeout(done, this.kicked ? LINGER_MS : IDLE_POLL_MS).unref();
      this.kicked = false;
      this.finishIdle = done;
      this.wake = () => {
        // A kick during a long wait shortens it to the linger; later kicks change nothing.
        this.wake = undefined;
        this.kicked = false;
        clearTimeout(timer);
        timer = setTimeout(done, LINGER_MS).unref();
      };
    });
  }

  /**
   * Entries a deliverer claimed and never answered, its lease run out: it stopped between sending and acknowledging
   * (a SIGKILL, a crash, the store lost at that moment), so the collector may have them already. Sent again (an
   * outage or a restart loses nothing), counted, and said: the one place a span can reach the collector twice.
   */
  private noteLeasesRanOut(claimed: readonly ClaimedEntry[]): void {
    const again = claimed.filter((entry) => entry.leaseRanOut).length;
    if (again === 0) return;
    this.metrics.redeliveredAfterLease(again);
    this.logger.warn(
      `outbox: ${again} entr${again === 1 ? 'y' : 'ies'} claimed again after a deliverer stopped mid-delivery; sent again, the collector may get them twice (readers keep one copy per span id and version)`,
    );
  }

  /** One warning when delivery starts failing, one line when it works again: not one per attempt. */
  private failed(what: string, message: string): void {
    if (this.failing === what) return;
    this.failing = what;
    this.logger.warn(message);
  }

  private recovered(what: string): void {
    if (this.failing !== what) return;
    this.failing = undefined;
    this.logger.log(`outbox: ${what} reachable again, delivering`);
  }
}

/** The id of the span an outbox piece (one span's `ResourceSpans`, OTLP/JSON) carries, to name it in the log. */
function spanIdOf(piece: Buffer): string | undefined {
  return /"spanId":"([0-9a-fA-F]+)"/.exec(piece.toString('utf8'))?.[1];
}

/** Spans the entries carry: a bundle counts its spans. */
function spansIn(entries: readonly ClaimedEntry[]): number {
  let spans = 0;
  for (const entry of entries) spans += weightOf(entry.key);
  return spans;
}
