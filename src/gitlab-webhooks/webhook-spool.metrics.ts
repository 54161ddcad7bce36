import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';
import { SpoolDepth } from './webhook-spool';

const SPOOL_REASONS = ['store_unavailable', 'store_timeout', 'error', 'behind_spooled'] as const;
const SPOOL_REFUSALS = ['full', 'unwritable'] as const;
const SPOOL_DROPS = ['failed_repeatedly', 'unreadable'] as const;
export type SpoolReason = (typeof SPOOL_REASONS)[number];
export type SpoolRefusal = (typeof SPOOL_REFUSALS)[number];
export type SpoolDrop = (typeof SPOOL_DROPS)[number];

/** One handle per reason, made once (a reason's series appears with its first count). */
function handlesOf<Reason extends string>(counter: Counter<'reason'>, reasons: readonly Reason[]): Record<Reason, Counter.Internal> {
  const handles = {} as Record<Reason, Counter.Internal>;
  for (const reason of reasons) handles[reason] = counter.labels(reason);
  return handles;
}

/** What an operator watches of the webhook spool: what went in, what came out, what was turned away, and what waits. */
@Injectable()
export class WebhookSpoolMetrics {
  private readonly spooled: Record<SpoolReason, Counter.Internal>;
  private readonly replayed: Counter;
  private readonly refusals: Record<SpoolRefusal, Counter.Internal>;
  private readonly dropped: Record<SpoolDrop, Counter.Internal>;
  private depth: SpoolDepth = { hooks: 0, bytes: 0 };

  constructor(private readonly metrics: MetricsService) {
    const registers = [metrics.registry];
    const spooled = new Counter({
      name: 'ci_job_telemetry_webhooks_spooled_total',
      help: 'GitLab webhooks answered 202 and kept in the local spool, by reason (store_unavailable, store_timeout, error, behind_spooled: its pipeline had hooks waiting)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.spooled = handlesOf(spooled, SPOOL_REASONS);
    this.replayed = new Counter({ name: 'ci_job_telemetry_webhooks_replayed_total', help: 'Spooled webhooks handled once the store was back', registers });
    const refusals = new Counter({
      name: 'ci_job_telemetry_webhook_spool_refusals_total',
      help: 'GitLab webhooks answered 503 because the spool could not take them (full, unwritable)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.refusals = handlesOf(refusals, SPOOL_REFUSALS);
    const dropped = new Counter({
      name: 'ci_job_telemetry_webhooks_dropped_total',
      help: 'Spooled webhooks given up on, logged (failed_repeatedly: handling failed other than by a store outage; unreadable)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.dropped = handlesOf(dropped, SPOOL_DROPS);
    metrics.gauge('ci_job_telemetry_webhook_spool_hooks', 'GitLab webhooks waiting in the local spool for the store', () => this.depth.hooks);
    metrics.gauge('ci_job_telemetry_webhook_spool_bytes', 'Bytes of the GitLab webhooks waiting in the local spool', () => this.depth.bytes);
    metrics.gauge('ci_job_telemetry_webhook_spool_oldest_hook_age_seconds', 'Age of the oldest webhook waiting in the spool, 0 when empty', () =>
      this.depth.oldestSpooledAt === undefined ? 0 : Math.max(0, Date.now() - this.depth.oldestSpooledAt) / 1000,
    );
  }

  hookSpooled(reason: SpoolReason): void {
    this.spooled[reason].inc();
  }

  hookReplayed(): void {
    this.replayed.inc();
  }

  hookRefused(reason: SpoolRefusal): void {
    this.refusals[reason].inc();
  }

  /** Also `cicd.system.errors`: a hook GitLab was told was taken, given up. */
  hookDropped(reason: SpoolDrop): void {
    this.dropped[reason].inc();
    this.metrics.systemError('webhooks', reason);
  }

  spoolDepth(depth: SpoolDepth): void {
    this.depth = depth;
  }

  lastDepth(): SpoolDepth {
    return this.depth;
  }
}
