import type { RunnerJobEnd, TracedJob, TracedPipeline } from '../traced-work/traced-work';
import { CiJobIdentity, ciIdentityValues, SAMPLING_REASON_ATTRIBUTE } from '../otlp/ci-identity';
import { PROVISIONAL_TRACESTATE } from '../trace-context/trace-context';
import { PENDING_SAMPLING_REASON } from '../otlp/sampling-reason';
import { CONTROL_PLANE_MARK } from '../otlp/control-plane-mark';
import { SPAN_KIND, STATUS_CODE } from '../otlp/otlp-fields';

/**
 * The control-plane spans of SPEC §10 as OTLP/JSON, from facts: pure functions, no I/O. Ids come from
 * trace-context/ (the caller derives them), so anything holding the trace key recomputes the same tree.
 *
 * Span names are fixed and few (`pipeline`, `job`, `queue_wait`, `bridge`), so that they group in a
 * trace viewer and in ClickHouse; what varies (job name, pipeline name) is in attributes.
 */

export const PIPELINE_SPAN = 'pipeline';
export const JOB_SPAN = 'job';
export const QUEUE_WAIT_SPAN = 'queue_wait';
export const BRIDGE_SPAN = 'bridge';
const SCOPE = { name: 'ci-job-telemetry/pipeline-spans' };

// OTLP span kinds and status codes as OTLP/JSON writes them (integers).
const { INTERNAL: KIND_INTERNAL, SERVER: KIND_SERVER } = SPAN_KIND;
const STATUS_ERROR = STATUS_CODE.ERROR;

/** An attribute's value; a list of strings is OTLP's `arrayValue` (a runner's tags). */
export type AttributeValue = string | number | boolean | readonly string[];

/** One span ready for the outbox: its id and the OTLP/JSON `ResourceSpans` carrying it alone. */
export interface ControlPlaneSpan {
  readonly spanId: string;
  /** For a span drawn from a pipeline's story (pipeline, bridge): which version of it, see {@link pipelineSpanVersion}. */
  readonly version?: number;
  /**
   * Of a pipeline traced provisionally (SPEC §11): parked with its runner's spans until the outcome decides, its
   * `ci.sampling.reason` a placeholder settled then.
   */
  readonly provisional?: true;
  readonly resourceSpans: OtlpResourceSpans;
}

/**
 * The span attribute that carries a pipeline span's version: readers keep the highest per span id, among the spans
 * that carry the control plane's mark (control-plane-mark.ts, which reserves this key).
 */
export const SPAN_VERSION_ATTRIBUTE = 'ci.pipeline.span.version';

/**
 * What makes a span unique in the outbox: its id, and for a versioned span its version too, so that
 * each version is delivered once and a redelivered hook or a second replica adds no second copy.
 */
export function outboxKeyOf(span: Pick<ControlPlaneSpan, 'spanId' | 'version'>): string {
  return span.version === undefined ? span.spanId : `${span.spanId}@${span.version}`;
}

export interface OtlpResourceSpans {
  readonly resource: { readonly attributes: OtlpKeyValue[] };
  readonly scopeSpans: Array<{ readonly scope: { readonly name: string }; readonly spans: OtlpSpan[] }>;
}

type OtlpScalar = { stringValue: string } | { intValue: string } | { boolValue: boolean } | { doubleValue: number };

interface OtlpKeyValue {
  readonly key: string;
  readonly value: OtlpScalar | { arrayValue: { values: Array<{ stringValue: string }> } };
}

interface OtlpSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly traceState?: string;
  readonly name: string;
  readonly kind: number;
  readonly startTimeUnixNano: string;
  readonly endTimeUnixNano: string;
  readonly attributes: OtlpKeyValue[];
  readonly status?: { readonly code: number; readonly message?: string };
}

/** Where a span sits: its trace, its id, its parent (none for the trace's root). */
export interface SpanPlace {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly tracestate?: string;
}

/** How a job or pipeline ended, as GitLab says it. */
export interface Outcome {
  /** GitLab's status: success, failed, canceled, skipped, … */
  readonly status: string;
  /** GitLab's failure reason (`script_failure`, …) or, for a pipeline, what failed. */
  readonly failureReason?: string;
}

