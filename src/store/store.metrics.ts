import { Counter } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';

/** What an operator watches of the store's connection (SPEC §8): lost connections and found primaries, by topology. */
export class StoreMetrics {
  private readonly reconnects: Counter.Internal;
  private readonly failovers: Counter.Internal;

  constructor(metrics: MetricsService, mode: string) {
    const registers = [metrics.registry];
    const reconnects = new Counter({
      name: 'ci_job_telemetry_store_reconnects_total',
      help: 'Connections to a Redis node of the store that were lost and are being re-established',
      labelNames: ['mode'] as const,
      registers,
    });
    const failovers = new Counter({
      name: 'ci_job_telemetry_store_failovers_total',
      help: 'Times the store found a different primary after a reconnect (Sentinel) or slot map refresh (Cluster)',
      labelNames: ['mode'] as const,
      registers,
    });
    this.reconnects = reconnects.labels(mode);
    this.failovers = failovers.labels(mode);
    // Both series from the start, at 0: an alert on their rate needs them before the first loss.
    this.reconnects.inc(0);
    this.failovers.inc(0);
  }

  reconnecting(): void {
    this.reconnects.inc();
  }

  failedOver(): void {
    this.failovers.inc();
  }
}
