import { criticalPath } from '../critical-path/critical-path';
import { adjustedCountOf, carriesId, identityOf } from '../otlp/span-identity';
import type { JobRun } from './job-summary';
import type { StoredSpan, TimeWindow } from './trace-reads';

const ms = (nanos: bigint) => Number(nanos / 1_000_000n);

/**
 * The runs of a project's jobs in one trace that were queued within `window` (optionally of pipelines on `ref`),
 * with whether each was on its pipeline's critical path, computed here from the trace. For a backend that holds
 * whole traces (the embedded files). Jobs GitLab never named (no webhook: the job span was closed from the runner's)
 * cannot be grouped by name and are left out.
 */
export function jobRunsOf(trace: readonly StoredSpan[], projectId: number, window: TimeWindow, ref?: string): JobRun[] {
  const jobs = trace.filter(
    (span) => span.name === 'job' && carriesId(span, 'ci.project.id', projectId) && typeof span.attributes['cicd.pipeline.task.name'] === 'string',
  );
  if (jobs.length === 0) return [];
  const refs = new Map<string, string>();
  for (const span of trace) {
    if (span.name === 'pipeline') refs.set(String(identityOf(span, 'ci.pipeline.id')), String(span.attributes['vcs.ref.head.name'] ?? ''));
  }
  const queues = new Map<string, StoredSpan>();
  for (const span of trace) if (span.name === 'queue_wait') queues.set(span.parentSpanId, span);
  const path = criticalPath(trace);
  const onPath = new Map((path?.path ?? []).map((element) => [element.job_id, element.duration_seconds]));
  const latestByName = new Map<string, number>();
  for (const job of jobs) {
    const key = `${String(identityOf(job, 'ci.pipeline.id'))}\u0000${String(job.attributes['cicd.pipeline.task.name'])}`;
    latestByName.set(key, Math.max(latestByName.get(key) ?? -Infinity, ms(job.startNanos)));
  }
  const runs: JobRun[] = [];
  for (const job of jobs) {
    const queuedAt = ms(job.startNanos);
    if (queuedAt < window.fromMs || queuedAt > window.toMs) continue;
    const pipelineId = String(identityOf(job, 'ci.pipeline.id'));
    if (ref !== undefined && refs.get(pipelineId) !== ref) continue;
    const jobId = Number(identityOf(job, 'ci.job.id'));
    const name = String(job.attributes['cicd.pipeline.task.name']);
    const queue = queues.get(job.spanId);
    const pickedUp = queue === undefined ? queuedAt : ms(queue.endNanos);
    runs.push({
      jobId,
      name,
      stage: String(job.attributes['ci.job.stage'] ?? ''),
      pipelineId: Number(pipelineId),
      status: String(job.attributes['ci.job.status'] ?? ''),
      durationSeconds: Math.max(0, ms(job.endNanos) - pickedUp) / 1000,
      queueSeconds: Math.max(0, pickedUp - queuedAt) / 1000,
      retried: (latestByName.get(`${pipelineId}\u0000${name}`) ?? queuedAt) > queuedAt,
      ...(path === null ? {} : { onCriticalPath: onPath.has(jobId), ...(onPath.has(jobId) ? { criticalPathSeconds: onPath.get(jobId)! } : {}) }),
      adjustedCount: adjustedCountOf(job.traceState),
    });
  }
  return runs;
}