/** What a finished job's webhook (or the gateway, without webhooks) tells. */
export interface JobEnd extends Outcome {
  readonly finishedAt: number;
  readonly startedAt?: number;
  readonly name?: string;
  readonly stage?: string;
  readonly runnerDescription?: string;
  readonly runnerType?: string;
  readonly runnerId?: number;
  /**
   * The runner's tags (Job Hook `runner.tags`), sorted, once each, bounded (gitlab-webhook.ts): written as
   * `ci.runner.tags`, a string array, so queue waits can be read by tag set (SPEC §13). [] for an untagged runner.
   */
  readonly runnerTags?: readonly string[];
  /** GitLab's `allow_failure` of the job (`build_allow_failure`, `builds[].allow_failure`): `ci.job.allow_failure`. */
  readonly allowFailure?: boolean;
  readonly jobUrl?: string;
  /**
   * Whether a person starts the job (`when: manual`), as a Pipeline Hook's `builds` say (its `when`, else its
   * `manual`); the Job Hook does not say. Written as `ci.job.manual`: the critical path names the wait before such a
   * job a manual wait, not GitLab's delay.
   */
  readonly manual?: boolean;
  /**
   * GitLab's `when` of the job (`on_success`, `manual`, `delayed`, `always`, …), as a Pipeline Hook's `builds` say:
   * written as `ci.job.when`, so that the critical path names the wait before a `delayed` job a delayed wait.
   */
  readonly when?: string;
  /**
   * GitLab's `queued_duration` (seconds, fractional: pending → started, measured by GitLab), as the Job Hook's
   * `build_queued_duration` or a Pipeline Hook's `builds[].queued_duration` say.
   */
  readonly queuedDuration?: number;
  /**
   * GitLab's `created_at` of the job (the Job Hook's `build_created_at`): when the job was created, not pending. Written
   * as `ci.job.created_at` (ISO 8601), so a row of a job run (SPEC §13) has it.
   */
  readonly createdAt?: number;
  /** GitLab's `retries_count` (the Job Hook's): above 0, the job is a retry of an earlier one. */
  readonly retriesCount?: number;
  /**
   * GitLab said the job was `waiting_for_resource` (its `resource_group` was held by another job): the wait before it
   * became pending was the resource's. Only a hook sent while it waited says so (a Job Hook with that `build_status`,
   * or a Pipeline Hook listing it so), so the caller remembers it until the job ends.
   */
  readonly waitedForResource?: boolean;
}

/** What a finished pipeline's webhook tells, or, without webhooks, what its traced jobs' runners told. */
export interface PipelineEnd extends Outcome {
  readonly createdAt: number;
  readonly finishedAt: number;
  /**
   * Set when the facts come from the runners' `job_execution` spans, not from GitLab: how many traced jobs
   * they cover. `status` is then the worst job status seen, not the pipeline's own (unknown without webhooks).
   */
  readonly jobsSeen?: number;
  readonly name?: string;
  readonly source?: string;
  readonly ref?: string;
  readonly tag?: boolean;
  readonly sha?: string;
  readonly url?: string;
  readonly projectUrl?: string;
  readonly projectPath?: string;
}

function value(raw: AttributeValue): OtlpKeyValue['value'] {
  if (typeof raw === 'string') return { stringValue: raw };
  if (typeof raw === 'boolean') return { boolValue: raw };
  if (typeof raw === 'number') return Number.isSafeInteger(raw) ? { intValue: String(raw) } : { doubleValue: raw };
  return { arrayValue: { values: raw.map((item) => ({ stringValue: item })) } };
}

/**
 * The OTLP key-values of `records` in order, a later record's value taking an earlier key's place, leaving out those
 * without a value. Read record by record rather than spread into one object: spreading the identity's record, whose
 * keys are added one by one, into an object literal with more keys made V8 build each span's objects in the old
 * generation (about 0.7 KB a queue-wait span, 0.7 MB/s at 1,000 pickups/s), and collecting that garbage took
 * mark-compacts, every second or two, that held up pickups (issue 37).
 */
