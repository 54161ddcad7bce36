import { AuthRefusal, refusalAnswer } from './auth-outcome';

describe('refusalAnswer (SPEC §5)', () => {
  const refusals: [AuthRefusal, number][] = [
    [{ kind: 'unauthenticated', reason: 'unknown job token' }, 401],
    [{ kind: 'forbidden', reason: 'grant revoked' }, 403],
    [{ kind: 'rate_limited', reason: 'window spent', retryAfterSeconds: 3 }, 429],
    [{ kind: 'unavailable', reason: 'grant store unavailable', retryAfterSeconds: 1 }, 503],
  ];

  it.each(refusals.map(([refusal, status]) => [refusal.kind, refusal, status] as const))('answers %s with its status', (_kind, refusal, status) => {
    const answer = refusalAnswer(refusal);
    expect(answer.httpStatus).toBe(status);
    // Only what is worth retrying says when: a bad token retried sooner is still a bad token.
    expect(answer.retryAfterSeconds).toBe('retryAfterSeconds' in refusal ? refusal.retryAfterSeconds : undefined);
  });

  it("says why in the decision's own words, except for the rate limit, whose answer names no window", () => {
    expect(refusalAnswer({ kind: 'forbidden', reason: 'telemetry is not enabled for this job' }).message).toBe('telemetry is not enabled for this job');
    expect(refusalAnswer({ kind: 'rate_limited', reason: 'window spent', retryAfterSeconds: 3 }).message).toBe('runner rate limit exceeded');
  });
});
