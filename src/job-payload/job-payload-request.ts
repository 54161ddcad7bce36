import { isISO8601 } from 'class-validator';

export const RUNNER_TYPES = ['instance_type', 'group_type', 'project_type'] as const;
export type RunnerType = (typeof RUNNER_TYPES)[number];

/** GitLab ids are positive bigint columns; JSON numbers keep them exact up to 2^53. */
const MAX_ID = Number.MAX_SAFE_INTEGER;
/** Seconds; GitLab caps job timeouts at one month. */
const MAX_JOB_TIMEOUT = 31 * 24 * 3600;

export interface Runner {
  readonly id: number;
  readonly runner_type: RunnerType;
  readonly token?: string;
  /** The runner's `info.features` from its job request. */
  readonly features?: Record<string, unknown>;
}

export interface Job {
  readonly id: number;
  readonly project_id: number;
  readonly namespace_id?: number;
  readonly root_namespace_id?: number;
  readonly pipeline_id: number;
  readonly root_pipeline_id: number;
  readonly timeout: number;
  readonly queued_at?: string;
  readonly token?: string;
}

/** A job payload in GitLab's job-request response shape. */
export interface JobPayload extends Record<string, unknown> {
  variables?: unknown[];
  features?: Record<string, unknown>;
}

export interface JobPayloadRequest {
  readonly runner: Runner;
  readonly job: Job;
  readonly payload: JobPayload;
}

export interface FieldProblem {
  readonly field: string;
  readonly problems: string[];
}

export type ParsedJobPayloadRequest =
  | { readonly request: JobPayloadRequest; readonly problems?: undefined }
  | { readonly request?: undefined; readonly problems: FieldProblem[] };

/** What is wrong with a value, worded to follow its field name; undefined when nothing is. */
type Check = (value: unknown) => string | undefined;

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const integerIn =
  (min: number, max: number): Check =>
  (value) => {
    if (typeof value !== 'number' || !Number.isInteger(value)) return 'must be an integer number';
    if (value < min) return `must not be less than ${min}`;
    if (value > max) return `must not be greater than ${max}`;
    return undefined;
  };
const positiveId = integerIn(1, MAX_ID);
const nonEmptyString: Check = (value) =>
  typeof value !== 'string' ? 'must be a string' : value.length === 0 ? 'must be longer than or equal to 1 characters' : undefined;
const oneOf =
  (allowed: readonly string[]): Check =>
  (value) =>
    allowed.includes(value as string) ? undefined : `must be one of the following values: ${allowed.join(', ')}`;
const object: Check = (value) => (isPlainObject(value) ? undefined : 'must be an object');
const array: Check = (value) => (Array.isArray(value) ? undefined : 'must be an array');
const iso8601: Check = (value) =>
  typeof value === 'string' && isISO8601(value, { strict: true }) ? undefined : 'must be a valid ISO 8601 date string';
/** Absent and null both mean "not sent", as they did with class-validator's @IsOptional. */
const optional =
  (check: Check): Check =>
  (value) =>
    value === undefined || value === null ? undefined : check(value);

const RUNNER_FIELDS: Readonly<Record<keyof Runner, Check>> = {
  id: positiveId,
  runner_type: oneOf(RUNNER_TYPES),
  token: optional(nonEmptyString),
  features: optional(object),
};

const JOB_FIELDS: Readonly<Record<keyof Job, Check>> = {
  id: positiveId,
  project_id: positiveId,
  namespace_id: optional(positiveId),
  root_namespace_id: optional(positiveId),
  pipeline_id: positiveId,
  root_pipeline_id: positiveId,
  timeout: integerIn(1, MAX_JOB_TIMEOUT),
  queued_at: optional(iso8601),
  token: optional(nonEmptyString),
};

/** Only the parts of the job payload the decorator writes to are checked; the rest passes through untouched. */
const PAYLOAD_FIELDS: Readonly<Record<'variables' | 'features', Check>> = {
  variables: optional(array),
  features: optional(object),
};

function checkSection(section: string, value: unknown, fields: Readonly<Record<string, Check>>, problems: FieldProblem[]): void {
  if (!isPlainObject(value)) {
    problems.push({ field: section, problems: [`${section} must be an object`] });
    return;
  }
  for (const name of Object.keys(fields)) {
    const problem = fields[name](value[name]);
    if (problem !== undefined) {
      const field = `${section}.${name}`;
      problems.push({ field, problems: [`${field} ${problem}`] });
    }
  }
}

const orUndefined = <T>(value: T | null | undefined): T | undefined => value ?? undefined;

/**
 * Checks a decorator request (SPEC §4) and names every bad field by its dotted path. Hand-written
 * rather than a Fastify route schema: the app's shared ajv instance stops at the first error and
 * coerces types (`"17"` would become 17), and this endpoint promises to name each bad field and
 * to take ids only as JSON numbers. The job payload itself (up to BODY_LIMIT_BYTES of scripts and
 * variables) is neither copied nor walked.
 */
export function parseJobPayloadRequest(body: unknown): ParsedJobPayloadRequest {
  const sent = isPlainObject(body) ? body : {};
  const problems: FieldProblem[] = [];
  checkSection('runner', sent.runner, RUNNER_FIELDS, problems);
  checkSection('job', sent.job, JOB_FIELDS, problems);
  checkSection('payload', sent.payload, PAYLOAD_FIELDS, problems);
  if (problems.length > 0) return { problems };

  const runner = sent.runner as Record<keyof Runner, never>;
  const job = sent.job as Record<keyof Job, never>;
  return {
    request: {
      runner: {
        id: runner.id,
        runner_type: runner.runner_type,
        token: orUndefined(runner.token),
        features: orUndefined(runner.features),
      },
      job: {
        id: job.id,
        project_id: job.project_id,
        namespace_id: orUndefined(job.namespace_id),
        root_namespace_id: orUndefined(job.root_namespace_id),
        pipeline_id: job.pipeline_id,
        root_pipeline_id: job.root_pipeline_id,
        timeout: job.timeout,
        queued_at: orUndefined(job.queued_at),
        token: orUndefined(job.token),
      },
      payload: sent.payload as JobPayload,
    },
  };
}