function keyValues(...records: ReadonlyArray<Readonly<Record<string, AttributeValue | undefined>>>): OtlpKeyValue[] {
  const list: OtlpKeyValue[] = [];
  for (const record of records) {
    for (const key of Object.keys(record)) {
      const raw = record[key];
      const keyValue = raw === undefined || raw === '' ? undefined : { key, value: value(raw) };
      let at = 0;
      while (at < list.length && list[at].key !== key) at++;
      if (at === list.length) {
        if (keyValue !== undefined) list.push(keyValue);
      } else if (keyValue !== undefined) list[at] = keyValue;
      else list.splice(at, 1);
    }
  }
  return list;
}

/**
 * How a pipeline's statuses rank: the worst of its jobs without webhooks, and which of two versions
 * ending at the same instant is the newer. Unknown statuses rank lowest.
 */
const STATUS_RANK: Readonly<Record<string, number>> = { skipped: 1, success: 2, canceled: 3, failed: 4 };
/** GitLab's statuses of a pipeline that has not finished (yet, or again: a retry, a manual job played). */
export const NOT_FINISHED_STATUSES: ReadonlySet<string> = new Set([
  'created',
  'waiting_for_resource',
  'preparing',
  'pending',
  'running',
  'scheduled',
  'manual',
]);
/** Above every finished status: a reopened pipeline's version is just above the finish it follows (see below). */
const REOPENED_RANK = 7;
const statusRank = (status: string) => (NOT_FINISHED_STATUSES.has(status) ? REOPENED_RANK : (STATUS_RANK[status] ?? 0));

const VERSION_RANK_BITS = 3;
const VERSION_SEEN_BITS = 7;
const VERSION_SEEN_MAX = 2 ** VERSION_SEEN_BITS - 1;

/**
 * The version of a pipeline span (SPEC §10, the final story): a number derived from the facts alone,
 * so that every replica, every redelivery and every order of arrival gives the same version to the same
 * facts, and a newer story a higher one. Ordered by the pipeline's end (a pipeline that finishes again
 * after a retry or a played manual job ends later), then its status's rank, then (without webhooks) how
 * many traced jobs the facts cover: one more job seen can move the start earlier without moving the end.
 * One integer (end in ms × 2^10 + rank × 2^7 + jobs seen, at most 127), exact in a double and in
 * ClickHouse's UInt64 until the year 2248.
 *
 * A pipeline reopened (GitLab's Pipeline Hook says `running`, `pending`, … after it had finished: a job retried or
 * played) is drawn with that status and, as `finishedAt`, the end of the finished version it follows (see
 * {@link reopenedPipelineEnd}): its rank is above every finished status's, so its version is just above that
 * finish's and below any later finish's (the next end is later by at least the reopening job's run).
 */
export function pipelineSpanVersion(end: Pick<PipelineEnd, 'finishedAt' | 'status' | 'jobsSeen'>): number {
  const seen = Math.min(VERSION_SEEN_MAX, Math.max(0, end.jobsSeen ?? 0));
  return (Math.max(0, Math.round(end.finishedAt)) * 2 ** VERSION_RANK_BITS + statusRank(end.status)) * 2 ** VERSION_SEEN_BITS + seen;
}

/** The end (epoch ms) of the pipeline's story a version was drawn from: the inverse of pipelineSpanVersion's time. */
export function endOfVersion(version: number): number {
  return Math.floor(version / 2 ** (VERSION_RANK_BITS + VERSION_SEEN_BITS));
}

/**
 * The facts of a pipeline GitLab reopened (its Pipeline Hook says `status`, not finished, after `finished` ended it):
 * its span follows it, same id, a newer version, so readers see it running again and `final` is false at once. Drawn
 * from `finished`'s creation to its end; `finished` may be no more than the version emitted last
 * (`{ createdAt, finishedAt: endOfVersion(version), status }`).
 */
