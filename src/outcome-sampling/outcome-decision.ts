import type { OutcomePolicy } from '../flags/outcome-policy';
import type { OutcomeFacts, TraceDecision } from '../parking/parking';

/** How the root pipeline ended, as its terminal Pipeline Hook says. */
export interface RootOutcome {
  readonly status: string;
  /** Epoch ms. */
  readonly createdAt: number;
  readonly finishedAt: number;
}

/**
 * SPEC §11's decision on a provisional pipeline, from its root's terminal hook and what was gathered before: kept
 * when the pipeline, one of its pipelines or one of its jobs ended in a status the policy names (`failed`), when it
 * lasted longer than the policy's threshold (`slow`), or when a job waited in the queue longer than its threshold
 * (`queued`), in that order; otherwise dropped.
 */
export function decideOnOutcome(policy: OutcomePolicy, root: RootOutcome, facts: OutcomeFacts): TraceDecision {
  const statuses = new Set([root.status, ...facts.statuses]);
  if (policy.keepStatuses.some((status) => statuses.has(status))) return { keep: true, reason: 'failed' };
  if (policy.slowerThanSeconds !== undefined && root.finishedAt - root.createdAt > policy.slowerThanSeconds * 1000) return { keep: true, reason: 'slow' };
  if (policy.queuedLongerThanSeconds !== undefined && facts.longestQueueMs > policy.queuedLongerThanSeconds * 1000) return { keep: true, reason: 'queued' };
  return { keep: false, reason: 'outcome' };
}

/** When the time limit ends without a terminal hook: the policy's `when_no_outcome`. */
export function decideWithoutOutcome(whenNoOutcome: 'keep' | 'drop'): TraceDecision {
  return whenNoOutcome === 'keep' ? { keep: true, reason: 'no_outcome' } : { keep: false, reason: 'no_outcome' };
}
