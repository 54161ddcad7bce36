import { GatewayFailure, otlpErrorAnswer } from './otlp-errors';

/** OTLP/HTTP: clients retry exactly these, honouring Retry-After. */
const RETRYABLE = [429, 502, 503, 504];

const failures: GatewayFailure[] = [
  { kind: 'unsupported_media_type', message: 'text/plain' },
  { kind: 'bad_request', message: 'not OTLP' },
  { kind: 'not_found', message: 'no route' },
  { kind: 'too_large', message: 'big' },
  { kind: 'unauthenticated', reason: 'no token' },
  { kind: 'forbidden', reason: 'revoked' },
  { kind: 'rate_limited', reason: 'over the window', retryAfterSeconds: 12 },
  { kind: 'unavailable', reason: 'job token keys unreadable', retryAfterSeconds: 1 },
  { kind: 'store_unavailable', retryAfterSeconds: 1 },
  { kind: 'shutting_down' },
  { kind: 'upstream_unreachable' },
  { kind: 'upstream_timeout' },
  { kind: 'upstream_error', status: 500 },
  { kind: 'upstream_refused', status: 400 },
  { kind: 'internal' },
];

describe('otlpErrorAnswer', () => {
  it.each(failures.map((failure) => [failure.kind, failure] as const))(
    'answers %s so a client retries it if and only if it is transient, with a Retry-After',
    (_kind, failure) => {
      const answer = otlpErrorAnswer(failure);
      const transient = [
        'rate_limited',
        'unavailable',
        'store_unavailable',
        'shutting_down',
        'upstream_unreachable',
        'upstream_timeout',
        'upstream_error',
      ].includes(failure.kind);
      expect(RETRYABLE.includes(answer.httpStatus)).toBe(transient);
      if (transient) expect(answer.retryAfterSeconds).toBeGreaterThanOrEqual(1);
      expect(answer.httpStatus).toBeGreaterThanOrEqual(400);
    },
  );

  it('answers an auth refusal with the status, message and Retry-After the auth endpoint gives it, and the matching RPC code', () => {
    expect(otlpErrorAnswer({ kind: 'unauthenticated', reason: 'unknown job token' })).toEqual({
      httpStatus: 401,
      status: { code: 16, message: 'unknown job token' },
      retryAfterSeconds: undefined,
    });
    expect(otlpErrorAnswer({ kind: 'forbidden', reason: 'grant revoked' })).toMatchObject({ httpStatus: 403, status: { code: 7, message: 'grant revoked' } });
    expect(otlpErrorAnswer({ kind: 'rate_limited', reason: 'window spent', retryAfterSeconds: 4 })).toEqual({
      httpStatus: 429,
      status: { code: 8, message: 'runner rate limit exceeded' },
      retryAfterSeconds: 4,
    });
    expect(otlpErrorAnswer({ kind: 'unavailable', reason: 'grant store unavailable', retryAfterSeconds: 1 })).toEqual({
      httpStatus: 503,
      status: { code: 14, message: 'grant store unavailable' },
      retryAfterSeconds: 1,
    });
  });

  it("passes on the collector's own Retry-After, and its status where a client reads it the same way", () => {
    expect(otlpErrorAnswer({ kind: 'upstream_error', status: 503, retryAfterSeconds: 7 })).toMatchObject({ httpStatus: 503, retryAfterSeconds: 7 });
    expect(otlpErrorAnswer({ kind: 'upstream_error', status: 500 })).toMatchObject({ httpStatus: 502, retryAfterSeconds: 1 });
    expect(otlpErrorAnswer({ kind: 'upstream_refused', status: 429, retryAfterSeconds: 30 })).toMatchObject({ httpStatus: 429, retryAfterSeconds: 30 });
    const collectorStatus = Buffer.from([0x08, 0x03]);
    expect(otlpErrorAnswer({ kind: 'upstream_refused', status: 400, statusBody: collectorStatus }).status).toBe(collectorStatus);
  });
});
