import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { MetricsService, seriesOf } from '../observability/metrics.service';
import type { OtlpSignal } from '../otlp/otlp-encoding';
import type { CoalescingObserver } from './coalescing-collector-client';

/** What an operator watches of the requests to the collector (issue 29): how many, how full, how long exports waited. */
@Injectable()
export class CollectorMetrics implements CoalescingObserver {
  private readonly batchExports: Histogram<'signal'>;
  private readonly bytes: Counter<'signal'>;
  private readonly lingerSeconds: Histogram<'signal'>;
  private readonly batchSeries = seriesOf((signal) => this.batchExports.labels(signal));
  private readonly bytesSeries = seriesOf((signal) => this.bytes.labels(signal));
  private readonly lingerSeries = seriesOf((signal) => this.lingerSeconds.labels(signal));
  private readonly splits: Counter<'signal'>;
  private readonly splitSeries = seriesOf((signal) => this.splits.labels(signal));

  constructor(metrics: MetricsService) {
    const registers = [metrics.registry];
    this.batchExports = new Histogram({
      name: 'ci_job_telemetry_collector_request_exports',
      help: 'Exports carried by each request to the collector: _count is requests sent, _sum exports sent, so _count / _sum is upstream requests per export',
      labelNames: ['signal'],
      buckets: [1, 2, 4, 8, 16, 32, 64, 128],
      registers,
    });
    this.bytes = new Counter({
      name: 'ci_job_telemetry_collector_request_bytes_total',
      help: 'Bytes of the requests sent to the collector',
      labelNames: ['signal'],
      registers,
    });
    this.lingerSeconds = new Histogram({
      name: 'ci_job_telemetry_collector_linger_seconds',
      help: 'Time an export waited for others before the request carrying it left (OTLP_UPSTREAM_LINGER_MS bounds it)',
      labelNames: ['signal'],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05],
      registers,
    });
    this.splits = new Counter({
      name: 'ci_job_telemetry_collector_split_requests_total',
      help: 'Joined requests the collector refused whole (4xx other than 429), then sent again one export per request so that only the bad export is refused',
      labelNames: ['signal'],
      registers,
    });
  }

  splitAfterRefusal(signal: OtlpSignal): void {
    this.splitSeries(signal).inc();
  }

  requestSent(signal: OtlpSignal, exports: number, bytes: number): void {
    this.batchSeries(signal).observe(exports);
    this.bytesSeries(signal).inc(bytes);
  }

  lingered(signal: OtlpSignal, seconds: number): void {
    this.lingerSeries(signal).observe(seconds);
  }
}
