/**
 * The one Retry-After policy of both ports (SPEC §5, §6). Always integer seconds: the only form
 * otel-go's exporters read, and what nginx passes on from the auth endpoint unchanged. An upstream's own
 * Retry-After is read by src/otlp/retry-after.ts.
 */

/**
 * Wait after an outage (store, collector, control process) when nobody upstream said how long. A default
 * OTLP exporter has a 10 s export timeout and 5 retries, and a Retry-After replaces its own backoff (JS
 * exporter 0.2xx): 1 s gives it several tries across a collector restart, where 5 s left it one (issue 9
 * item 8). Never 0: the JS exporter reads 0 as "retry at once" and spends every try within milliseconds.
 */
export const OUTAGE_RETRY_AFTER_SECONDS = 1;

/** What is left of a rate-limit window, rounded up so a client never comes back before it has reset. */
export function retryAfterForWindow(resetInMs: number): number {
  return Math.max(1, Math.ceil(resetInMs / 1000));
}
