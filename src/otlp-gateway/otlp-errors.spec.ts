import { GatewayFailure, otlpErrorAnswer } from './otlp-errors';

/** OTLP/HTTP: clients retry exactly these, honouring Retry-After. */
const RETRYABLE = [429, 502, 503, 504];

const failures: GatewayFailure[] = [
  { kind: 'unsupported_media_type', message: 'text/plain' },
  { kind: 'bad_request', message: 'not OTLP' },
  { kind: 'not_found', message: 'no route' },
  { kind: 'too_large', message: 'big' },
  { kind: 'unauthenticated', message: 'no token' },
  { kind: 'forbidden', message: 'revoked' },
  { kind: 'rate_limited', retryAfterSeconds: 12 },
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
      const transient = ['rate_limited', 'store_unavailable', 'shutting_down', 'upstream_unreachable', 'upstream_timeout', 'upstream_error'].includes(
        failure.kind,
      );
      expect(RETRYABLE.includes(answer.httpStatus)).toBe(transient);
      if (transient) expect(answer.retryAfterSeconds).toBeGreaterThanOrEqual(1);
      expect(answer.httpStatus).toBeGreaterThanOrEqual(400);
    },
  );

  it("passes on the collector's own Retry-After, and its status where a client reads it the same way", () => {
    expect(otlpErrorAnswer({ kind: 'upstream_error', status: 503, retryAfterSeconds: 7 })).toMatchObject({ httpStatus: 503, retryAfterSeconds: 7 });
    expect(otlpErrorAnswer({ kind: 'upstream_error', status: 500 })).toMatchObject({ httpStatus: 502, retryAfterSeconds: 1 });
    expect(otlpErrorAnswer({ kind: 'upstream_refused', status: 429, retryAfterSeconds: 30 })).toMatchObject({ httpStatus: 429, retryAfterSeconds: 30 });
    const collectorStatus = Buffer.from([0x08, 0x03]);
    expect(otlpErrorAnswer({ kind: 'upstream_refused', status: 400, statusBody: collectorStatus }).status).toBe(collectorStatus);
  });
});
