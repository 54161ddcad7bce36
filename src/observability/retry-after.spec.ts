import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow } from './retry-after';

/** The JS exporter's defaults: 10 s export timeout, 5 retries, a Retry-After replacing its backoff. */
const EXPORT_TIMEOUT_SECONDS = 10;

describe('Retry-After policy', () => {
  it('lets a default OTLP exporter try several times within its export timeout after an outage', () => {
    expect(OUTAGE_RETRY_AFTER_SECONDS).toBeGreaterThanOrEqual(1);
    expect(Math.floor(EXPORT_TIMEOUT_SECONDS / OUTAGE_RETRY_AFTER_SECONDS)).toBeGreaterThanOrEqual(4);
  });

  it('rounds a rate-limit window up, so a client never comes back before it resets', () => {
    expect(retryAfterForWindow(1)).toBe(1);
    expect(retryAfterForWindow(1001)).toBe(2);
    expect(retryAfterForWindow(0)).toBe(1);
  });
});
