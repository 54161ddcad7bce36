/**
 * Retry-After, both ways (SPEC §5, §6): the one policy of both ports for what this service tells a client, and the
 * one parser of what an upstream (the collector, the control process) tells it. Always integer seconds: the only
 * form otel-go's exporters read, and what nginx passes on from the auth endpoint unchanged.
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

const DELAY_SECONDS = /^\s*(\d+)\s*$/;
/** All three HTTP-date forms start with the day name; Date.parse alone takes "1.5" for a date. */
const HTTP_DATE = /^\s*(Mon|Tue|Wed|Thu|Fri|Sat|Sun)/;

/**
 * A Retry-After header in either form RFC 9110 §10.2.3 allows (delay-seconds or an HTTP-date), as integer
 * seconds of at least 1, for the reason OUTAGE_RETRY_AFTER_SECONDS gives. Undefined when there is none or
 * nothing readable.
 */
export function parseRetryAfter(header: string | undefined, now = Date.now()): number | undefined {
  if (header === undefined) return undefined;
  const seconds = DELAY_SECONDS.exec(header)?.[1];
  if (seconds !== undefined) return Math.max(1, Math.min(Number(seconds), Number.MAX_SAFE_INTEGER));
  const at = HTTP_DATE.test(header) ? Date.parse(header) : NaN;
  if (Number.isNaN(at)) return undefined;
  return Math.max(1, Math.ceil((at - now) / 1000));
}
