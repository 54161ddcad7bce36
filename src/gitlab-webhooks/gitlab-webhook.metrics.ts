import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { MetricsService, seriesOf } from '../observability/metrics.service';

/** What an operator watches of GitLab's webhooks (SPEC §10 "Sources"): each one by event and outcome, and how long its answer took. */
@Injectable()
export class GitlabWebhookMetrics {
  private readonly webhooks: Counter<'event' | 'outcome'>;
  private readonly webhookSeconds: Histogram;
  private readonly webhookSeries = seriesOf((event, outcome) => this.webhooks.labels(event, outcome));

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
  }

  webhook(event: string, outcome: string, seconds?: number): void {
    this.webhookSeries(event, outcome).inc();
    if (seconds !== undefined) this.webhookSeconds.observe(seconds);
  }
}
