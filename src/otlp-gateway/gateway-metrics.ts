import { Counter, Histogram, Registry } from 'prom-client';
import { DecisionCacheObserver } from '../runner-auth/decision-cache';

/** What an operator watches on the gateway (SPEC §6, §8), in the process's one registry. */
export class GatewayMetrics implements DecisionCacheObserver {
  readonly requests: Counter<'signal' | 'status'>;
  readonly items: Counter<'signal' | 'outcome'>;
  readonly bytesReceived: Counter<'signal'>;
  readonly bytesForwarded: Counter<'signal'>;
  readonly upstreamSeconds: Histogram<'signal' | 'outcome'>;
  private readonly decisionCache: Counter<'result'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.requests = new Counter({
      name: 'ci_job_telemetry_gateway_requests_total',
      help: 'OTLP exports by signal and HTTP status',
      labelNames: ['signal', 'status'],
      registers,
    });
    this.items = new Counter({
      name: 'ci_job_telemetry_gateway_items_total',
      help: 'Spans, data points and log records by outcome: accepted, rejected_foreign_trace, rejected_span_limits, rejected_quota, rejected_rate',
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
  }

  hit(): void {
    this.decisionCache.inc({ result: 'hit' });
  }

  miss(): void {
    this.decisionCache.inc({ result: 'miss' });
  }
}
