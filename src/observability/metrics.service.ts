import { Injectable } from '@nestjs/common';
import { metrics } from '@opentelemetry/api';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';

/**
 * The parts of the control plane whose own failures `cicd.system.errors` counts: a grant or a pipeline's span the store
 * did not keep, the outbox's deliveries the collector did not take, a webhook the spool gave up on, a read the backend
 * did not answer in time.
 */
export type SystemComponent = 'job_payload' | 'pipeline_spans' | 'outbox' | 'webhooks' | 'reads';

/**
 * The one Prometheus registry of the process, served at `GET /metrics` on the internal port (SPEC §8).
 * Each module that owns something worth watching defines its metrics in a small class of its own
 * (`<feature>.metrics.ts`), registered here, with its series' handles made once: prom-client's
 * `inc({labels})` checks and hashes the labels on every call, and `labels()` makes a new handle each time.
 */
@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * The OpenTelemetry CI/CD conventions' `cicd.system.errors` (docs/observability.md "CI/CD metrics"): one failure of
   * the control plane's own, by component and `error.type`, never a pipeline's. On /metrics as
   * `cicd_system_errors_total`, and over OTLP when self-instrumentation exports metrics (the API's no-op meter otherwise).
   */
  private readonly systemErrors = new Counter({
    name: 'cicd_system_errors_total',
    help: "Errors in this control plane's own components, not in pipeline runs (OpenTelemetry cicd.system.errors)",
    labelNames: ['cicd_system_component', 'error_type'] as const,
    registers: [this.registry],
  });
  private readonly otelSystemErrors = metrics
    .getMeter('ci-job-telemetry')
    .createCounter('cicd.system.errors', { unit: '{error}', description: 'The number of errors in a component of the CICD system.' });
  private readonly systemErrorSeries = seriesOf((component, errorType) => {
    const child = this.systemErrors.labels(component, errorType);
    const attributes = { 'cicd.system.component': component, 'error.type': errorType };
    return () => {
      child.inc();
      this.otelSystemErrors.add(1, attributes);
    };
  });

  /** A failure of the control plane's own: `errorType` a short class of it (`store_failure`, a collector's status…). */
  systemError(component: SystemComponent, errorType: string): void {
    this.systemErrorSeries(component, errorType)();
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

/**
 * One series' handle per label values, made on first use: for labels whose values are not all known
 * up front (a signal, a collector status).
 */
export function seriesOf<T>(make: (...values: string[]) => T): (...values: string[]) => T {
  const made = new Map<string, T>();
  return (...values) => {
    const key = values.join('\0');
    let series = made.get(key);
    if (series === undefined) made.set(key, (series = make(...values)));
    return series;
  };
}
