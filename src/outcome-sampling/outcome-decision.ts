import type { OutcomePolicy } from './outcome-policy';
import type { OutcomeFacts, RootOutcome, TraceDecision } from './parking/parking';

/**
 * SPEC §11's decision on a provisional pipeline, from its root's terminal hook and what was gathered before: kept
 * when the pipeline, one of its pipelines or one of its jobs ended in a status the policy names (`failed`), when it
 * lasted longer than the policy's threshold (`slow`), or when a job waited in the queue longer than its threshold
 * (`queued`), in that order; otherwise dropped.
 */
export function decideOnOutcome(policy: OutcomePolicy, root: RootOutcome, facts: Pick<OutcomeFacts, 'statuses' | 'longestQueueMs'>): TraceDecision {
  const statuses = new Set([root.status, ...facts.statuses]);
  if (policy.keepStatuses.some((status) => statuses.has(status))) return { keep: true, reason: 'failed' };
  if (policy.slowerThanSeconds !== undefined && root.finishedAt - root.createdAt > policy.slowerThanSeconds * 1000) return { keep: true, reason: 'slow' };
  if (queuedTooLong(policy, facts.longestQueueMs)) return { keep: true, reason: 'queued' };
  return { keep: false, reason: 'outcome' };
}

/** Whether a job's queue wait (ms) is one the policy keeps its pipeline for. */
export function queuedTooLong(policy: OutcomePolicy, queueMs: number): boolean {
  return policy.queuedLongerThanSeconds !== undefined && queueMs > policy.queuedLongerThanSeconds * 1000;
}

/** When the time limit ends without a terminal hook: the policy's `when_no_outcome`. */
export function decideWithoutOutcome(whenNoOutcome: 'keep' | 'drop'): TraceDecision {
  return whenNoOutcome === 'keep' ? { keep: true, reason: 'no_outcome' } : { keep: false, reason: 'no_outcome' };
}

/**
 * Whether a `running` hook of the root pipeline, after its end, means GitLab runs it again (a job retried: a new
 * job id; a manual job played: one that had not finished), rather than an old hook delivered late or replayed, whose
 * running jobs all finished before the end (SPEC §10 the final story: never an older story over a newer one).
 */
export function runsAgain(activeJobIds: readonly number[], finishedRootJobs: readonly number[]): boolean {
  const finished = new Set(finishedRootJobs);
  return activeJobIds.some((jobId) => !finished.has(jobId));
}
