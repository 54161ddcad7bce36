/**
 * The CI identity attributes (SPEC §6): the one list of their keys, the job fact each carries and its value type
 * where it goes. The gateway overwrites them with the grant's values; the control plane's own spans (SPEC §10)
 * are written from the same list, so an attribute has one type on every span, whoever emitted it.
 */
export type CiIdentityValueType = 'int' | 'string';

/** The job facts the identity attributes carry. */
export interface CiJobIdentity {
  readonly jobId: number;
  readonly projectId: number;
  readonly pipelineId: number;
  readonly runnerId: number;
}

export interface CiIdentityAttribute {
  readonly key: string;
  readonly carries: keyof CiJobIdentity;
  /** Its type on a resource: the gateway writes every identity attribute on every resource it forwards. */
  readonly resource: CiIdentityValueType;
  /**
   * Its type on a span, as GitLab Runner writes it on its `job_execution` span: the gateway overwrites it wherever
   * a span, data point or log record carries it. Absent: the runner writes it on no span, and the gateway stamps
   * it on resources only.
   */
  readonly span?: CiIdentityValueType;
}

export const CI_IDENTITY_ATTRIBUTES: readonly CiIdentityAttribute[] = [
  { key: 'ci.job.id', carries: 'jobId', resource: 'int', span: 'int' },
  { key: 'ci.project.id', carries: 'projectId', resource: 'int', span: 'int' },
  // GitLab Runner writes this one id as a string on its span.
  { key: 'ci.pipeline.id', carries: 'pipelineId', resource: 'int', span: 'string' },
  { key: 'ci.runner.id', carries: 'runnerId', resource: 'int', span: 'int' },
  // The CI/CD semantic conventions type their ids as strings.
  { key: 'cicd.pipeline.run.id', carries: 'pipelineId', resource: 'string' },
  { key: 'cicd.pipeline.task.run.id', carries: 'jobId', resource: 'string' },
  { key: 'cicd.worker.id', carries: 'runnerId', resource: 'string' },
];

/**
 * The identity attributes of what is known of a job, as values of a resource or of a span, in table order. On a
 * span, a key the runner writes on no span takes its resource type (the control plane's spans carry every key,
 * as the CI/CD semantic conventions put them on spans).
 */
export function ciIdentityValues(identity: Partial<CiJobIdentity>, place: 'resource' | 'span'): Record<string, number | string> {
  const values: Record<string, number | string> = {};
  for (const attribute of CI_IDENTITY_ATTRIBUTES) {
    const id = identity[attribute.carries];
    if (id === undefined) continue;
    const type = place === 'span' ? (attribute.span ?? attribute.resource) : attribute.resource;
    values[attribute.key] = type === 'int' ? id : String(id);
  }
  return values;
}

/**
 * Why a span reached the collector (SPEC §11): `head` for a pipeline the head decision sampled, the outcome that
 * kept a provisionally traced pipeline otherwise. Like the identity attributes it is gateway-owned on resources
 * (an exporter's own is dropped) and the control plane's spans carry it too; it is not in the table above, which
 * holds the job facts a grant carries, since the reason is decided per pipeline, after the fact.
 */
export const SAMPLING_REASON_ATTRIBUTE = 'ci.sampling.reason';

export const SAMPLING_REASONS = ['head', 'failed', 'slow', 'queued', 'no_outcome'] as const;
export type SamplingReason = (typeof SAMPLING_REASONS)[number];

/**
 * GitLab's statuses after which a job does not change again (a retry is a new job) and a pipeline has finished, for
 * now: a retried or played job sends its pipeline back to `running`, then to one of these again with a new
 * `finished_at` (SPEC §10, the final story). As the Job and Pipeline Hooks say them, and the spans' `ci.job.status`
 * and `ci.pipeline.status` after them.
 */
export const FINISHED_STATUSES: ReadonlySet<string> = new Set(['success', 'failed', 'canceled', 'skipped']);
