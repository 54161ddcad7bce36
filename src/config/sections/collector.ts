import { IsOptional, Matches } from 'class-validator';
import { Integer, IsHttpUrl, Variable } from '../variable';

/** Where exports and the service's own pipeline spans go (SPEC §6): the OpenTelemetry Collector, or the embedded one. */
export class CollectorConfig {
  /**
   * The OpenTelemetry Collector's OTLP/HTTP base URL the gateway forwards to (SPEC §6). Unset: the embedded
   * collector keeps every export under DATA_DIR (issue 20), so `npm start` works with no other server.
   */
  @Variable('OTLP_UPSTREAM_URL') @IsOptional() @IsHttpUrl() readonly upstreamUrl?: string;

  /** Size at which the embedded collector starts a new file per signal, keeping one previous file (`.jsonl.1`). */
  @Variable('LOCAL_COLLECTOR_MAX_BYTES') @Integer({ min: 1024 }) readonly localMaxBytes: number = 64 * 1024 * 1024;

  /** Extra headers for the collector, `name=value` pairs separated by commas (upstream credentials). */
  @Variable('OTLP_UPSTREAM_HEADERS')
  @IsOptional()
  @Matches(/^\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=[^,]*(,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=[^,]*)*\s*$/, {
    message: 'must be name=value pairs separated by commas',
  })
  readonly upstreamHeaders?: string;

  @Variable('OTLP_UPSTREAM_TIMEOUT_MS') @Integer({ min: 100 }) readonly upstreamTimeoutMs: number = 10_000;

  /**
   * How long a protobuf traces export may wait to share one upstream request with others (issue 29). It waits
   * only while a request to the collector is in flight, so an idle gateway adds nothing; 0 sends each alone.
   */
  @Variable('OTLP_UPSTREAM_LINGER_MS') @Integer({ min: 0, max: 1000 }) readonly upstreamLingerMs: number = 2;

  /** The most bytes one coalesced upstream request carries; a batch that would grow past it leaves at once. */
  @Variable('OTLP_UPSTREAM_BATCH_MAX_BYTES') @Integer({ min: 1024 }) readonly upstreamBatchMaxBytes: number = 1024 * 1024;
}
