import { DEFAULT_OUTCOME_POLICY, parseOutcomePolicy } from './outcome-policy';

describe('the outcome-sampling policy from the toggle variant payload (SPEC §11)', () => {
  it('keeps failed pipelines, and those without an outcome, when there is no payload or it is silent', () => {
    expect(parseOutcomePolicy(undefined)).toEqual({ keepStatuses: ['failed'], whenNoOutcome: 'keep' });
    expect(parseOutcomePolicy('')).toBe(DEFAULT_OUTCOME_POLICY);
    expect(parseOutcomePolicy('{}')).toEqual(DEFAULT_OUTCOME_POLICY);
  });

  it('reads every member an operator writes', () => {
    const payload = '{"keep": {"statuses": ["failed", "canceled"], "slower_than_seconds": 1800, "queued_longer_than_seconds": 600}, "when_no_outcome": "drop"}';
    expect(parseOutcomePolicy(payload)).toEqual({
      keepStatuses: ['failed', 'canceled'],
      slowerThanSeconds: 1800,
      queuedLongerThanSeconds: 600,
      whenNoOutcome: 'drop',
    });
  });

  it('says what is wrong with a payload rather than keeping nothing', () => {
    expect(() => parseOutcomePolicy('{keep:')).toThrow('not JSON');
    expect(() => parseOutcomePolicy('[]')).toThrow('not a JSON object');
    expect(() => parseOutcomePolicy('{"keep": {"statuses": ["broken"]}}')).toThrow('keep.statuses must list statuses among');
    expect(() => parseOutcomePolicy('{"keep": {"slower_than_seconds": -1}}')).toThrow('keep.slower_than_seconds must be a number of seconds');
    expect(() => parseOutcomePolicy('{"when_no_outcome": "maybe"}')).toThrow('when_no_outcome must be keep or drop');
  });
});
