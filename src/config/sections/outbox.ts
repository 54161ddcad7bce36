import { Integer, Variable } from '../variable';

/** The outbox (SPEC §10): spans the service emits wait here until the collector takes them. */
export class OutboxConfig {
  /**
   * Spans the outbox holds while the collector cannot take them (a few per job). A full outbox refuses new
   * spans (counted, logged, readiness says degraded) and never delays a pickup.
   */
  @Variable('OUTBOX_MAX_SPANS') @Integer({ min: 1 }) readonly maxSpans: number = 100_000;

  /** How long a span id is remembered, so a webhook redelivered later never emits a second copy. */
  @Variable('OUTBOX_DEDUP_SECONDS') @Integer({ min: 60 }) readonly dedupSeconds: number = 3 * 24 * 3600;

  /** Longest wait between two delivery attempts of the outbox while the collector is down. */
  @Variable('OUTBOX_MAX_BACKOFF_SECONDS') @Integer({ min: 1 }) readonly maxBackoffSeconds: number = 30;
}
