const DELAY_SECONDS = /^\s*(\d+)\s*$/;
/** All three HTTP-date forms start with the day name; Date.parse alone takes "1.5" for a date. */
const HTTP_DATE = /^\s*(Mon|Tue|Wed|Thu|Fri|Sat|Sun)/;

/**
 * A Retry-After header in either form RFC 9110 §10.2.3 allows (delay-seconds or an HTTP-date), as integer
 * seconds of at least 1: the JS exporter reads 0 as "retry at once" and spends every try within
 * milliseconds. Undefined when there is none or nothing readable. Whole seconds because they are what
 * otel-go's exporters read when the gateway passes the wait on.
 */
export function parseRetryAfter(header: string | undefined, now = Date.now()): number | undefined {
  if (header === undefined) return undefined;
  const seconds = DELAY_SECONDS.exec(header)?.[1];
  if (seconds !== undefined) return Math.max(1, Math.min(Number(seconds), Number.MAX_SAFE_INTEGER));
  const at = HTTP_DATE.test(header) ? Date.parse(header) : NaN;
  if (Number.isNaN(at)) return undefined;
  return Math.max(1, Math.ceil((at - now) / 1000));
}
