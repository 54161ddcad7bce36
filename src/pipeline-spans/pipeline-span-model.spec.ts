import type { RunnerJobEnd, TracedJob, TracedPipeline } from '../traced-work/traced-work';
import {
  endOfVersion,
  JobEnd,
  jobSpan,
  jobTimes,
  outboxKeyOf,
  PipelineEnd,
  pipelineSeenFromJobs,
  pipelineSpan,
  pipelineSpanVersion,
  reopenedPipelineEnd,
  SPAN_VERSION_ATTRIBUTE,
} from './pipeline-span-model';

const T0 = Date.parse('2026-11-25T10:00:00Z');
const at = (seconds: number) => T0 + seconds * 1000;
const pipeline: TracedPipeline = { pipelineId: 501, rootPipelineId: 501, projectId: 7, traceId: 'a'.repeat(32) };
const place = { traceId: pipeline.traceId, spanId: 'b'.repeat(16) };

const attributesOf = (end: PipelineEnd) =>
  Object.fromEntries(
    pipelineSpan('gitlab-ci', place, pipeline, end).resourceSpans.scopeSpans[0].spans[0].attributes.map(({ key, value }) => [key, Object.values(value)[0]]),
  );

describe('the version of a pipeline span (SPEC §10, the final story)', () => {
  it('is newer when the pipeline finishes again, later, whatever its status was before', () => {
    const failed = pipelineSpanVersion({ status: 'failed', finishedAt: at(300) });
    const retriedAndPassed = pipelineSpanVersion({ status: 'success', finishedAt: at(420) });
    const manualPlayed = pipelineSpanVersion({ status: 'success', finishedAt: at(900) });
    expect(retriedAndPassed).toBeGreaterThan(failed);
    expect(manualPlayed).toBeGreaterThan(retriedAndPassed);
  });

  it('is the same for the same facts: a redelivered hook, another replica, any order of arrival', () => {
    const facts = { status: 'success', finishedAt: at(420) };
    expect(pipelineSpanVersion({ ...facts })).toBe(pipelineSpanVersion(facts));
    const ends = [at(1), at(2), at(3)].map((finishedAt, jobId) => ({ jobId, queuedAt: at(-10 - jobId), finishedAt, status: 'success' }));
    const seen = pipelineSeenFromJobs(ends)!;
    expect(pipelineSpanVersion(pipelineSeenFromJobs([...ends].reverse())!)).toBe(pipelineSpanVersion(seen));
  });

  it('breaks a tie on the end by status, the worse the newer, then by how many jobs the facts cover', () => {
    const end = at(420);
    // A reopened pipeline (running again after this end) is newer than any finish at this end (issue 56, 4b).
    const ranks = ['skipped', 'success', 'canceled', 'failed', 'running'].map((status) => pipelineSpanVersion({ status, finishedAt: end }));
    expect([...ranks].sort((a, b) => a - b)).toEqual(ranks);
    expect(new Set(ranks).size).toBe(ranks.length);
    expect(pipelineSpanVersion({ status: 'success', finishedAt: end, jobsSeen: 3 })).toBeGreaterThan(
      pipelineSpanVersion({ status: 'success', finishedAt: end, jobsSeen: 2 }),
    );
    // A later end outranks any status and any count.
    expect(pipelineSpanVersion({ status: 'skipped', finishedAt: end + 1 })).toBeGreaterThan(
      pipelineSpanVersion({ status: 'failed', finishedAt: end, jobsSeen: 1000 }),
    );
  });

  it('is an exact integer, written as the span attribute ci.pipeline.span.version, and keys the outbox with the span id', () => {
    const version = pipelineSpanVersion({ status: 'failed', finishedAt: Date.parse('2200-01-01T00:00:00Z'), jobsSeen: 127 });
    expect(Number.isSafeInteger(version)).toBe(true);
    const end = { status: 'success', createdAt: at(0), finishedAt: at(420) };
    const span = pipelineSpan('gitlab-ci', place, pipeline, end);
    expect(span.version).toBe(pipelineSpanVersion(end));
    expect(attributesOf(end)[SPAN_VERSION_ATTRIBUTE]).toBe(String(pipelineSpanVersion(end)));
    expect(outboxKeyOf(span)).toBe(`${'b'.repeat(16)}@${pipelineSpanVersion(end)}`);
    expect(outboxKeyOf({ spanId: 'c'.repeat(16) })).toBe('c'.repeat(16));
  });
});

