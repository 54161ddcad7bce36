import { parseRetryAfter } from './retry-after';

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
