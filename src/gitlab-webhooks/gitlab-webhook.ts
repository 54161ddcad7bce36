import { FINISHED_STATUSES } from '../otlp/ci-identity';
import type { FinishedJob, JobEvent, PipelineEvent } from '../pipeline-spans/pipeline-events';
import type { JobEnd, PipelineEnd } from '../pipeline-spans/pipeline-span-model';

/**
 * GitLab's `Pipeline Hook` and `Job Hook` payloads as SPEC §10 needs them, read exactly as GitLab sends
 * them (its webhook events documentation and published examples): timestamps as `2016-08-12 15:23:28 UTC`
 * or ISO 8601, `null` start and finish times, fractional durations, `runner: null`, `source_pipeline` on
 * child pipelines, and `object_attributes.root_pipeline_id` from newer GitLab versions.
 */

/** Statuses of a job that GitLab will still run: a pipeline hook naming one of them has the pipeline running. */
const ACTIVE = new Set(['created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'scheduled']);
/** A job whose `resource_group` another job holds: GitLab makes it pending when the resource is free. */
const WAITING_FOR_RESOURCE = 'waiting_for_resource';

export class WebhookPayloadError extends Error {}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function id(value: unknown, where: string): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value > 0) return value;
  if (typeof value === 'string' && /^\d{1,15}$/.test(value) && Number(value) > 0) return Number(value);
  throw new WebhookPayloadError(`${where} must be a positive integer id`);
}

const optionalId = (value: unknown, where: string) => (value === undefined || value === null ? undefined : id(value, where));
const text = (value: unknown) => (typeof value === 'string' && value.length > 0 ? value : undefined);

const GITLAB_TIME = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s*(UTC|Z|[+-]\d{2}:?\d{2})?$/i;

/**
 * A GitLab timestamp as epoch milliseconds: `2016-08-12 15:23:28 UTC`, `2021-04-28 21:50:00 +0200`,
 * `2021-02-23T02:41:37.886Z`; a zone-less one is UTC, as GitLab's are. `null` or absent: undefined.
 */
export function parseGitlabTime(value: unknown, where: string): number | undefined {
  if (value === null || value === undefined) return undefined;
  const match = typeof value === 'string' ? GITLAB_TIME.exec(value.trim()) : null;
  if (match === null) throw new WebhookPayloadError(`${where} is not a GitLab timestamp (got ${JSON.stringify(value)})`);
  const [, date, time, zone = 'Z'] = match;
  const offset = /^(utc|z)$/i.test(zone) ? 'Z' : zone.length === 5 ? `${zone.slice(0, 3)}:${zone.slice(3)}` : zone;
  const epoch = Date.parse(`${date}T${time}${offset}`);
  if (Number.isNaN(epoch)) throw new WebhookPayloadError(`${where} is not a valid time (got ${JSON.stringify(value)})`);
  return epoch;
}

