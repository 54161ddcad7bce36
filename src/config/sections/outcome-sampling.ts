import { Integer, Variable } from '../variable';

/** Outcome-based sampling (SPEC §11): bounds of what provisional pipelines park. */
export class OutcomeSamplingConfig {
  /** Time limit: how long after a provisional pipeline's first parked span its decision is taken without an outcome. */
  @Variable('OUTCOME_SAMPLING_MAX_WAIT_SECONDS') @Integer({ min: 1 }) readonly maxWaitSeconds: number = 6 * 3600;

  /** Spans one provisional pipeline may park; beyond, its exports fall back to the head decision (dropped, counted). */
  @Variable('OUTCOME_SAMPLING_MAX_PIPELINE_SPANS') @Integer({ min: 1 }) readonly maxPipelineSpans: number = 50_000;

  /** Bytes (as forwarded) one provisional pipeline may park. */
  @Variable('OUTCOME_SAMPLING_MAX_PIPELINE_BYTES') @Integer({ min: 1024 }) readonly maxPipelineBytes: number = 64 * 1024 * 1024;

  /** Bytes all provisional pipelines may park together: size the store for it (docs/sampling.md). */
  @Variable('OUTCOME_SAMPLING_MAX_TOTAL_BYTES') @Integer({ min: 1024 }) readonly maxTotalBytes: number = 512 * 1024 * 1024;

  /** How long a decision is remembered, so a late export (a runner's last batch, a retried job) follows it. */
  @Variable('OUTCOME_SAMPLING_DECISION_MEMORY_SECONDS') @Integer({ min: 60 }) readonly decisionMemorySeconds: number = 3 * 24 * 3600;

  /**
   * How long a drop waits after the root pipeline ended, for a child pipeline that ends after it (a trigger without
   * `strategy: depend`); a child GitLab said was running holds the drop until it ends, within the time limit.
   */
  @Variable('OUTCOME_SAMPLING_LATE_CHILD_SECONDS') @Integer({ min: 0 }) readonly lateChildSeconds: number = 300;
}
