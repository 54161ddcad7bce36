import { AuthOutcome } from './auth-outcome';
import { DecisionCache, DecisionClock, NEGATIVE_DECISION_TTL_MS } from './decision-cache';
import { RunnerCredential } from './runner-credential';

/** A clock the test moves by hand: expiry is checked without waiting for it. */
class HandClock implements DecisionClock {
  private ms = 1_000_000;
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** The decision maker behind the cache: answers what it is told and counts how often it was asked. */
class ScriptedDecisions {
  asked = 0;
  constructor(public answer: AuthOutcome) {}
  readonly lookup = async (): Promise<AuthOutcome> => {
    this.asked++;
    return this.answer;
  };
}

const tokens: RunnerCredential = { kind: 'tokens', jobToken: 'glcbt-job', runnerToken: 'glrt-runner' };
const identity = {
  jobId: 1001,
  projectId: 7,
  pipelineId: 500,
  runnerId: 17,
  traceId: 'a'.repeat(32),
  expiresAt: Date.now() + 3_600_000,
  controlPlaneSpanIds: [],
};
const allowed = (maxAgeSeconds: number): AuthOutcome => ({ kind: 'allowed', identity, maxAgeSeconds });

function cacheOf(decisions: ScriptedDecisions, clock: HandClock, maxEntries = 100) {
  const counts = { hit: 0, miss: 0 };
  const cache = new DecisionCache(decisions.lookup, maxEntries, { hit: () => counts.hit++, miss: () => counts.miss++ }, clock);
  return { cache, counts };
}

describe('DecisionCache (SPEC §6: positive decisions for their max-age, refusals at most 5 s, outages never)', () => {
  it('reuses an allowed decision until its max-age, saying how old it is, then asks again', async () => {
    const clock = new HandClock();
    const decisions = new ScriptedDecisions(allowed(30));
    const { cache, counts } = cacheOf(decisions, clock);

    expect(await cache.decide(tokens)).toEqual({ decision: allowed(30), ageMs: 0 });
    clock.advance(29_000);
    expect(await cache.decide(tokens)).toEqual({ decision: allowed(30), ageMs: 29_000 });
    expect(decisions.asked).toBe(1);

    clock.advance(1_001);
    await cache.decide(tokens);
    expect(decisions.asked).toBe(2);
    expect(counts).toEqual({ hit: 1, miss: 2 });
  });

  it('remembers a refusal for 5 s, so a fixed token is accepted soon after', async () => {
    const clock = new HandClock();
    const decisions = new ScriptedDecisions({ kind: 'unauthenticated', reason: 'unknown job token' });
    const { cache } = cacheOf(decisions, clock);

    await cache.decide(tokens);
    decisions.answer = allowed(30);
    clock.advance(NEGATIVE_DECISION_TTL_MS - 1);
    expect((await cache.decide(tokens)).decision.kind).toBe('unauthenticated');
    clock.advance(2);
    expect((await cache.decide(tokens)).decision.kind).toBe('allowed');
  });

  it.each<AuthOutcome>([
    { kind: 'unavailable', reason: 'grant store unavailable', retryAfterSeconds: 1 },
    { kind: 'rate_limited', reason: 'runner 17 over its rate limit', retryAfterSeconds: 3 },
    allowed(0),
  ])('never reuses a $kind decision that may not be kept', async (outcome) => {
    const decisions = new ScriptedDecisions(outcome);
    const { cache } = cacheOf(decisions, new HandClock());
    await cache.decide(tokens);
    await cache.decide(tokens);
    expect(decisions.asked).toBe(2);
  });

  it('asks once for concurrent lookups of one credential, even with caching off', async () => {
    const decisions = new ScriptedDecisions(allowed(30));
    const { cache } = cacheOf(decisions, new HandClock(), 0);
    const answers = await Promise.all([cache.decide(tokens), cache.decide(tokens), cache.decide(tokens)]);
    expect(answers.map(({ decision }) => decision.kind)).toEqual(['allowed', 'allowed', 'allowed']);
    expect(decisions.asked).toBe(1);
    await cache.decide(tokens);
    expect(decisions.asked).toBe(2);
  });

  it('keeps decisions apart per credential: another runner token is another decision', async () => {
    const decisions = new ScriptedDecisions(allowed(30));
    const { cache } = cacheOf(decisions, new HandClock());
    await cache.decide(tokens);
    await cache.decide({ ...tokens, runnerToken: 'glrt-other' } as RunnerCredential);
    await cache.decide({ kind: 'capability', jobId: 1001, capability: 'c'.repeat(32) });
    expect(decisions.asked).toBe(3);
  });

  it('never remembers a request that carried no credential', async () => {
    const decisions = new ScriptedDecisions({ kind: 'unauthenticated', reason: 'missing job token' });
    const { cache, counts } = cacheOf(decisions, new HandClock());
    await cache.decide({ kind: 'missing', reason: 'missing job token' });
    await cache.decide({ kind: 'missing', reason: 'missing job token' });
    expect(decisions.asked).toBe(2);
    expect(counts).toEqual({ hit: 0, miss: 0 });
  });
});
