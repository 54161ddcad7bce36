import { DEFAULT_OUTCOME_POLICY, OutcomePolicy } from './outcome-policy';
import { decideOnOutcome, decideWithoutOutcome } from './outcome-decision';

const policy: OutcomePolicy = { keepStatuses: ['failed'], slowerThanSeconds: 1800, queuedLongerThanSeconds: 600, whenNoOutcome: 'keep' };
const root = (status: string, seconds: number) => ({ status, createdAt: 1_700_000_000_000, finishedAt: 1_700_000_000_000 + seconds * 1000 });
const quiet = { statuses: [], longestQueueMs: 0 };

describe('the decision on a provisional pipeline (SPEC §11)', () => {
  it('keeps a failed pipeline, or one whose child pipeline or job failed, as failed', () => {
    expect(decideOnOutcome(policy, root('failed', 60), quiet)).toEqual({ keep: true, reason: 'failed' });
    // A job allowed to fail, or a child pipeline, failed while the root succeeded.
    expect(decideOnOutcome(policy, root('success', 60), { statuses: ['success', 'failed'], longestQueueMs: 0 })).toEqual({ keep: true, reason: 'failed' });
  });

  it('keeps a pipeline over the duration threshold as slow, and one with a job queued too long as queued', () => {
    expect(decideOnOutcome(policy, root('success', 1801), quiet)).toEqual({ keep: true, reason: 'slow' });
    expect(decideOnOutcome(policy, root('success', 1800), quiet)).toEqual({ keep: false, reason: 'outcome' });
    expect(decideOnOutcome(policy, root('success', 60), { statuses: [], longestQueueMs: 600_001 })).toEqual({ keep: true, reason: 'queued' });
  });

  it('drops a fast successful pipeline, and keeps nothing on thresholds the policy does not set', () => {
    expect(decideOnOutcome(policy, root('success', 60), quiet)).toEqual({ keep: false, reason: 'outcome' });
    expect(decideOnOutcome(DEFAULT_OUTCOME_POLICY, root('success', 86_400), { statuses: ['success'], longestQueueMs: 86_400_000 })).toEqual({
      keep: false,
      reason: 'outcome',
    });
    expect(decideOnOutcome(DEFAULT_OUTCOME_POLICY, root('canceled', 60), quiet)).toEqual({ keep: false, reason: 'outcome' });
  });

  it('lets when_no_outcome decide a pipeline whose outcome never came', () => {
    expect(decideWithoutOutcome('keep')).toEqual({ keep: true, reason: 'no_outcome' });
    expect(decideWithoutOutcome('drop')).toEqual({ keep: false, reason: 'no_outcome' });
  });
});
