import Ajv2020, { ErrorObject, ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

export const RUNNER_TYPES = ['instance_type', 'group_type', 'project_type'] as const;
export type RunnerType = (typeof RUNNER_TYPES)[number];

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
  /** Absent only from a caller that asked for the changes (`Prefer: return=minimal`): it holds the payload itself. */
  readonly payload?: JobPayload;
}

export interface FieldProblem {
  readonly field: string;
  readonly problems: string[];
}

export type ParsedJobPayloadRequest =
  { readonly request: JobPayloadRequest; readonly problems?: undefined } | { readonly request?: undefined; readonly problems: FieldProblem[] };

/**
 * The OpenAPI document is the one statement of the request schema: what it promises, this checks. It sits
 * two levels above this file in the repository and in the image (dist/job-payload/); a build elsewhere
 * (the benches compile into build/bench) finds it from the working directory.
 */
function openApiDocumentPath(): string {
  const beside = join(__dirname, '..', '..', 'openapi', 'openapi.yaml');
  return existsSync(beside) ? beside : join(process.cwd(), 'openapi', 'openapi.yaml');
}

/**
 * All errors (every bad field in one 400) and no coercion (`"17"` is not an id): not the app's shared
 * Fastify ajv instance, which stops at the first error and coerces types. OpenAPI 3.1 schemas are JSON
 * Schema 2020-12; the whole document is added so its $refs resolve.
 */
function compileRequestSchema(): ValidateFunction {
  const ajv = new Ajv2020({ strict: false, allErrors: true, coerceTypes: false, useDefaults: false });
  addFormats(ajv);
  ajv.addSchema(parse(readFileSync(openApiDocumentPath(), 'utf8')) as object, 'openapi.json');
  return ajv.compile({ $ref: 'openapi.json#/components/schemas/JobPayloadRequest' });
}

let validateRequest: ValidateFunction | undefined;

/** Compiles the request schema once; called at start, so a missing or broken document stops the start. */
export function loadJobPayloadRequestSchema(): void {
  validateRequest ??= compileRequestSchema();
}

/** `/runner/id` → `runner.id`; a missing member is named by its own path, not its parent's. */
function fieldOf(error: ErrorObject): string {
  const path = error.instancePath
    .split('/')
    .slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (error.keyword === 'required') path.push(String((error.params as { missingProperty: string }).missingProperty));
  return path.join('.');
}

function problemsOf(errors: readonly ErrorObject[]): FieldProblem[] {
  const byField = new Map<string, string[]>();
  for (const error of errors) {
    const field = fieldOf(error);
    const allowed = error.keyword === 'enum' ? `: ${(error.params as { allowedValues: unknown[] }).allowedValues.join(', ')}` : '';
    const problem = `${field} ${error.keyword === 'required' ? 'is required' : (error.message ?? 'is invalid') + allowed}`;
    const problems = byField.get(field) ?? [];
    if (!problems.includes(problem)) problems.push(problem);
    byField.set(field, problems);
  }
  return [...byField].map(([field, problems]) => ({ field, problems }));
}

const isPlainObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

const orUndefined = <T>(value: T | null | undefined): T | undefined => value ?? undefined;

const PAYLOAD_REQUIRED: FieldProblem = { field: 'payload', problems: ['payload is required'] };

/**
 * Checks a decorator request (SPEC §4) against openapi/openapi.yaml's JobPayloadRequest and names every
 * bad field by its dotted path. The job payload itself is neither copied nor changed: members the schema
 * does not describe pass through as they came. `payload` may be left out only when the answer is to be the
 * changes (the caller holds the payload): `payloadRequired` false.
 */
export function parseJobPayloadRequest(body: unknown, payloadRequired = true): ParsedJobPayloadRequest {
  validateRequest ??= compileRequestSchema();
  // A body that is not an object is answered by naming the parts it should have had.
  const sent = isPlainObject(body) ? body : {};
  const valid = validateRequest(sent);
  const missingPayload = payloadRequired && sent.payload === undefined ? [PAYLOAD_REQUIRED] : [];
  if (!valid) return { problems: [...problemsOf(validateRequest.errors ?? []), ...missingPayload] };
  if (missingPayload.length > 0) return { problems: missingPayload };

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
      payload: sent.payload as JobPayload | undefined,
    },
  };
}
