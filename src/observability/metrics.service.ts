import { Injectable } from '@nestjs/common';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';

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
