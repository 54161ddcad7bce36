import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';
import { SpoolDepth } from './webhook-spool';

export type SpoolReason = 'store_unavailable' | 'store_timeout' | 'error' | 'behind_spooled';
export type SpoolRefusal = 'full' | 'unwritable';
export type SpoolDrop = 'failed_repeatedly' | 'unreadable';

/** What an operator watches of the webhook spool: what went in, what came out, what was turned away, and what waits. */
@Injectable()
export class WebhookSpoolMetrics {
  private readonly spooled: Counter<'reason'>;
  private readonly replayed: Counter;
  private readonly refusals: Counter<'reason'>;
  private readonly dropped: Counter<'reason'>;
  private depth: SpoolDepth = { hooks: 0, bytes: 0 };

  constructor(metrics: MetricsService) {
    const registers = [metrics.registry];
    this.spooled = new Counter({
      name: 'ci_job_telemetry_webhooks_spooled_total',
      help: 'GitLab webhooks answered 202 and kept in the local spool, by reason (store_unavailable, store_timeout, error, behind_spooled: its pipeline had hooks waiting)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.replayed = new Counter({ name: 'ci_job_telemetry_webhooks_replayed_total', help: 'Spooled webhooks handled once the store was back', registers });
    this.refusals = new Counter({
      name: 'ci_job_telemetry_webhook_spool_refusals_total',
      help: 'GitLab webhooks answered 503 because the spool could not take them (full, unwritable)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.dropped = new Counter({
      name: 'ci_job_telemetry_webhooks_dropped_total',
      help: 'Spooled webhooks given up on, logged (failed_repeatedly: handling failed other than by a store outage; unreadable)',
      labelNames: ['reason'] as const,
      registers,
    });
    metrics.gauge('ci_job_telemetry_webhook_spool_hooks', 'GitLab webhooks waiting in the local spool for the store', () => this.depth.hooks);
    metrics.gauge('ci_job_telemetry_webhook_spool_bytes', 'Bytes of the GitLab webhooks waiting in the local spool', () => this.depth.bytes);
    metrics.gauge('ci_job_telemetry_webhook_spool_oldest_hook_age_seconds', 'Age of the oldest webhook waiting in the spool, 0 when empty', () =>
      this.depth.oldestSpooledAt === undefined ? 0 : Math.max(0, Date.now() - this.depth.oldestSpooledAt) / 1000,
    );
  }

  hookSpooled(reason: SpoolReason): void {
    this.spooled.inc({ reason });
  }

  hookReplayed(): void {
    this.replayed.inc();
  }

  hookRefused(reason: SpoolRefusal): void {
    this.refusals.inc({ reason });
  }

  hookDropped(reason: SpoolDrop): void {
    this.dropped.inc({ reason });
  }

  spoolDepth(depth: SpoolDepth): void {
    this.depth = depth;
  }

  lastDepth(): SpoolDepth {
    return this.depth;
  }
}
