import { Transform } from 'class-transformer';
import { IsBoolean, IsOptional } from 'class-validator';
import { Integer, IsHttpUrl, toBoolean, Variable } from '../variable';

/** The OTLP gateway (SPEC §6): what it asks, what an export may weigh, how fast a job and a runner may send. */
export class GatewayConfig {
  /** Control process auth endpoint for ROLE=gateway (SPEC §2), e.g. http://control:8080/internal/ci/telemetry/auth. */
  @Variable('AUTH_URL') @IsOptional() @IsHttpUrl() readonly authUrl?: string;

  /** Bytes on the wire per export. */
  @Variable('GATEWAY_MAX_WIRE_BYTES') @Integer({ min: 1024 }) readonly maxWireBytes: number = 20 * 1024 * 1024;

  /** Bytes after gzip per export, enforced while inflating (OTLP recommends 20 MiB). */
  @Variable('GATEWAY_MAX_DECOMPRESSED_BYTES') @Integer({ min: 1024 }) readonly maxDecompressedBytes: number = 20 * 1024 * 1024;

  @Variable('SPANS_PER_JOB') @Integer({ min: 0 }) readonly spansPerJob: number = 1000;

  /**
   * Spans one job may send in any one-second window, across replicas (issue 9 item 11). The default lets a
   * full OpenTelemetry SDK batch (512 spans) through at once.
   */
  @Variable('SPANS_PER_SECOND_PER_JOB') @Integer({ min: 1 }) readonly spansPerSecondPerJob: number = 1000;

  /** Largest span the gateway forwards, in the encoding it was sent in (GitLab's design: 4 KB a span). */
  @Variable('SPAN_MAX_BYTES') @Integer({ min: 64 }) readonly spanMaxBytes: number = 4096;

  /** Most attributes one span may carry (the OpenTelemetry SDK's default attribute count limit). */
  @Variable('SPAN_MAX_ATTRIBUTES') @Integer({ min: 1 }) readonly spanMaxAttributes: number = 128;

  /** Longest attribute value on a span: UTF-8 bytes of a string, bytes of a bytes value, encoded size otherwise. */
  @Variable('SPAN_MAX_ATTRIBUTE_VALUE_BYTES') @Integer({ min: 1 }) readonly spanMaxAttributeValueBytes: number = 2048;

  /** Exports one runner may send per window, across replicas. */
  @Variable('GATEWAY_RUNNER_RATE_LIMIT') @Integer({ min: 1 }) readonly runnerRateLimit: number = 6000;

  @Variable('GATEWAY_RUNNER_RATE_WINDOW_SECONDS') @Integer({ min: 1 }) readonly runnerRateWindowSeconds: number = 60;

  /**
   * Successful exports (the gateway's, and the auth endpoint's answers, which nginx asks for on every export)
   * are logged at most once per this many milliseconds, with the count of those not logged; every refusal and
   * failure is logged, and metrics count everything. 0: a line per export.
   */
  @Variable('EXPORT_SUCCESS_LOG_INTERVAL_MS') @Integer({ min: 0 }) readonly successLogIntervalMs: number = 1000;

  /** Auth decisions kept per token pair (the endpoint's max-age caps each one). */
  @Variable('GATEWAY_DECISION_CACHE_SIZE') @Integer({ min: 1 }) readonly decisionCacheSize: number = 10_000;

  /**
   * ROLE=gateway without a Redis store keeps span quotas and rate limits in this process only, so N
   * replicas let through N times the limits. Refused at start unless this says it is intended.
   */
  @Variable('GATEWAY_PER_PROCESS_QUOTAS') @Transform(toBoolean) @IsBoolean() readonly perProcessQuotas: boolean = false;
}