/** Seconds as GitLab sends them (`17.0`, `1095.588715`, `null`). */
function seconds(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/**
 * When a job that GitLab reports finished ended: its finish time, else its start plus its duration,
 * else (canceled before it ran) `fallback`.
 */
function endOf(finishedAt: number | undefined, startedAt: number | undefined, duration: number | undefined, fallback: number): number {
  if (finishedAt !== undefined) return finishedAt;
  if (startedAt !== undefined && duration !== undefined) return startedAt + duration * 1000;
  return fallback;
}

/** GitLab's runner tags a job span keeps at most, and their longest: a runner's own list is short, a payload's may not be. */
export const MAX_RUNNER_TAGS = 50;
export const MAX_RUNNER_TAG_LENGTH = 100;

/**
 * The runner's tags (`runner.tags`, GitLab 13.8 and later: the names CI_RUNNER_TAGS lists), sorted and once each, so
 * that one set of tags is one value whatever order GitLab sent it in. A tag that is no string, empty, or longer than
 * MAX_RUNNER_TAG_LENGTH is left out, and past MAX_RUNNER_TAGS the rest: a hook is never refused for its tags.
 * Undefined when GitLab did not say (an older GitLab); [] for an untagged runner.
 */
function runnerTagsOf(tags: unknown): string[] | undefined {
  if (!Array.isArray(tags)) return undefined;
  const kept = new Set<string>();
  for (const tag of tags) {
    if (typeof tag === 'string' && tag.trim() !== '' && tag.length <= MAX_RUNNER_TAG_LENGTH) kept.add(tag.trim());
  }
  return [...kept].sort().slice(0, MAX_RUNNER_TAGS);
}

function runnerOf(runner: unknown): Pick<JobEnd, 'runnerId' | 'runnerType' | 'runnerDescription' | 'runnerTags'> {
  if (!isObject(runner)) return {};
  return {
    runnerId: optionalId(runner.id, 'runner.id'),
    runnerType: text(runner.runner_type),
    runnerDescription: text(runner.description),
    runnerTags: runnerTagsOf(runner.tags),
  };
}

const flag = (value: unknown) => (typeof value === 'boolean' ? value : undefined);

/** One entry of a Pipeline Hook's `builds`, when it has finished. */
function finishedBuild(build: unknown, pipelineId: number, projectUrl: string | undefined, receivedAt: number): FinishedJob | undefined {
  if (!isObject(build) || typeof build.status !== 'string' || !FINISHED_STATUSES.has(build.status)) return undefined;
  const jobId = id(build.id, 'builds[].id');
  const startedAt = parseGitlabTime(build.started_at, 'builds[].started_at');
  return {
    jobId,
    pipelineId,
    status: build.status,
    failureReason: text(build.failure_reason),
    createdAt: parseGitlabTime(build.created_at, 'builds[].created_at'),
    startedAt,
    finishedAt: endOf(parseGitlabTime(build.finished_at, 'builds[].finished_at'), startedAt, seconds(build.duration), receivedAt),
    queuedDuration: startedAt === undefined ? undefined : seconds(build.queued_duration),
    name: text(build.name),
    stage: text(build.stage),
    jobUrl: projectUrl === undefined ? undefined : `${projectUrl}/-/jobs/${jobId}`,
    manual: manualOf(build),
    when: text(build.when),
    allowFailure: flag(build.allow_failure),
    ...runnerOf(build.runner),
  };
}

/**
 * Whether a person starts the job: `when: manual`. GitLab's `manual` is also true for a `when: delayed` job, which a
 * timer starts, so `when` decides when it is there; the Job Hook carries neither.
 */
function manualOf(build: Json): boolean | undefined {
  if (typeof build.when === 'string') return build.when === 'manual';
  return typeof build.manual === 'boolean' ? build.manual : undefined;
}

/** What failed in a failed pipeline, from its failed jobs: `test-build: script_failure`. */
function pipelineFailure(builds: unknown[]): string | undefined {
  const failed = builds.filter((build): build is Json => isObject(build) && build.status === 'failed' && build.allow_failure !== true);
  if (failed.length === 0) return undefined;
  return failed.map((build) => `${text(build.name) ?? `job ${String(build.id)}`}: ${text(build.failure_reason) ?? 'failed'}`).join(', ');
}

function sourcePipeline(source: unknown): PipelineEvent['source'] {
  if (!isObject(source) || source.pipeline_id === undefined || source.pipeline_id === null) return undefined;
  return {
    pipelineId: id(source.pipeline_id, 'source_pipeline.pipeline_id'),
    jobId: optionalId(source.job_id, 'source_pipeline.job_id'),
    projectId: isObject(source.project) ? optionalId(source.project.id, 'source_pipeline.project.id') : undefined,
  };
}

export function parsePipelineHook(body: unknown, receivedAt: number): PipelineEvent {
  if (!isObject(body) || !isObject(body.object_attributes)) throw new WebhookPayloadError('a Pipeline Hook has object_attributes');
  const attributes = body.object_attributes;
  const project = isObject(body.project) ? body.project : {};
  const pipelineId = id(attributes.id, 'object_attributes.id');
  const projectUrl = text(project.web_url);
  const builds = Array.isArray(body.builds) ? body.builds : [];
  const status = text(attributes.status) ?? '';
  const finishedJobs = builds.map((build) => finishedBuild(build, pipelineId, projectUrl, receivedAt)).filter((job): job is FinishedJob => job !== undefined);
  const active = builds.filter((build): build is Json => isObject(build) && ACTIVE.has(String(build.status)));
  const activeJobIds = active.map((build) => id(build.id, 'builds[].id'));
  const waitingForResourceJobIds = active.filter((build) => build.status === WAITING_FOR_RESOURCE).map((build) => id(build.id, 'builds[].id'));
  let end: PipelineEnd | undefined;
  if (FINISHED_STATUSES.has(status)) {
    const createdAt = parseGitlabTime(attributes.created_at, 'object_attributes.created_at') ?? receivedAt;
    const finishedAt = endOf(parseGitlabTime(attributes.finished_at, 'object_attributes.finished_at'), createdAt, undefined, receivedAt);
    end = {
      status,
      failureReason: status === 'failed' ? (pipelineFailure(builds) ?? text(attributes.detailed_status) ?? 'failed') : undefined,
      createdAt,
      // The pipeline span ends at or after each of its job spans, whatever rounding GitLab's times had.
      // Only the times GitLab wrote: a redelivered hook must give the same end (and version) again.
      finishedAt: Math.max(finishedAt, ...builds.map((build) => (isObject(build) ? (parseGitlabTime(build.finished_at, 'builds[].finished_at') ?? 0) : 0))),
      name: text(attributes.name),
      source: text(attributes.source),
      ref: text(attributes.ref),
      tag: attributes.tag === true,
      sha: text(attributes.sha),
      url: text(attributes.url),
      projectUrl,
      projectPath: text(project.path_with_namespace),
    };
  }
  return {
    kind: 'pipeline',
    pipelineId,
    projectId: id(project.id ?? attributes.project_id, 'project.id'),
    projectPath: text(project.path_with_namespace),
    rootPipelineId: optionalId(attributes.root_pipeline_id, 'object_attributes.root_pipeline_id'),
    source: sourcePipeline(body.source_pipeline),
    status,
    createdAt: parseGitlabTime(attributes.created_at, 'object_attributes.created_at'),
    end,
    finishedJobs,
    activeJobIds,
    waitingForResourceJobIds,
  };
}

export function parseJobHook(body: unknown, receivedAt: number): JobEvent {
  if (!isObject(body)) throw new WebhookPayloadError('a Job Hook is a JSON object');
  const jobId = id(body.build_id, 'build_id');
  const status = text(body.build_status) ?? '';
  if (!FINISHED_STATUSES.has(status)) return { kind: 'job', jobId, status };
  const project = isObject(body.project) ? body.project : {};
  const projectUrl = text(project.web_url);
  const startedAt = parseGitlabTime(body.build_started_at, 'build_started_at');
  const retriesCount =
    typeof body.retries_count === 'number' && Number.isSafeInteger(body.retries_count) && body.retries_count >= 0 ? body.retries_count : undefined;
  return {
    kind: 'job',
    jobId,
    status,
    job: {
      jobId,
      pipelineId: id(body.pipeline_id, 'pipeline_id'),
      status,
      failureReason: status === 'failed' ? text(body.build_failure_reason) : undefined,
      createdAt: parseGitlabTime(body.build_created_at, 'build_created_at'),
      startedAt,
      finishedAt: endOf(parseGitlabTime(body.build_finished_at, 'build_finished_at'), startedAt, seconds(body.build_duration), receivedAt),
      // GitLab's pending → started, to the microsecond; a job that never started has its queue time so far in it.
      queuedDuration: startedAt === undefined ? undefined : seconds(body.build_queued_duration),
      retriesCount,
      allowFailure: flag(body.build_allow_failure),
      name: text(body.build_name),
      stage: text(body.build_stage),
      jobUrl: projectUrl === undefined ? undefined : `${projectUrl}/-/jobs/${jobId}`,
      ...runnerOf(body.runner),
    },
  };
}
