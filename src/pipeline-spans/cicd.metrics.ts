import { Inject, Injectable } from '@nestjs/common';
import { Attributes, Counter as OtelCounter, Histogram as OtelHistogram, metrics } from '@opentelemetry/api';
import { Counter, Gauge, Histogram } from 'prom-client';
import { PipelineSpansConfig } from '../config/sections/pipeline-spans';
import { MetricsService, seriesOf } from '../observability/metrics.service';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import type { PipelineStoryStore } from '../traced-work/traced-work';
import { PipelineEvent } from './pipeline-events';
import { ActiveRuns, beforeFirstEnd, PipelineNames, RunState, runEndOf } from './pipeline-runs';

/** Seconds, from a quick pipeline to a long one: the same bounds on /metrics and over OTLP. */
const DURATION_BUCKETS = [1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400];
/** Runs a replica remembers as told by it for `cicd.pipeline.run.active` (see ActiveRuns). */
const ACTIVE_RUNS_MAX = 50_000;
const STATES: readonly RunState[] = ['pending', 'executing'];

/** One series on both sides, made once per label values: a value recorded goes to its prom-client child and its OTel instrument. */
interface Series {
  record(value: number): void;
}

function made(
  prom: { labels(labels: Record<string, string>): { inc(value: number): void } | { observe(value: number): void } },
  otel: OtelCounter | OtelHistogram,
  labels: Record<string, string>,
): Series {
  const child = prom.labels(labels);
  const attributes = otelAttributes(labels);
  const write = 'inc' in child ? (value: number) => child.inc(value) : (value: number) => child.observe(value);
  const send = 'add' in otel ? (value: number) => otel.add(value, attributes) : (value: number) => otel.record(value, attributes);
  return {
    record: (value) => {
      write(value);
      send(value);
    },
  };
}

/**
 * The OpenTelemetry CI/CD semantic conventions' metrics (SPEC §14; docs/observability.md "CI/CD metrics"), as the
 * conventions name them over OTLP (`cicd.pipeline.run.duration`, …) and as the OpenTelemetry-to-Prometheus rules name
 * them on `GET /metrics` (`cicd_pipeline_run_duration_seconds`, …). Each record is written to both from the one call:
 * the registry of /metrics is prom-client's (MetricsService), and the OTel SDK's Prometheus exporter would be a second
 * registry and a second endpoint; a pipeline records a handful of values in its whole life, so writing twice costs
 * nothing. Without an OTLP endpoint the OTel side is the API's no-op meter. Nothing is recorded at a pickup.
 */
@Injectable()
export class CicdMetrics {
  private readonly names: PipelineNames;
  private readonly active = new ActiveRuns(ACTIVE_RUNS_MAX);
  private readonly durationSeries = seriesOf((name, state, result, errorType) =>
    made(this.prom.duration, this.otel.duration, {
      cicd_pipeline_name: name,
      cicd_pipeline_run_state: state,
      ...(result === '' ? {} : { cicd_pipeline_result: result }),
      ...(errorType === '' ? {} : { error_type: errorType }),
    }),
  );
  private readonly pendingSeries = seriesOf((name, part) =>
    made(this.prom.pending, this.otel.pending, { cicd_pipeline_name: name, ci_pipeline_run_pending_part: part }),
  );
  private readonly runErrorSeries = seriesOf((name, errorType) =>
    made(this.prom.runErrors, this.otel.runErrors, { cicd_pipeline_name: name, error_type: errorType }),
  );
  private readonly prom: {
    readonly duration: Histogram<string>;
    readonly pending: Histogram<string>;
    readonly runErrors: Counter<string>;
    readonly active: Gauge<string>;
  };
  private readonly otel: {
    readonly duration: OtelHistogram;
    readonly pending: OtelHistogram;
    readonly runErrors: OtelCounter;
  };
  /** The names `active` has counted runs of: each shown, 0 once its runs are gone, to every reader. */
  private readonly activeNames = new Set<string>();

