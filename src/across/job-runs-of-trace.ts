import { FINISHED_STATUSES } from '../otlp/ci-identity';
import { criticalPathWalk, WalkedJob } from '../critical-path/critical-path';
import type { CollectedSpan as StoredSpan } from '../otlp/collected-spans';
import { keptVersionOf, trustedSpans } from '../otlp/control-plane-mark';
import { adjustedCountOf, identityOf, ofProject } from '../otlp/span-identity';
import type { JobRunRow } from './job-run';

/**
 * The rows of one trace (SPEC §13): one per attempt of each job of `projectId` that GitLab named, its root pipeline's
 * child pipelines included, from the critical path's walk (src/critical-path), so a row's wait, queue and run are the
 * path's own for a job on it and its blocker's for a job off it. Pure; what the embedded backend keeps and what
 * ClickHouse's rows are checked against.
 *
 * Only the project's own spans are read (SPEC §12 "Trust"): another project's jobs in the trace are neither rows nor
 * blockers, and GitLab's account of a job or pipeline only from the control plane's spans. Jobs GitLab never named
 * (no webhook: the control plane closed their span from the runner's) are left out: they cannot be matched by name.
 *
 * For a root pipeline that has ended, the rows on its critical path add up exactly: their `waitMs + queueMs` and run
 * parts sum to the path's duration in milliseconds (a bridge whose child pipeline has no job is the one path element
 * without a row).
 */
export function jobRunsOfTrace(trace: readonly StoredSpan[], projectId: number): JobRunRow[] {
  const spans = ofProject(trustedSpans(trace), projectId);
  const walk = criticalPathWalk(spans);
  if (walk.jobs.length === 0) return [];

  const pipelines = latestPipelineSpans(spans);
  const root = [...pipelines.values()].find((span) => span.parentSpanId === '');
  const rootEnded = root !== undefined && FINISHED_STATUSES.has(text(root.attributes['ci.pipeline.status']));
  const pathKnown = rootEnded && walk.path !== null;
  const jobSpans = new Map<number, StoredSpan>();
  const executions = new Map<string, StoredSpan>();
  for (const span of spans) {
    if (span.name === 'job') {
      const jobId = numberOf(identityOf(span, 'ci.job.id'));
      if (jobId !== null) jobSpans.set(jobId, span);
    } else if (span.name === 'job_execution') {
      executions.set(span.parentSpanId, span);
    }
  }
  // A pipeline whose span is not there yet (its Pipeline Hook has not come) was created no later than its first job.
  const firstPending = new Map<number, number>();
  for (const job of walk.jobs) {
    if (job.pipelineId !== null) firstPending.set(job.pipelineId, Math.min(firstPending.get(job.pipelineId) ?? Infinity, job.pendingMs));
  }
  const rootPipelineId = root === undefined ? null : numberOf(identityOf(root, 'ci.pipeline.id'));

  const rows: JobRunRow[] = [];
  for (const job of walk.jobs) {
    const span = jobSpans.get(job.jobId);
    if (span === undefined || job.name === null || job.pipelineId === null) continue;
    const pipeline = pipelines.get(job.pipelineId);
    const status = text(pipeline?.attributes['ci.pipeline.status']);
    rows.push({
      projectId,
      pipelineId: job.pipelineId,
      rootPipelineId: rootPipelineId ?? numberOf(pipeline?.attributes['ci.root_pipeline.id']) ?? job.pipelineId,
      ref: text(pipeline?.attributes['vcs.ref.head.name']),
      sha: text(pipeline?.attributes['vcs.ref.head.revision']),
      // GitLab's, on the pipeline span; else as the runner read it from the job's CI_PIPELINE_SOURCE.
      source: text(pipeline?.attributes['ci.pipeline.source']) || text(executions.get(span.spanId)?.attributes['ci.pipeline.source']),
      pipelineCreatedAt: pipeline === undefined ? firstPending.get(job.pipelineId)! : ms(pipeline.startNanos),
      pipelineFinishedAt: pipeline !== undefined && FINISHED_STATUSES.has(status) ? ms(pipeline.endNanos) : null,
      pipelineStatus: status,
      ...jobFacts(job, span),
      onCriticalPath: pathKnown ? job.onPath : null,
      // An attempt a later one replaced, off the path, cannot take longer now: no slack (as the written path says).
      slackMs: pathKnown && (job.onPath || !job.superseded) ? job.slackMs : null,
      adjustedCount: adjustedCountOf((pipeline ?? span).traceState),
    });
  }
  return rows.sort((a, b) => a.pipelineCreatedAt - b.pipelineCreatedAt || a.pipelineId - b.pipelineId || a.pendingAt - b.pendingAt || a.jobId - b.jobId);
}

