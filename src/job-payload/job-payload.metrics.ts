import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';
import { TelemetryReason } from './job-payload-decoration';

const REASONS: readonly TelemetryReason[] = ['enabled', 'flag_disabled', 'not_sampled', 'runner_unsupported', 'degraded'];

/** What an operator watches of the decorator (SPEC §4, §8): every pickup's decision and its time. */
@Injectable()
export class JobPayloadMetrics {
  private readonly decisions: Record<TelemetryReason, Counter.Internal>;
  private readonly decisionSeconds: Histogram;
  private readonly grantsNotSaved: Counter.Internal;

  constructor(private readonly metrics: MetricsService) {
    const registers = [metrics.registry];
    const decisions = new Counter({
      name: 'ci_job_telemetry_decisions_total',
      help: 'Job-payload decisions by reason (enabled, flag_disabled, not_sampled, runner_unsupported, degraded)',
      labelNames: ['reason'] as const,
      registers,
    });
    this.decisions = Object.fromEntries(REASONS.map((reason) => [reason, decisions.labels(reason)])) as Record<TelemetryReason, Counter.Internal>;
    this.decisionSeconds = new Histogram({
      name: 'ci_job_telemetry_decision_duration_seconds',
      help: 'Time the decorator spent on one job payload, store write included',
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5],
      registers,
    });
    const storeErrors = new Counter({
      name: 'ci_job_telemetry_store_errors_total',
      help: 'Grant store operations that failed or timed out',
      labelNames: ['operation'] as const,
      registers,
    });
    this.grantsNotSaved = storeErrors.labels('save_grant');
  }

  decided(reason: TelemetryReason, seconds: number): void {
    this.decisions[reason].inc();
    this.decisionSeconds.observe(seconds);
  }

  /** Also `cicd.system.errors`: the job ran without telemetry because the store did not keep its grant. */
  grantNotSaved(): void {
    this.grantsNotSaved.inc();
    this.metrics.systemError('job_payload', 'store_failure');
  }
}
