import { IsOptional } from 'class-validator';
import { IsHttpUrl, Text, Variable } from '../variable';

/** Self-instrumentation (SPEC §8): the service's own spans. */
export class SelfTracingConfig {
  /**
   * Where the service sends its own spans (SPEC §8): an OTLP/HTTP base URL, `/v1/traces` appended.
   * Unset: no SDK is registered and self-instrumentation costs next to nothing.
   */
  @Variable('OTEL_EXPORTER_OTLP_ENDPOINT') @IsOptional() @IsHttpUrl() readonly endpoint?: string;

  @Variable('OTEL_SERVICE_NAME') @Text() readonly serviceName: string = 'ci-job-telemetry';
}