export function reopenedPipelineEnd(finished: PipelineEnd, status: string): PipelineEnd {
  if (!NOT_FINISHED_STATUSES.has(status)) throw new Error(`a reopened pipeline's status is one of GitLab's unfinished ones, not ${status}`);
  return { ...finished, status, failureReason: undefined, jobsSeen: undefined };
}

/**
 * A pipeline's span without webhooks, from what its traced jobs' runners told: from the earliest
 * `queued_at` to the latest job end, with the worst job status. What it cannot know: jobs that never
 * ran (no runner span), jobs allowed to fail, retries (a failed attempt stays the worst status), and so
 * the pipeline's own status.
 */
export function pipelineSeenFromJobs(jobs: readonly RunnerJobEnd[]): PipelineEnd | undefined {
  if (jobs.length === 0) return undefined;
  const worst = jobs.reduce((found, job) => (statusRank(job.status) > statusRank(found.status) ? job : found));
  const failed = jobs.filter((job) => job.status === 'failed').map((job) => `job ${job.jobId}: failed`);
  return {
    status: worst.status,
    failureReason: failed.length === 0 ? undefined : failed.join(', '),
    createdAt: Math.min(...jobs.map((job) => job.queuedAt)),
    finishedAt: Math.max(...jobs.map((job) => job.finishedAt)),
    jobsSeen: jobs.length,
  };
}

const nanos = (epochMs: number) => `${BigInt(Math.round(epochMs)) * 1_000_000n}`;

/** GitLab's status as the CI/CD semantic conventions' result (`cicd.pipeline.result`, `…task.run.result`). */
export function cicdResult(status: string): string | undefined {
  switch (status) {
    case 'success':
      return 'success';
    case 'failed':
      return 'failure';
    case 'canceled':
    case 'canceling':
      return 'cancellation';
    case 'skipped':
      return 'skip';
    default:
      return undefined;
  }
}

/**
 * One span in its own `ResourceSpans`: the resource says who emitted it (`service.name`, never the
 * runner's) and whose it is (the identity of SPEC §6 in the gateway's types: resource and span alike as the
 * runner's spans carry it; the ClickHouse view reads the resource's first).
 */
function span(
  serviceName: string,
  place: SpanPlace,
  name: string,
  kind: number,
  startMs: number,
  endMs: number,
  identity: Partial<CiJobIdentity>,
  attributes: Record<string, AttributeValue | undefined>,
  outcome: Outcome | undefined,
  version?: number,
): ControlPlaneSpan {
  const failed = outcome?.status === 'failed';
  // The pipeline's tracestate says how it is sampled: ot=th:0 only for a provisional one.
  const provisional = place.tracestate === PROVISIONAL_TRACESTATE;
  return {
    spanId: place.spanId,
    ...(version === undefined ? {} : { version }),
    ...(provisional ? { provisional: true as const } : {}),
    resourceSpans: {
      resource: {
        attributes: keyValues(
          { 'service.name': serviceName },
          ciIdentityValues(identity, 'resource'),
          // As the gateway writes it on the runner's spans: the same placeholder, settled by the same function.
          { [SAMPLING_REASON_ATTRIBUTE]: provisional ? PENDING_SAMPLING_REASON : 'head' },
          // What readers take a control-plane span by (SPEC §12 "Trust"): the gateway refuses it from every job.
          { [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value },
        ),
      },
      scopeSpans: [
        {
          scope: SCOPE,
          spans: [
            {
              traceId: place.traceId,
              spanId: place.spanId,
              ...(place.parentSpanId === undefined ? {} : { parentSpanId: place.parentSpanId }),
              ...(place.tracestate === undefined ? {} : { traceState: place.tracestate }),
              name,
              kind,
              startTimeUnixNano: nanos(startMs),
              // A span never ends before it starts, whatever clocks and rounding say.
              endTimeUnixNano: nanos(Math.max(startMs, endMs)),
              attributes: keyValues(ciIdentityValues(identity, 'span'), attributes, { [SPAN_VERSION_ATTRIBUTE]: version }),
              ...(failed ? { status: { code: STATUS_ERROR, message: outcome?.failureReason ?? 'failed' } } : {}),
            },
          ],
        },
      ],
    },
  };
}

function jobIdentity(job: TracedJob, runnerId?: number): Partial<CiJobIdentity> {
  return { jobId: job.jobId, projectId: job.projectId, pipelineId: job.pipelineId, runnerId: runnerId ?? job.runnerId };
}

/** How long a job waited for a runner: from `queued_at` to the pickup. Emitted at the pickup. */
export function queueWaitSpan(serviceName: string, place: SpanPlace, job: TracedJob & { queuedAt: number }): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    QUEUE_WAIT_SPAN,
    KIND_INTERNAL,
    job.queuedAt,
    job.pickedUpAt,
    jobIdentity(job),
    { 'ci.runner.type': job.runnerType, 'ci.job.queued_duration_seconds': Math.max(0, job.pickedUpAt - job.queuedAt) / 1000 },
    undefined,
  );
}

