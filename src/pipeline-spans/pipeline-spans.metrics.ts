import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { MetricsService, seriesOf } from '../observability/metrics.service';

/** What an operator watches of SPEC §10's spans: where each went (queued, a copy, refused: outbox full), and store failures. */
@Injectable()
export class PipelineSpansMetrics {
  private readonly spans: Counter<'source' | 'outcome'>;
  private readonly storeFailures: Counter<'operation'>;
  private readonly spanSeries = seriesOf((source, outcome) => this.spans.labels(source, outcome));
  private readonly storeFailureSeries = seriesOf((operation) => this.storeFailures.labels(operation));

  constructor(private readonly metrics: MetricsService) {
    const registers = [metrics.registry];
    this.spans = new Counter({
      name: 'ci_job_telemetry_pipeline_spans_total',
      help: 'Control-plane spans offered to the outbox, by source (pickup, job_hook, pipeline_hook, runner) and outcome (queued, duplicate, refused: outbox full)',
      labelNames: ['source', 'outcome'] as const,
      registers,
    });
    this.storeFailures = new Counter({
      name: 'ci_job_telemetry_pipeline_spans_store_failures_total',
      help: 'Pipeline-span store operations that failed (the spans they were for are lost and logged)',
      labelNames: ['operation'] as const,
      registers,
    });
  }

  /** The outbox's answer for a source's spans (a span a newer version made stale is counted as a copy). */
  enqueued(source: string, outcome: { readonly queued: number; readonly duplicates: number; readonly refused: number }): void {
    if (outcome.queued > 0) this.spanSeries(source, 'queued').inc(outcome.queued);
    if (outcome.duplicates > 0) this.spanSeries(source, 'duplicate').inc(outcome.duplicates);
    if (outcome.refused > 0) this.spanSeries(source, 'refused').inc(outcome.refused);
  }

  /** Also the conventions' `cicd.system.errors`: a failure of the control plane's own, not of a pipeline run. */
  storeFailure(operation: string): void {
    this.storeFailureSeries(operation).inc();
    this.metrics.systemError('pipeline_spans', 'store_failure');
  }
}
