/**
 * What outcome-based sampling keeps (SPEC §11), as the `ci_job_telemetry_outcome_sampling` toggle's variant
 * payload says it, for example
 * `{"keep": {"statuses": ["failed"], "slower_than_seconds": 1800, "queued_longer_than_seconds": 600}, "when_no_outcome": "keep"}`.
 * Without a payload, or where it is silent: failed pipelines kept, no duration or queue threshold, and a
 * pipeline whose outcome never comes kept (it is more likely broken than fine).
 */
export interface OutcomePolicy {
  /** Statuses (of the pipeline, one of its pipelines, or one of its jobs) that keep it. */
  readonly keepStatuses: readonly string[];
  /** Kept when the root pipeline lasted longer than this. */
  readonly slowerThanSeconds?: number;
  /** Kept when one of its jobs waited in the queue longer than this. */
  readonly queuedLongerThanSeconds?: number;
  /** What the time limit decides when no terminal Pipeline Hook came. */
  readonly whenNoOutcome: 'keep' | 'drop';
}

export const DEFAULT_OUTCOME_POLICY: OutcomePolicy = { keepStatuses: ['failed'], whenNoOutcome: 'keep' };

/** Statuses GitLab gives a pipeline or job that has finished: the only ones a policy can sensibly name. */
const FINISHED_STATUSES = new Set(['success', 'failed', 'canceled', 'skipped', 'manual']);

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function seconds(value: unknown, where: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new Error(`${where} must be a number of seconds ≥ 0`);
  return value;
}

/**
 * The policy a variant payload states. Throws with what is wrong, so the caller can say it once and keep the
 * defaults: a typo in Unleash must not silently keep nothing.
 */
export function parseOutcomePolicy(payload: string | undefined): OutcomePolicy {
  if (payload === undefined || payload.trim() === '') return DEFAULT_OUTCOME_POLICY;
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload);
  } catch {
    throw new Error('the variant payload is not JSON');
  }
  if (!isObject(parsed)) throw new Error('the variant payload is not a JSON object');
  const keep = parsed.keep ?? {};
  if (!isObject(keep)) throw new Error('keep must be an object');
  const statuses = keep.statuses ?? DEFAULT_OUTCOME_POLICY.keepStatuses;
  if (!Array.isArray(statuses) || statuses.some((status) => typeof status !== 'string' || !FINISHED_STATUSES.has(status))) {
    throw new Error(`keep.statuses must list statuses among ${[...FINISHED_STATUSES].join(', ')}`);
  }
  const whenNoOutcome = parsed.when_no_outcome ?? DEFAULT_OUTCOME_POLICY.whenNoOutcome;
  if (whenNoOutcome !== 'keep' && whenNoOutcome !== 'drop') throw new Error('when_no_outcome must be keep or drop');
  const slowerThanSeconds = seconds(keep.slower_than_seconds, 'keep.slower_than_seconds');
  const queuedLongerThanSeconds = seconds(keep.queued_longer_than_seconds, 'keep.queued_longer_than_seconds');
  return {
    keepStatuses: statuses as string[],
    ...(slowerThanSeconds === undefined ? {} : { slowerThanSeconds }),
    ...(queuedLongerThanSeconds === undefined ? {} : { queuedLongerThanSeconds }),
    whenNoOutcome,
  };
}