/**
 * What the control plane adds to a span when it writes the critical path at the root pipeline's end (SPEC §12):
 * the attributes, and the version (the root pipeline's) that makes readers keep this copy over the first.
 */
export interface WrittenPath {
  readonly attributes: Readonly<Record<string, AttributeValue>>;
  readonly version: number;
}

/**
 * When a job became pending and when a runner took it, GitLab's times where GitLab said them: pending is GitLab's
 * `queued_at` (handed out at the pickup, to the millisecond), else its `started_at − queued_duration`; taken is
 * `queued_at + queued_duration` (both GitLab's own clock), else its `started_at`; the pickup's clock only where GitLab
 * said neither.
 */
export function jobTimes(job: TracedJob, end: JobEnd): { pending: number; pickedUp: number } {
  const queuedMs = end.queuedDuration === undefined ? undefined : end.queuedDuration * 1000;
  const started = end.startedAt ?? job.pickedUpAt;
  const pending = job.queuedAt ?? (queuedMs !== undefined && end.startedAt !== undefined ? end.startedAt - queuedMs : started);
  const pickedUp = queuedMs !== undefined && job.queuedAt !== undefined ? job.queuedAt + queuedMs : started;
  return { pending, pickedUp: Math.max(pending, pickedUp) };
}

/**
 * The job's own span, whose id is the `span_parent_id` its runner's spans name: from when the job became pending
 * (see {@link jobTimes}) to its end, with GitLab's queue wait (`ci.job.queued_duration_seconds`) and what the
 * critical path names waits by (`ci.job.when`, `ci.job.manual`, `ci.job.waited_for_resource`,
 * `ci.job.retries_count`). Emitted unversioned when the job ends; again at the root pipeline's end with the critical
 * path written on it.
 */
export function jobSpan(serviceName: string, place: SpanPlace, job: TracedJob, end: JobEnd, path?: WrittenPath): ControlPlaneSpan {
  const { pending, pickedUp } = jobTimes(job, end);
  // Never after its end: a job canceled before it ran has no start of its own.
  const start = Math.min(pending, end.finishedAt);
  const queued = end.queuedDuration !== undefined || job.queuedAt !== undefined ? Math.max(0, Math.min(pickedUp, end.finishedAt) - start) / 1000 : undefined;
  return span(
    serviceName,
    place,
    JOB_SPAN,
    KIND_INTERNAL,
    start,
    end.finishedAt,
    jobIdentity(job, end.runnerId),
    {
      'cicd.pipeline.task.name': end.name,
      'cicd.pipeline.task.run.result': cicdResult(end.status),
      'cicd.pipeline.task.run.url.full': end.jobUrl,
      'cicd.worker.name': end.runnerDescription,
      // `cicd.worker.id` (the runner's id, a string as the CI/CD conventions type it) is among the identity above.
      'ci.runner.tags': end.runnerTags === undefined ? undefined : [...end.runnerTags].sort(),
      'ci.job.status': end.status,
      'ci.job.allow_failure': end.allowFailure,
      'ci.job.created_at': end.createdAt === undefined ? undefined : new Date(end.createdAt).toISOString(),
      'ci.job.stage': end.stage,
      'ci.job.failure_reason': end.failureReason,
      'ci.runner.type': end.runnerType ?? job.runnerType,
      'ci.job.queued_duration_seconds': queued,
      'ci.job.manual': end.manual,
      'ci.job.when': end.when,
      'ci.job.waited_for_resource': end.waitedForResource === true ? true : undefined,
      'ci.job.retries_count': end.retriesCount === undefined || end.retriesCount === 0 ? undefined : end.retriesCount,
      'error.type': end.status === 'failed' ? (end.failureReason ?? 'failed') : undefined,
      ...path?.attributes,
    },
    end,
    path?.version,
  );
}