  constructor(
    config: PipelineSpansConfig,
    registryOwner: MetricsService,
    @Inject(TRACED_WORK_STORE) private readonly store: PipelineStoryStore,
  ) {
    this.names = new PipelineNames(config.cicdMetricsMaxPipelineNames);
    const registers = [registryOwner.registry];
    const counted = () => this.activeCounts();
    this.prom = {
      duration: new Histogram({
        name: 'cicd_pipeline_run_duration_seconds',
        help: 'Duration of a pipeline run grouped by pipeline, state and result (OpenTelemetry cicd.pipeline.run.duration)',
        labelNames: ['cicd_pipeline_name', 'cicd_pipeline_run_state', 'cicd_pipeline_result', 'error_type'],
        buckets: DURATION_BUCKETS,
        registers,
      }),
      pending: new Histogram({
        name: 'ci_pipeline_run_pending_duration_seconds',
        help: "A run's pending state split into GitLab's delay and its first job's queue wait (this project's extension)",
        labelNames: ['cicd_pipeline_name', 'ci_pipeline_run_pending_part'],
        buckets: DURATION_BUCKETS,
        registers,
      }),
      runErrors: new Counter({
        name: 'cicd_pipeline_run_errors_total',
        help: 'Errors encountered in pipeline runs: one per failed end of a run (OpenTelemetry cicd.pipeline.run.errors)',
        labelNames: ['cicd_pipeline_name', 'error_type'],
        registers,
      }),
      active: new Gauge({
        name: 'cicd_pipeline_run_active',
        help: 'Pipeline runs currently active by state (OpenTelemetry cicd.pipeline.run.active); summed over replicas',
        labelNames: ['cicd_pipeline_name', 'cicd_pipeline_run_state'],
        registers,
        async collect() {
          const counts = await counted();
          if (counts !== undefined) for (const [labels, value] of counts) this.set(labels, value);
        },
      }),
    };
    const meter = metrics.getMeter('ci-job-telemetry/pipeline-spans');
    this.otel = {
      duration: meter.createHistogram('cicd.pipeline.run.duration', {
        unit: 's',
        description: 'Duration of a pipeline run grouped by pipeline, state and result.',
        advice: { explicitBucketBoundaries: DURATION_BUCKETS },
      }),
      pending: meter.createHistogram('ci.pipeline.run.pending.duration', {
        unit: 's',
        description: "A run's pending state split into GitLab's delay and its first job's queue wait (ci-job-telemetry's extension).",
        advice: { explicitBucketBoundaries: DURATION_BUCKETS },
      }),
      runErrors: meter.createCounter('cicd.pipeline.run.errors', { unit: '{error}', description: 'The number of errors encountered in pipeline runs.' }),
    };
    meter
      .createObservableUpDownCounter('cicd.pipeline.run.active', {
        unit: '{run}',
        description: 'The number of pipeline runs currently active in the system by state.',
      })
      .addCallback(async (result) => {
        const counts = await counted();
        if (counts !== undefined) for (const [labels, value] of counts) result.observe(value, otelAttributes(labels));
      });
  }

  /** A run's state (pending, executing) told first by this replica: `told`, the version its hook raised. */
  entered(event: PipelineEvent, state: RunState, told: number): void {
    this.active.entered(event.pipelineId, this.names.of(event), state, told);
  }

  /**
   * A run's end told first by this replica (`before`: the version told before it). Its time by state is recorded at its
   * first end only: a pipeline GitLab reopens (a retry, a manual job played) is the same run, and its next end only
   * counts its error, if it failed again.
   */
  ended(event: PipelineEvent, before: number): void {
    this.active.ended(event.pipelineId);
    if (event.end === undefined) return;
    const name = this.names.of(event);
    const run = runEndOf(event.end, event.finishedJobs);
    if (run.errorType !== undefined) this.runErrorSeries(name, run.errorType).record(1);
    if (!beforeFirstEnd(before)) return;
    for (const { state, seconds, result, errorType } of run.states) this.durationSeries(name, state, result ?? '', errorType ?? '').record(seconds);
    if (run.pendingParts === undefined) return;
    this.pendingSeries(name, 'gitlab_delay').record(run.pendingParts.gitlabDelay);
    this.pendingSeries(name, 'queue_wait').record(run.pendingParts.queueWait);
  }

  /**
   * Active runs by their labels, as the store says they still are (see ActiveRuns): read when /metrics is scraped or
   * the OTLP reader collects, never on a hook's path. Undefined when the store cannot say: nothing is reported then.
   */
  private async activeCounts(): Promise<Array<[Record<string, string>, number]> | undefined> {
    const ids = this.active.pipelineIds();
    let versions: number[];
    try {
      versions = ids.length === 0 ? [] : await this.store.highestPipelineSpanVersions(ids);
    } catch {
      return undefined;
    }
    const counts = this.active.counted(ids, versions);
    for (const name of counts.keys()) this.activeNames.add(name);
    // A name whose runs have all ended shows 0 rather than its last count (bounded: names are capped).
    const counted: Array<[Record<string, string>, number]> = [];
    for (const name of this.activeNames) {
      const byState = counts.get(name);
      for (const state of STATES) counted.push([{ cicd_pipeline_name: name, cicd_pipeline_run_state: state }, byState?.[state] ?? 0]);
    }
    return counted;
  }
}

/** The OTel attributes of Prometheus labels: the conventions' dotted names, which the Prometheus rules made `_`. */
function otelAttributes(labels: Record<string, string>): Attributes {
  const attributes: Attributes = {};
  for (const [label, value] of Object.entries(labels)) attributes[ATTRIBUTE_OF_LABEL[label]] = value;
  return attributes;
}

const ATTRIBUTE_OF_LABEL: Readonly<Record<string, string>> = {
  cicd_pipeline_name: 'cicd.pipeline.name',
  cicd_pipeline_run_state: 'cicd.pipeline.run.state',
  cicd_pipeline_result: 'cicd.pipeline.result',
  error_type: 'error.type',
  ci_pipeline_run_pending_part: 'ci.pipeline.run.pending.part',
};
