import { Injectable } from '@nestjs/common';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** The one Prometheus registry of the process, served at `GET /metrics` on the internal port (SPEC §8). */
@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  readonly decisions = new Counter({
    name: 'ci_job_telemetry_decisions_total',
    help: 'Job-payload decisions by reason (enabled, flag_disabled, not_sampled, runner_unsupported, degraded)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly decisionSeconds = new Histogram({
    name: 'ci_job_telemetry_decision_duration_seconds',
    help: 'Time the decorator spent on one job payload, store write included',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5],
    registers: [this.registry],
  });

  readonly storeErrors = new Counter({
    name: 'ci_job_telemetry_store_errors_total',
    help: 'Grant store operations that failed or timed out',
    labelNames: ['operation'] as const,
    registers: [this.registry],
  });

  readonly storeReconnects = new Counter({
    name: 'ci_job_telemetry_store_reconnects_total',
    help: 'Connections to a Redis node of the store that were lost and are being re-established',
    labelNames: ['mode'] as const,
    registers: [this.registry],
  });

  readonly storeFailovers = new Counter({
    name: 'ci_job_telemetry_store_failovers_total',
    help: 'Times the store found a different primary after a reconnect (Sentinel) or slot map refresh (Cluster)',
    labelNames: ['mode'] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /** A gauge whose value is read at scrape time. */
  gauge(name: string, help: string, read: () => number | undefined): Gauge {
    return new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        const value = read();
        if (value !== undefined) this.set(value);
      },
    });
  }
}