function pipelineAttributes(pipeline: TracedPipeline, end: PipelineEnd): Record<string, AttributeValue | undefined> {
  const fromGitlab = end.jobsSeen === undefined;
  return {
    'cicd.pipeline.name': end.name,
    'cicd.pipeline.result': fromGitlab ? cicdResult(end.status) : undefined,
    'cicd.pipeline.run.url.full': end.url,
    'cicd.pipeline.action.name': 'RUN',
    'ci.pipeline.status': fromGitlab ? end.status : undefined,
    'ci.pipeline.worst_job_status': fromGitlab ? undefined : end.status,
    'ci.pipeline.jobs_seen': end.jobsSeen,
    'ci.pipeline.source': end.source,
    'ci.pipeline.failure_reason': end.failureReason,
    'ci.root_pipeline.id': String(pipeline.rootPipelineId),
    'vcs.ref.head.name': end.ref,
    'vcs.ref.head.type': end.ref === undefined ? undefined : end.tag === true ? 'tag' : 'branch',
    'vcs.ref.head.revision': end.sha,
    'vcs.repository.url.full': end.projectUrl,
    'vcs.repository.name': end.projectPath,
    'error.type': end.status === 'failed' ? (end.failureReason ?? 'failed') : undefined,
  };
}

/**
 * A pipeline's span: the trace's root for the root pipeline, else under its bridge job or the root. Each
 * version of the pipeline's story has the same span id, and its version as {@link SPAN_VERSION_ATTRIBUTE}. The root
 * pipeline's, at its end, carries its critical path's time by part (`pathAttributes`, see pipeline-critical-path.ts).
 */
export function pipelineSpan(
  serviceName: string,
  place: SpanPlace,
  pipeline: TracedPipeline,
  end: PipelineEnd,
  pathAttributes?: Readonly<Record<string, AttributeValue>>,
): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    PIPELINE_SPAN,
    KIND_SERVER,
    end.createdAt,
    end.finishedAt,
    { projectId: pipeline.projectId, pipelineId: pipeline.pipelineId },
    { ...pipelineAttributes(pipeline, end), ...pathAttributes },
    end,
    pipelineSpanVersion(end),
  );
}

/** A trigger job, as its child pipeline's hook names it. */
export interface BridgeJob {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly projectId: number;
  readonly downstreamPipelineId: number;
  /** A multi-project downstream pipeline's project: its pipeline is its own trace's, pointed at, never drawn here. */
  readonly downstreamProjectId?: number;
}

/**
 * The trigger job that started a child pipeline. GitLab sends no Job Hook for trigger jobs, so its span
 * is drawn from the child pipeline it ran: it lasts as the child did, in the parent pipeline.
 */
export function bridgeSpan(serviceName: string, place: SpanPlace, bridge: BridgeJob, child: PipelineEnd): ControlPlaneSpan {
  return span(
    serviceName,
    place,
    BRIDGE_SPAN,
    KIND_INTERNAL,
    child.createdAt,
    child.finishedAt,
    { jobId: bridge.jobId, projectId: bridge.projectId, pipelineId: bridge.pipelineId },
    {
      'ci.job.kind': 'bridge',
      'ci.downstream_pipeline.id': String(bridge.downstreamPipelineId),
      'ci.downstream_project.id': bridge.downstreamProjectId === undefined ? undefined : String(bridge.downstreamProjectId),
      'ci.job.status': child.status,
    },
    child,
    // It lasts as its child pipeline does, so it follows the child's versions.
    pipelineSpanVersion(child),
  );
}