const ms = (nanos: bigint) => Number((nanos + 500_000n) / 1_000_000n);
/** A string attribute; a backend that keeps attributes as text gives a ref or stage such as `2024` back as a number. */
const text = (value: unknown) => (typeof value === 'string' ? value : typeof value === 'number' && Number.isFinite(value) ? String(value) : '');

function numberOf(value: unknown): number | null {
  if (value === undefined || value === null || value === '') return null;
  const number = Number(value);
  return Number.isSafeInteger(number) ? number : null;
}

/** Each pipeline's span in its latest version (the control plane's, highest `ci.pipeline.span.version`), by pipeline id. */
function latestPipelineSpans(spans: readonly StoredSpan[]): Map<number, StoredSpan> {
  const pipelines = new Map<number, StoredSpan>();
  for (const span of spans) {
    if (span.name !== 'pipeline') continue;
    const pipelineId = numberOf(identityOf(span, 'ci.pipeline.id'));
    if (pipelineId === null) continue;
    const kept = pipelines.get(pipelineId);
    if (kept === undefined || keptVersionOf(span) > keptVersionOf(kept)) pipelines.set(pipelineId, span);
  }
  return pipelines;
}

/**
 * A job span's `ci.runner.tags`: a string array as the span model writes it, stored as the JSON text of its values on
 * both backends (`["arm64","docker"]`). Sorted and joined with ','; '' for an untagged runner or when not said.
 */
export function runnerTagsOf(value: unknown): string {
  if (typeof value !== 'string' || !value.startsWith('[')) return '';
  try {
    const tags = JSON.parse(value) as unknown;
    return Array.isArray(tags) ? [...new Set(tags.filter((tag): tag is string => typeof tag === 'string' && tag !== ''))].sort().join(',') : '';
  } catch {
    return '';
  }
}

/** The row's own part: what GitLab said of the job on its span, and what the walk found. */
function jobFacts(
  job: WalkedJob,
  span: StoredSpan,
): Omit<
  JobRunRow,
  | 'projectId'
  | 'pipelineId'
  | 'rootPipelineId'
  | 'ref'
  | 'sha'
  | 'source'
  | 'pipelineCreatedAt'
  | 'pipelineFinishedAt'
  | 'pipelineStatus'
  | 'onCriticalPath'
  | 'slackMs'
  | 'adjustedCount'
> {
  const attributes = span.attributes;
  const created = Date.parse(text(attributes['ci.job.created_at']));
  const failureReason = text(attributes['ci.job.failure_reason']);
  return {
    jobId: job.jobId,
    name: job.name!,
    stage: job.stage ?? '',
    attempt: job.attempt,
    retried: job.superseded,
    status: text(attributes['ci.job.status']),
    failureReason: failureReason === '' ? null : failureReason,
    allowFailure: attributes['ci.job.allow_failure'] === true,
    runnerId: numberOf(attributes['cicd.worker.id']) ?? numberOf(identityOf(span, 'ci.runner.id')),
    runnerType: text(attributes['ci.runner.type']),
    runnerTags: runnerTagsOf(attributes['ci.runner.tags']),
    // Never after it became pending, whatever GitLab's clocks said.
    createdAt: Number.isFinite(created) ? Math.min(created, job.pendingMs) : job.pendingMs,
    pendingAt: job.pendingMs,
    startedAt: job.pickedUpMs,
    finishedAt: job.endMs,
    waitMs: job.waitMs,
    waitingFor: job.waitingFor,
    queueMs: job.queueMs,
    partsMs: job.partsMs,
    runnerSpans: job.runnerSpans,
    // GitLab Runner's spans say nothing of the cache: its job_execution carries the job's identity, executor and status
    // (commands/tracing.go) and its build stages are spans without attributes (common/build.go), so whether restore_cache
    // found the cache is in the job's log only. A reader infers it and says so (SPEC §13 "Waste").
    cacheResult: null,
  };
}
