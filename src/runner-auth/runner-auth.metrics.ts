import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { LedgerObserver } from '../limits/block-lease';
import { MetricsService } from '../observability/metrics.service';

/** The auth decision's store round trips for its runner windows (issue 21), in the process's one registry. */
@Injectable()
export class RunnerAuthMetrics implements LedgerObserver {
  private readonly storeCalls: Record<'window' | 'spans' | 'return', Counter.Internal>;

  constructor(metrics: MetricsService) {
    const storeCalls = new Counter({
      name: 'ci_job_telemetry_auth_store_calls_total',
      help: "Store round trips of the auth decision's runner windows: window (a block of a runner's lookups), return (unspent blocks given back)",
      labelNames: ['kind'],
      registers: [metrics.registry],
    });
    this.storeCalls = { window: storeCalls.labels('window'), spans: storeCalls.labels('spans'), return: storeCalls.labels('return') };
  }

  storeCall(kind: 'window' | 'spans' | 'return'): void {
    this.storeCalls[kind].inc();
  }
}
