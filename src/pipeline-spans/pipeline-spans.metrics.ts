import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { EnqueueOutcome, OutboxDepth } from '../traced-work/traced-work';
import { MetricsService, seriesOf } from '../observability/metrics.service';

/** What an operator watches of SPEC §10: webhooks, the outbox's depth and delay, deliveries. */
@Injectable()
export class PipelineSpansMetrics {
  private readonly webhooks: Counter<'event' | 'outcome'>;
  private readonly webhookSeconds: Histogram;
  private readonly spans: Counter<'source' | 'outcome'>;
  private readonly delivered: Counter;
  private readonly failures: Counter<'reason'>;
  private readonly delaySeconds: Histogram;
  private readonly storeFailures: Counter<'operation'>;
  private readonly webhookSeries = seriesOf((event, outcome) => this.webhooks.labels(event, outcome));
  private readonly spanSeries = seriesOf((source, outcome) => this.spans.labels(source, outcome));
  private readonly failureSeries = seriesOf((reason) => this.failures.labels(reason));
  private readonly storeFailureSeries = seriesOf((operation) => this.storeFailures.labels(operation));
  private depth: OutboxDepth = { spans: 0 };

  constructor(metrics: MetricsService) {
    const registers = [metrics.registry];
    this.webhooks = new Counter({
      name: 'ci_job_telemetry_webhooks_total',
      help: 'GitLab webhooks received, by X-Gitlab-Event and outcome (accepted, spooled, ignored, unauthorized, invalid, unavailable: the spool could not take it)',
      labelNames: ['event', 'outcome'] as const,
      registers,
    });
    this.webhookSeconds = new Histogram({
      name: 'ci_job_telemetry_webhook_duration_seconds',
      help: 'Time from a GitLab webhook arriving to its answer (store lookups and outbox write included)',
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    });
    this.spans = new Counter({
      name: 'ci_job_telemetry_pipeline_spans_total',
      help: 'Control-plane spans offered to the outbox, by source (pickup, job_hook, pipeline_hook, runner) and outcome (queued, duplicate, refused: outbox full)',
      labelNames: ['source', 'outcome'] as const,
      registers,
    });
    this.delivered = new Counter({ name: 'ci_job_telemetry_outbox_delivered_spans_total', help: 'Outbox spans the collector accepted', registers });
    this.failures = new Counter({
      name: 'ci_job_telemetry_outbox_delivery_failures_total',
      help: 'Outbox deliveries that failed, by reason (unreachable, timeout, the collector status, store); retried with backoff unless dropped',
      labelNames: ['reason'] as const,
      registers,
    });
    this.delaySeconds = new Histogram({
      name: 'ci_job_telemetry_outbox_delay_seconds',
      help: 'Time from a span entering the outbox to the collector accepting it',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 1800],
      registers,
    });
    this.storeFailures = new Counter({
      name: 'ci_job_telemetry_pipeline_spans_store_failures_total',
      help: 'Pipeline-span store operations that failed (the spans they were for are lost and logged)',
      labelNames: ['operation'] as const,
      registers,
    });
    metrics.gauge('ci_job_telemetry_outbox_spans', 'Spans waiting in the outbox for the collector (all replicas)', () => this.depth.spans);
    metrics.gauge('ci_job_telemetry_outbox_oldest_span_age_seconds', 'Age of the oldest span waiting in the outbox, 0 when empty', () =>
      this.depth.oldestEnqueuedAt === undefined ? 0 : Math.max(0, Date.now() - this.depth.oldestEnqueuedAt) / 1000,
    );
  }

  webhook(event: string, outcome: string, seconds?: number): void {
    this.webhookSeries(event, outcome).inc();
    if (seconds !== undefined) this.webhookSeconds.observe(seconds);
  }

  enqueued(source: string, outcome: EnqueueOutcome): void {
    if (outcome.queued > 0) this.spanSeries(source, 'queued').inc(outcome.queued);
    if (outcome.duplicates > 0) this.spanSeries(source, 'duplicate').inc(outcome.duplicates);
    if (outcome.refused > 0) this.spanSeries(source, 'refused').inc(outcome.refused);
  }

  deliveredSpans(enqueuedAt: readonly number[]): void {
    this.delivered.inc(enqueuedAt.length);
    const now = Date.now();
    for (const at of enqueuedAt) this.delaySeconds.observe(Math.max(0, now - at) / 1000);
  }

  deliveryFailed(reason: string): void {
    this.failureSeries(reason).inc();
  }

  storeFailure(operation: string): void {
    this.storeFailureSeries(operation).inc();
  }

  outboxDepth(depth: OutboxDepth): void {
    this.depth = depth;
  }

  lastDepth(): OutboxDepth {
    return this.depth;
  }
}
