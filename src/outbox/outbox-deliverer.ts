import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { BUNDLE_MAX_SPANS, ClaimedEntry, kindOf, OutboxEntryKind, OutboxStore, weightOf } from './outbox';
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

/** What becomes of one delivery: acknowledged, tried again after `delayMs`, or dropped as refused for good. */
export type Delivery = { kind: 'accepted'; rejected: number } | { kind: 'retry'; reason: string; delayMs: number } | { kind: 'refused'; status: number };

/**
 * The collector's result as the outbox acts on it: a retry waits the longer of the span's exponential
 * backoff (`attempts` deliveries tried before, with ±20 % jitter from `random`) and the collector's
 * Retry-After, the latter honoured up to MAX_RETRY_AFTER_MS.
 */
export function deliveryOf(result: ExportResult, attempts: number, maxBackoffMs: number, random = Math.random()): Delivery {
  switch (result.kind) {
    case 'accepted':
      return { kind: 'accepted', rejected: result.partialSuccess?.rejectedItems ?? 0 };
    case 'retry': {
      const backoff = Math.min(maxBackoffMs, FIRST_BACKOFF_MS * 2 ** Math.min(attempts, 20)) * (0.8 + random * 0.4);
      const delayMs = Math.min(MAX_RETRY_AFTER_MS, Math.max(backoff, (result.retryAfterSeconds ?? 0) * 1000));
      return { kind: 'retry', reason: String(result.happened), delayMs };
    }
    case 'refused':
      return { kind: 'refused', status: result.status };
    default: {
      const unreachable: never = result;
      throw new Error(`unhandled export result ${JSON.stringify(unreachable)}`);
    }
  }
}

/**
 * Sends the outbox to the collector (SPEC §10): claims due entries (each to one replica, for a lease, so a
 * replica that dies mid-send loses nothing: the lease runs out and another sends them), exports the spans among
 * them as one OTLP/JSON request through the collector client, and acknowledges them only once the collector
 * answered 2xx. Entries of a registered kind go to their owner, one per round, so that a round carries at most
 * two requests and never outlives its lease. Failures back off exponentially per entry, up to
 * OUTBOX_MAX_BACKOFF_SECONDS, or the collector's Retry-After. A span is sent twice only if this process stops
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
  /** Keys the collector took whose acknowledgement the store did not answer: acknowledged first thing next round. */
  private unacknowledged: string[] = [];

  constructor(
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(COLLECTOR_CLIENT) private readonly collector: Pick<CollectorClient, 'export'>,
    private readonly metrics: OutboxMetrics,
  ) {
    // Longer than the two sends a round can make (a kind's entry, then the spans), so a lease never runs out
    // under a send still in flight.
    this.leaseMs = config.OTLP_UPSTREAM_TIMEOUT_MS * 2 + 5000;
    this.maxBackoffMs = config.OUTBOX_MAX_BACKOFF_SECONDS * 1000;
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
    if (owned.length > 0) more = (await this.deliverOwned(owned[0])) || more;
    if (spans.length === 0) return more;
    return (await this.deliverSpans(spans)) && more;
  }

  /** The outbox's own spans, as one OTLP/JSON export; true unless the collector asked to wait. */
  private async deliverSpans(claimed: ClaimedEntry[]): Promise<boolean> {
    const body = Buffer.concat([EXPORT_START, ...claimed.flatMap((span, i) => (i === 0 ? [span.body] : [COMMA, span.body])), EXPORT_END]);
    const result = await this.collector.export('traces', 'json', body, { own: true });
    const delivery = deliveryOf(result, Math.max(...claimed.map((span) => span.attempts)), this.maxBackoffMs);
    const keys = claimed.map((span) => span.key);
    const spans = spansIn(claimed);
    switch (delivery.kind) {
      case 'accepted':
        await this.acknowledge(keys);
        this.metrics.deliveredSpans(claimed, spans);
        this.recovered('collector');
        if (delivery.rejected > 0) this.logger.warn(`the collector rejected ${delivery.rejected} of ${spans} pipeline spans (partial success); not retried`);
        return true;
      case 'refused':
        // An answer the collector will give again to the same spans: retrying cannot help, and would hold them forever.
        await this.acknowledge(keys);
        this.metrics.deliveryFailed(String(delivery.status));
        this.logger.error(`the collector refused ${spans} pipeline spans with ${delivery.status}; dropped`);
        return true;
      case 'retry': {
        await this.store.retry(keys, delivery.delayMs);
        this.metrics.deliveryFailed(delivery.reason);
        this.failed('collector', `outbox: ${spans} pipeline spans not delivered (${delivery.reason}); next attempt in ${Math.round(delivery.delayMs)} ms`);
        return false;
      }
      default: {
        const unreachable: never = delivery;
        throw new Error(`unhandled delivery ${JSON.stringify(unreachable)}`);
      }
    }
  }

  /** One entry of a registered kind, by its owner: acknowledged once wholly delivered, put back while more of it waits. */
  private async deliverOwned(entry: ClaimedEntry): Promise<boolean> {
    const { result, more } = await this.kinds.get(kindOf(entry.key)!)!.deliver(entry);
    const delivery = deliveryOf(result, entry.attempts, this.maxBackoffMs);
    if (delivery.kind === 'retry') {
      await this.store.retry([entry.key], delivery.delayMs);
      this.metrics.deliveryFailed(delivery.reason);
      this.failed('collector', `outbox: ${entry.key} not delivered (${delivery.reason}); next attempt in ${Math.round(delivery.delayMs)} ms`);
      return false;
    }
    this.recovered('collector');
    if (more) await this.store.putBack([entry.key]);
    else await this.acknowledge([entry.key]);
    return more;
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

/** Spans the entries carry: a bundle counts its spans. */
function spansIn(entries: readonly ClaimedEntry[]): number {
  let spans = 0;
  for (const entry of entries) spans += weightOf(entry.key);
  return spans;
}
