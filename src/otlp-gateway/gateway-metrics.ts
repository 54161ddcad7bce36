import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { LedgerObserver } from '../limits/block-lease';
import { MetricsService, seriesOf } from '../observability/metrics.service';
import { DecisionCacheObserver } from '../runner-auth/decision-cache';

/** What an operator watches on the gateway (SPEC §6, §8), in the process's one registry. */
@Injectable()
export class GatewayMetrics implements DecisionCacheObserver, LedgerObserver {
  private readonly requests: Counter<'signal' | 'status'>;
  private readonly items: Counter<'signal' | 'outcome'>;
  private readonly bytesReceived: Counter<'signal'>;
  private readonly bytesForwarded: Counter<'signal'>;
  private readonly upstreamSeconds: Histogram<'signal' | 'outcome'>;
  private readonly decisionCache: Counter<'result'>;
  private readonly requestSeries = seriesOf((signal, status) => this.requests.labels(signal, status));
  private readonly itemSeries = seriesOf((signal, outcome) => this.items.labels(signal, outcome));
  private readonly receivedSeries = seriesOf((signal) => this.bytesReceived.labels(signal));
  private readonly forwardedSeries = seriesOf((signal) => this.bytesForwarded.labels(signal));
  private readonly upstreamSeries = seriesOf((signal, outcome) => this.upstreamSeconds.labels(signal, outcome));
  private readonly hits: Counter.Internal;
  private readonly misses: Counter.Internal;
  private readonly storeCalls: Record<'window' | 'spans' | 'return', Counter.Internal>;

  constructor(metrics: MetricsService) {
    const registers = [metrics.registry];
    this.requests = new Counter({
      name: 'ci_job_telemetry_gateway_requests_total',
      help: 'OTLP exports by signal and HTTP status',
      labelNames: ['signal', 'status'],
      registers,
    });
    this.items = new Counter({
      name: 'ci_job_telemetry_gateway_items_total',
      help: 'Spans, data points and log records by outcome: accepted, rejected_foreign_trace, rejected_undecodable, rejected_control_plane_span_id, rejected_reserved_attribute, rejected_span_limits, rejected_quota, rejected_rate',
      labelNames: ['signal', 'outcome'],
      registers,
    });
    this.bytesReceived = new Counter({
      name: 'ci_job_telemetry_gateway_received_bytes_total',
      help: 'Export bytes received on the wire',
      labelNames: ['signal'],
      registers,
    });
    this.bytesForwarded = new Counter({
      name: 'ci_job_telemetry_gateway_forwarded_bytes_total',
      help: 'Export bytes forwarded to the collector',
      labelNames: ['signal'],
      registers,
    });
    this.upstreamSeconds = new Histogram({
      name: 'ci_job_telemetry_gateway_upstream_duration_seconds',
      help: 'Time the collector took to answer a forwarded export',
      labelNames: ['signal', 'outcome'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
      registers,
    });
    this.decisionCache = new Counter({
      name: 'ci_job_telemetry_gateway_decision_cache_total',
      help: 'Auth decisions served from the cache (hit) or looked up (miss)',
      labelNames: ['result'],
      registers,
    });
    this.hits = this.decisionCache.labels('hit');
    this.misses = this.decisionCache.labels('miss');
    const storeCalls = new Counter({
      name: 'ci_job_telemetry_gateway_store_calls_total',
      help: "Store round trips of the gateway's leases: window (a block of a runner's exports), spans (a job's span lease), return (unspent blocks given back)",
      labelNames: ['kind'],
      registers,
    });
    this.storeCalls = { window: storeCalls.labels('window'), spans: storeCalls.labels('spans'), return: storeCalls.labels('return') };
  }

  storeCall(kind: 'window' | 'spans' | 'return'): void {
    this.storeCalls[kind].inc();
  }

  request(signal: string, status: number): void {
    this.requestSeries(signal, String(status)).inc();
  }

  /** Only outcomes that happened: a zero would create a series for every signal and outcome on first export. */
  itemsOf(signal: string, outcome: string, count: number): void {
    if (count > 0) this.itemSeries(signal, outcome).inc(count);
  }

  received(signal: string, bytes: number): void {
    this.receivedSeries(signal).inc(bytes);
  }

  forwarded(signal: string, bytes: number): void {
    this.forwardedSeries(signal).inc(bytes);
  }

  /** `outcome`: the collector's HTTP status, or why there was none. */
  upstreamAnswered(signal: string, outcome: string, seconds: number): void {
    this.upstreamSeries(signal, outcome).observe(seconds);
  }

  hit(): void {
    this.hits.inc();
  }

  miss(): void {
    this.misses.inc();
  }
}
