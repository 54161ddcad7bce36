import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy, Optional } from '@nestjs/common';
import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { ClaimedSpan, parkedTraceOf, TracedWorkStore } from '../traced-work/traced-work';
import type { KeepReason } from '../parking/parking';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';

/** Spans sent to the collector in one export at most. */
const BATCH_SPANS = 500;
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
 * Sends the outbox to the collector (SPEC §10): claims due spans (each to one replica, for a lease, so a
 * replica that dies mid-send loses nothing: the lease runs out and another sends them), exports them as
 * one OTLP/JSON request through the collector client, and acknowledges them only once the collector
 * answered 2xx. Failures back off exponentially per span, up to OUTBOX_MAX_BACKOFF_SECONDS, or the
 * collector's Retry-After. A span is sent twice only if this process stops between the collector's 2xx
 * and the acknowledgement, a window of one store round trip.
 */
@Injectable()
export class SpanOutboxDeliverer implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(SpanOutboxDeliverer.name);
  private readonly leaseMs: number;
  private readonly maxBackoffMs: number;
  private running: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  private finishIdle: (() => void) | undefined;
  private kicked = false;
  private depthReadAt = -Infinity;
  private failing: string | undefined;

  constructor(
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(TRACED_WORK_STORE) private readonly store: TracedWorkStore,
    @Inject(COLLECTOR_CLIENT) private readonly collector: Pick<CollectorClient, 'export'>,
    private readonly metrics: PipelineSpansMetrics,
    // The class itself as the type: Nest injects by the parameter's design type, which a Pick<> would erase.
    @Optional() private readonly outcomeSampling?: OutcomeSamplingService,
  ) {
    // Longer than one send can take, so a lease never runs out under a send still in flight.
    this.leaseMs = config.OTLP_UPSTREAM_TIMEOUT_MS * 2 + 5000;
    this.maxBackoffMs = config.OUTBOX_MAX_BACKOFF_SECONDS * 1000;
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

  /** Spans were just enqueued here: deliver them after a short linger rather than at the next poll. */
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

  /** One claim and one export; true when a full batch went out (so more may be waiting: look again at once). */
  private async deliverOnce(): Promise<boolean> {
    const claimed = await this.store.claimSpans(BATCH_SPANS, this.leaseMs);
    // With each delivery, and once a second while idle.
    if (claimed.length > 0 || performance.now() - this.depthReadAt >= DEPTH_EVERY_MS) {
      this.depthReadAt = performance.now();
      this.metrics.outboxDepth(await this.store.outboxDepth());
    }
    if (claimed.length === 0) return false;
    const spans = claimed.filter((span) => parkedTraceOf(span) === undefined);
    // A pipeline kept by its outcome (SPEC §11): its parked spans, each trace delivered and settled on its own.
    for (const pointer of claimed.filter((span) => parkedTraceOf(span) !== undefined)) await this.deliverParked(pointer);
    if (spans.length === 0) return claimed.length === BATCH_SPANS;
    return this.deliverSpans(spans, claimed.length === BATCH_SPANS);
  }

  /** The outbox's own spans, as one OTLP/JSON export. */
  private async deliverSpans(claimed: ClaimedSpan[], full: boolean): Promise<boolean> {
    const body = Buffer.from(`{"resourceSpans":[${claimed.map((span) => span.resourceSpans).join(',')}]}`);
    const result = await this.collector.export('traces', 'json', body);
    const delivery = deliveryOf(result, Math.max(...claimed.map((span) => span.attempts)), this.maxBackoffMs);
    const ids = claimed.map((span) => span.spanId);
    switch (delivery.kind) {
      case 'accepted':
        await this.store.acknowledgeSpans(ids);
        this.metrics.deliveredSpans(claimed.map((span) => span.enqueuedAt));
        this.recovered('collector');
        if (delivery.rejected > 0)
          this.logger.warn(`the collector rejected ${delivery.rejected} of ${ids.length} pipeline spans (partial success); not retried`);
        return full;
      case 'refused':
        // An answer the collector will give again to the same spans: retrying cannot help, and would hold them forever.
        await this.store.acknowledgeSpans(ids);
        this.metrics.deliveryFailed(String(delivery.status));
        this.logger.error(`the collector refused ${ids.length} pipeline spans with ${delivery.status}; dropped`);
        return full;
      case 'retry': {
        await this.store.retrySpans(ids, delivery.delayMs);
        this.metrics.deliveryFailed(delivery.reason);
        this.failed('collector', `outbox: ${ids.length} pipeline spans not delivered (${delivery.reason}); next attempt in ${Math.round(delivery.delayMs)} ms`);
        return false;
      }
      default: {
        const unreachable: never = delivery;
        throw new Error(`unhandled delivery ${JSON.stringify(unreachable)}`);
      }
    }
  }

  /** One kept trace's parked spans, through the outcome-sampling service: acknowledged once all reached the collector. */
  private async deliverParked(pointer: ClaimedSpan): Promise<void> {
    const { traceId, reason } = parkedTraceOf(pointer)!;
    if (this.outcomeSampling === undefined) return;
    const result = await this.outcomeSampling.deliverParked(traceId, reason as KeepReason, pointer.enqueuedAt);
    const delivery = deliveryOf(result, pointer.attempts, this.maxBackoffMs);
    if (delivery.kind === 'retry') {
      await this.store.retrySpans([pointer.spanId], delivery.delayMs);
      this.metrics.deliveryFailed(delivery.reason);
      this.failed(
        'collector',
        `outbox: parked spans of trace ${traceId} not delivered (${delivery.reason}); next attempt in ${Math.round(delivery.delayMs)} ms`,
      );
      return;
    }
    await this.store.acknowledgeSpans([pointer.spanId]);
    this.recovered('collector');
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
