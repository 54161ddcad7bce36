import { OUTAGE_RETRY_AFTER_SECONDS, parseRetryAfter, retryAfterForWindow } from './retry-after';

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

describe('Retry-After', () => {
  it.each([
    ['7', 7],
    [' 120 ', 120],
    ['0', 1],
    ['1', 1],
  ])("passes on an upstream's delay-seconds %j as %i whole seconds, never 0", (header, seconds) => {
    expect(parseRetryAfter(header)).toBe(seconds);
  });

  it('turns an HTTP-date into the whole seconds left until it, the only form otel-go reads', () => {
    const now = Date.parse('2026-11-22T10:00:00Z');
    expect(parseRetryAfter('Sun, 22 Nov 2026 10:00:30 GMT', now)).toBe(30);
    expect(parseRetryAfter('Sun, 22 Nov 2026 09:59:00 GMT', now)).toBe(1);
  });

  it.each([undefined, '', 'soon', '-3', '1.5'])('reads %j as no Retry-After at all', (header) => {
    expect(parseRetryAfter(header)).toBeUndefined();
  });
});
