import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { MetricsService, seriesOf } from '../observability/metrics.service';
import { ClaimedEntry, OutboxDepth, weightOf } from './outbox';

/** What an operator watches of the outbox (SPEC §10 "Delivery"): its depth and delay, deliveries and failures. */
@Injectable()
export class OutboxMetrics {
  private readonly delivered: Counter;
  private readonly failures: Counter<'reason'>;
  private readonly delaySeconds: Histogram;
  private readonly redelivered: Counter;
  private readonly failureSeries = seriesOf((reason) => this.failures.labels(reason));
  private readonly dropped: Counter<'status'>;
  private readonly droppedSeries = seriesOf((status) => this.dropped.labels(status));
  private depth: OutboxDepth = { spans: 0 };

  constructor(private readonly metrics: MetricsService) {
    const registers = [metrics.registry];
    this.delivered = new Counter({ name: 'ci_job_telemetry_outbox_delivered_spans_total', help: 'Outbox spans the collector accepted', registers });
    this.failures = new Counter({
      name: 'ci_job_telemetry_outbox_delivery_failures_total',
      help: 'Outbox deliveries the collector did not take, by reason (its status, unreachable, timeout): the spans are kept and sent again after a backoff',
      labelNames: ['reason'] as const,
      registers,
    });
    this.dropped = new Counter({
      name: 'ci_job_telemetry_outbox_dropped_spans_total',
      help: 'Spans the collector refused alone, by its status (413 too large, 400 cannot decode): dropped and logged, the rest of their delivery delivered',
      labelNames: ['status'] as const,
      registers,
    });
    this.delaySeconds = new Histogram({
      name: 'ci_job_telemetry_outbox_delay_seconds',
      help: 'Time from a span entering the outbox to the collector accepting it',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 1800],
      registers,
    });
    this.redelivered = new Counter({
      name: 'ci_job_telemetry_outbox_redelivered_total',
      help: 'Outbox entries claimed again after a deliverer stopped mid-delivery (its lease ran out unanswered): the collector may get them twice',
      registers,
    });
    metrics.gauge('ci_job_telemetry_outbox_spans', 'Spans waiting in the outbox for the collector (all replicas)', () => this.depth.spans);
    metrics.gauge('ci_job_telemetry_outbox_oldest_span_age_seconds', 'Age of the oldest span waiting in the outbox, 0 when empty', () =>
      this.depth.oldestEnqueuedAt === undefined ? 0 : Math.max(0, Date.now() - this.depth.oldestEnqueuedAt) / 1000,
    );
  }

  /** `spans` the entries carry (a bundle counts its spans), each observed with its entry's delay. */
  deliveredSpans(entries: readonly Pick<ClaimedEntry, 'key' | 'enqueuedAt'>[], spans: number): void {
    this.delivered.inc(spans);
    const now = Date.now();
    for (const entry of entries) {
      const seconds = Math.max(0, now - entry.enqueuedAt) / 1000;
      for (let i = weightOf(entry.key); i > 0; i--) this.delaySeconds.observe(seconds);
    }
  }

  redeliveredAfterLease(entries: number): void {
    this.redelivered.inc(entries);
  }

  /** One span (or one parked export that could not be cut smaller) the collector refused alone. */
  droppedSpan(status: number): void {
    this.droppedSeries(String(status)).inc();
    this.metrics.systemError('outbox', `dropped_${status}`);
  }

  /** Also `cicd.system.errors`, by what the delivery met (`unreachable`, `timeout`, the collector's status). */
  deliveryFailed(reason: string): void {
    this.failureSeries(reason).inc();
    this.metrics.systemError('outbox', reason);
  }

  outboxDepth(depth: OutboxDepth): void {
    this.depth = depth;
  }

  lastDepth(): OutboxDepth {
    return this.depth;
  }
}
