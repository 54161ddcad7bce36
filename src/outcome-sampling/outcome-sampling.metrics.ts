import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { MetricsService, seriesOf } from '../observability/metrics.service';
import type { ParkingLimit, ParkingUsage, TraceDecision } from './parking/parking';

/** What an operator watches of SPEC §11: what is parked, what was decided and why, what came late or fell back. */
@Injectable()
export class OutcomeSamplingMetrics {
  private readonly decisions: Counter<'decision' | 'reason'>;
  private readonly parkedSpans: Counter;
  private readonly late: Counter<'decision'>;
  private readonly fallbacks: Counter<'limit'>;
  private readonly delay: Histogram;
  private readonly expired: Counter;
  private readonly decisionSeries = seriesOf((decision, reason) => this.decisions.labels(decision, reason));
  private readonly lateSeries = seriesOf((decision) => this.late.labels(decision));
  private readonly fallbackSeries = seriesOf((limit) => this.fallbacks.labels(limit));
  private usage: ParkingUsage = { traces: 0, spans: 0, bytes: 0 };

  constructor(metrics: MetricsService) {
    const registers = [metrics.registry];
    this.decisions = new Counter({
      name: 'ci_job_telemetry_outcome_decisions_total',
      help: 'Provisional pipelines decided, by decision (kept, dropped) and reason (failed, slow, queued, no_outcome; outcome: matched nothing in the policy)',
      labelNames: ['decision', 'reason'] as const,
      registers,
    });
    this.parkedSpans = new Counter({ name: 'ci_job_telemetry_parked_spans_total', help: 'Spans parked for provisional pipelines', registers });
    metrics.gauge('ci_job_telemetry_parked_spans', 'Spans parked now, waiting for their pipeline’s outcome (all replicas)', () => this.usage.spans);
    metrics.gauge('ci_job_telemetry_parked_bytes', 'Bytes parked now, as they would be forwarded (all replicas)', () => this.usage.bytes);
    metrics.gauge('ci_job_telemetry_parked_pipelines', 'Provisional pipelines waiting for their decision (all replicas)', () => this.usage.traces);
    this.late = new Counter({
      name: 'ci_job_telemetry_outcome_late_spans_total',
      help: 'Spans of a provisional pipeline that arrived after its decision, by the decision they followed (kept: forwarded, dropped)',
      labelNames: ['decision'] as const,
      registers,
    });
    this.fallbacks = new Counter({
      name: 'ci_job_telemetry_outcome_fallbacks_total',
      help: 'Provisional spans that fell back to the head decision (dropped) because a budget was full, by limit (trace_spans, trace_bytes, total_bytes)',
      labelNames: ['limit'] as const,
      registers,
    });
    this.delay = new Histogram({
      name: 'ci_job_telemetry_outcome_decision_delay_seconds',
      help: 'Time from a provisional pipeline’s decision to keep to the collector accepting the last of its parked spans',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 1800],
      registers,
    });
    this.expired = new Counter({
      name: 'ci_job_telemetry_outcome_expired_pipelines_total',
      help: 'Kept pipelines given up: their parked spans expired in the store before the collector took them (it was unreachable for longer than they are held)',
      registers,
    });
  }

  decided(decision: TraceDecision): void {
    this.decisionSeries(decision.keep ? 'kept' : 'dropped', decision.reason).inc();
  }

  parked(spans: number): void {
    this.parkedSpans.inc(spans);
  }

  lateSpans(decision: TraceDecision, spans: number): void {
    this.lateSeries(decision.keep ? 'kept' : 'dropped').inc(spans);
  }

  fellBack(limit: ParkingLimit, spans: number): void {
    this.fallbackSeries(limit).inc(spans);
  }

  delivered(decidedAt: number): void {
    this.delay.observe(Math.max(0, Date.now() - decidedAt) / 1000);
  }

  expiredBeforeDelivery(): void {
    this.expired.inc();
  }

  observedUsage(usage: ParkingUsage): void {
    this.usage = usage;
  }

  lastUsage(): ParkingUsage {
    return this.usage;
  }
}
