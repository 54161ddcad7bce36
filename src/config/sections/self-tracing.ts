import { IsOptional } from 'class-validator';
import { Integer, IsHttpUrl, Text, Variable } from '../variable';

/** Self-instrumentation (SPEC §8): the service's own spans, and its metrics over OTLP (SPEC §14). */
export class SelfTracingConfig {
  /**
   * Where the service sends its own spans (SPEC §8) and metrics (SPEC §14): an OTLP/HTTP base URL, `/v1/traces` and
   * `/v1/metrics` appended.
   * Unset: no SDK is registered and self-instrumentation costs next to nothing.
   */
  @Variable('OTEL_EXPORTER_OTLP_ENDPOINT') @IsOptional() @IsHttpUrl() readonly endpoint?: string;

  @Variable('OTEL_SERVICE_NAME') @Text() readonly serviceName: string = 'ci-job-telemetry';

  /** How often the metrics are read and exported over OTLP, in ms (the SDK's own variable and default). */
  @Variable('OTEL_METRIC_EXPORT_INTERVAL') @Integer({ min: 100 }) readonly metricExportIntervalMs: number = 60_000;
}