describe('a pipeline seen without webhooks: from its traced jobs as their runners ended them', () => {
  const end = (jobId: number, queuedAt: number, finishedAt: number, status = 'success'): RunnerJobEnd => ({ jobId, queuedAt, finishedAt, status });

  it('spans the earliest queued_at to the latest job end, with the worst job status and what failed', () => {
    expect(pipelineSeenFromJobs([end(1, at(0), at(60)), end(2, at(-5), at(50), 'failed'), end(3, at(70), at(130), 'canceled')])).toEqual({
      status: 'failed',
      failureReason: 'job 2: failed',
      createdAt: at(-5),
      finishedAt: at(130),
      jobsSeen: 3,
    });
    expect(pipelineSeenFromJobs([end(1, at(0), at(60))])).toEqual({ status: 'success', createdAt: at(0), finishedAt: at(60), jobsSeen: 1 });
    expect(pipelineSeenFromJobs([])).toBeUndefined();
  });

  it('grows with each job reported, so each report that changes the facts is a newer version', () => {
    const first = pipelineSeenFromJobs([end(1, at(0), at(60))])!;
    // Queued earlier, ended earlier, reported later: the end and status stay, the start moves.
    const second = pipelineSeenFromJobs([end(1, at(0), at(60)), end(2, at(-5), at(50))])!;
    expect(second.createdAt).toBeLessThan(first.createdAt);
    expect(pipelineSpanVersion(second)).toBeGreaterThan(pipelineSpanVersion(first));
  });

  it("does not claim the pipeline's own status, which only GitLab knows", () => {
    const attributes = attributesOf(pipelineSeenFromJobs([end(1, at(0), at(60), 'failed')])!);
    expect(attributes['ci.pipeline.status']).toBeUndefined();
    expect(attributes['cicd.pipeline.result']).toBeUndefined();
    expect(attributes['ci.pipeline.worst_job_status']).toBe('failed');
    expect(attributes['ci.pipeline.jobs_seen']).toBe('1');
    const fromGitlab = attributesOf({ status: 'failed', createdAt: at(0), finishedAt: at(60) });
    expect(fromGitlab['ci.pipeline.status']).toBe('failed');
    expect(fromGitlab['ci.pipeline.worst_job_status']).toBeUndefined();
  });
});

describe("a job's span: GitLab's times where GitLab said them (issue 56)", () => {
  const job: TracedJob = { ...pipeline, jobId: 9001, runnerId: 17, runnerType: 'project_type', pickedUpAt: at(130.2) };
  const finished: JobEnd = { status: 'success', startedAt: at(130), finishedAt: at(160), queuedDuration: 119.75 };
  const spanOf = (traced: TracedJob, end: JobEnd) => {
    const [span] = jobSpan('gitlab-ci', { ...place, spanId: 'c'.repeat(16) }, traced, end).resourceSpans.scopeSpans[0].spans;
    return {
      start: Number(BigInt(span.startTimeUnixNano) / 1_000_000n),
      attributes: Object.fromEntries(span.attributes.map(({ key, value }) => [key, Object.values(value)[0]])),
    };
  };

  it("starts when GitLab made the job pending: its queued_at at the pickup, queued for GitLab's queued_duration", () => {
    expect(jobTimes({ ...job, queuedAt: at(10.25) }, finished)).toEqual({ pending: at(10.25), pickedUp: at(130) });
    expect(spanOf({ ...job, queuedAt: at(10.25) }, finished)).toMatchObject({ start: at(10.25), attributes: { 'ci.job.queued_duration_seconds': 119.75 } });
  });

  it("without queued_at at the pickup, from the Job Hook's build_started_at − build_queued_duration: the queue is no delay", () => {
    expect(jobTimes(job, finished)).toEqual({ pending: at(10.25), pickedUp: at(130) });
    expect(spanOf(job, finished).start).toBe(at(10.25));
    // Where GitLab said neither, the pickup's clock.
    expect(jobTimes(job, { status: 'success', finishedAt: at(160) })).toEqual({ pending: at(130.2), pickedUp: at(130.2) });
  });

  it('says what the critical path names waits by: when, a resource group, a retry', () => {
    const attributes = spanOf(job, { ...finished, when: 'delayed', waitedForResource: true, retriesCount: 2 }).attributes;
    expect(attributes).toMatchObject({ 'ci.job.when': 'delayed', 'ci.job.waited_for_resource': true, 'ci.job.retries_count': '2' });
    expect(spanOf(job, { ...finished, retriesCount: 0 }).attributes['ci.job.retries_count']).toBeUndefined();
  });
});

describe('a pipeline reopened (issue 56, 4b): running again after it had finished', () => {
  it("is drawn as a newer version than the finish it follows, and an older one than the next finish, from the store's version alone", () => {
    const failed: PipelineEnd = { status: 'failed', createdAt: at(0), finishedAt: at(300) };
    const highest = pipelineSpanVersion(failed);
    const reopened = reopenedPipelineEnd({ status: 'failed', createdAt: at(0), finishedAt: endOfVersion(highest) }, 'running');
    expect(pipelineSpanVersion(reopened)).toBeGreaterThan(highest);
    expect(pipelineSpanVersion(reopened)).toBeLessThan(pipelineSpanVersion({ status: 'skipped', finishedAt: at(300) + 1 }));
    expect(attributesOf(reopened)).toMatchObject({ 'ci.pipeline.status': 'running' });
    expect(attributesOf(reopened)['error.type']).toBeUndefined();
    expect(() => reopenedPipelineEnd(failed, 'success')).toThrow();
  });
});
