import type { PipelineComparison } from '../across/compare';
import type { Regressions } from '../across/regressions';
import type { RunnerQueue, WhatIf } from '../across/runner-queue';
import type { WasteLedger } from '../across/waste';
import type { CriticalPathAnswer, JobsAnswer, TraceAnswer } from '../reads/read-answers';
import { pageOf } from './answer-budget';
import {
  compareAnswer,
  compareOutput,
  criticalPathAnswer,
  criticalPathOutput,
  jobTraceAnswer,
  jobTraceOutput,
  regressionsAnswer,
  regressionsOutput,
  runnerQueueAnswer,
  runnerQueueOutput,
  slowestJobsAnswer,
  slowestJobsOutput,
  wasteAnswer,
  wasteOutput,
  whatIfAnswer,
  whatIfOutput,
} from './tool-answers';

const page = (shaped: Parameters<typeof pageOf>[0]) => pageOf(shaped, 0, 8000, () => 'next');
const parts = (values: Partial<Record<string, number>> = {}) => ({
  prepare_executor: 0,
  pull_image: 0,
  get_sources: 0,
  restore_cache: 0,
  step_script: 0,
  after_script: 0,
  archive_cache: 0,
  upload_artifacts: 0,
  other: 0,
  ...values,
});
const split = (total: number, onPath = 0) => ({ total, on_critical_path: onPath, off_critical_path: total - onPath, path_unknown: 0 });

describe('the critical path for an agent', () => {
  const answer: CriticalPathAnswer = {
    duration_seconds: 300,
    final: true,
    path: [
      {
        job_id: 1,
        name: 'build',
        stage: 'build',
        pipeline_id: 5,
        blocked_by: null,
        waiting_for: 'gitlab',
        delay_seconds: 0,
        queue_seconds: 5,
        duration_seconds: 65,
        attempts: 1,
        runner_spans: true,
        parts: parts({ step_script: 60 }),
      },
      {
        job_id: 2,
        name: 'deploy',
        stage: 'deploy',
        pipeline_id: 5,
        blocked_by: 1,
        waiting_for: 'manual',
        delay_seconds: 200,
        queue_seconds: 5,
        duration_seconds: 35,
        attempts: 1,
        runner_spans: true,
        parts: parts({ step_script: 30 }),
      },
    ],
    totals: { delay: 0, manual_wait: 200, retry_wait: 0, delayed_wait: 0, resource_wait: 0, queue: 10, ...parts({ step_script: 90 }) },
    slack: [
      { job_id: 3, name: 'lint', slack_seconds: 10 },
      { job_id: 4, name: 'docs', slack_seconds: 50 },
    ],
  };

  it("names the largest part of one job's time first, a person's wait for what it is", () => {
    const shaped = page(criticalPathAnswer(answer));
    expect(Object.keys(shaped)[0]).toBe('longest');
    expect(shaped.longest).toEqual({ job: 'deploy', job_id: 2, stage: 'deploy', part: 'manual', seconds: 200 });
    expect(shaped.totals).toEqual([
      { part: 'manual', seconds: 200 },
      { part: 'step_script', seconds: 90 },
      { part: 'queue', seconds: 10 },
    ]);
    expect((shaped.path as Array<{ job: string; position: number }>).map((job) => [job.job, job.position])).toEqual([
      ['deploy', 2],
      ['build', 1],
    ]);
    expect((shaped.slack as Array<{ job: string }>).map((job) => job.job)).toEqual(['docs', 'lint']);
    expect(criticalPathOutput.safeParse(shaped).success).toBe(true);
  });

  it('says there is no longest part for a pipeline with no path yet', () => {
    const shaped = page(
      criticalPathAnswer({ ...answer, duration_seconds: 0, path: [], slack: [], totals: { ...answer.totals, manual_wait: 0, queue: 0, step_script: 0 } }),
    );
    expect(shaped).toMatchObject({ longest: null, path: [], totals: [], next_cursor: null });
    expect(criticalPathOutput.safeParse(shaped).success).toBe(true);
  });
});

describe('a comparison for an agent', () => {
  const comparison = (contributions: Partial<Record<string, number>>, jobs: PipelineComparison['jobs']): PipelineComparison => ({
    pipeline_id: 20,
    baseline: { pipeline_id: 2, description: 'the median of 20' },
    paths_known: true,
    critical_path_seconds: { target: 300, baseline: 240 },
    duration_delta_seconds: Object.values(contributions).reduce((total: number, value) => total + (value ?? 0), 0),
    contributions: {
      delay: 0,
      manual: 0,
      retry: 0,
      delayed: 0,
      resource: 0,
      queue: 0,
      ...parts(),
      path_moved: 0,
      ...contributions,
    } as PipelineComparison['contributions'],
    jobs,
    added: [],
    gone: [],
    pipelines: 21,
  });
  const job = (name: string, delta: number, target: boolean, baseline = target) => ({
    name,
    stage: name === 'build' ? 'build' : 'test',
    delta_seconds: delta,
    target_seconds: 100 + delta,
    baseline_seconds: 100,
    on_critical_path: { target, baseline },
  });

  it('gives as cause the part with most seconds either way, pinned to the path job that changed that way most', () => {
    const shaped = page(
      compareAnswer(comparison({ restore_cache: 60, step_script: -8 }, [job('lint', 90, false), job('build', -8, true), job('test', 61, true)])),
    );
    expect(Object.keys(shaped)[0]).toBe('cause');
    // lint changed more, but off the path: it held nothing up.
    expect(shaped.cause).toEqual({ part: 'restore_cache', job: 'test', stage: 'test', seconds: 60 });
    expect(shaped.contributions).toEqual([
      { part: 'restore_cache', seconds: 60 },
      { part: 'step_script', seconds: -8 },
    ]);
    expect((shaped.jobs as Array<{ job: string }>).map((entry) => entry.job)).toEqual(['lint', 'test', 'build']);
    expect(compareOutput.safeParse(shaped).success).toBe(true);
  });

  it('pins a faster pipeline to the job that got faster, and a moved path to the job that became critical', () => {
    expect(page(compareAnswer(comparison({ queue: -30, step_script: 5 }, [job('test', 5, true), job('build', -31, true)]))).cause).toEqual({
      part: 'queue',
      job: 'build',
      stage: 'build',
      seconds: -30,
    });
    expect(page(compareAnswer(comparison({ path_moved: 40 }, [job('test', 50, true), job('build', 45, true, false)]))).cause).toMatchObject({
      part: 'path_moved',
      job: 'build',
    });
  });

  it('has no cause when nothing changed', () => {
    const shaped = page(compareAnswer(comparison({}, [])));
    expect(shaped.cause).toBeNull();
    expect(compareOutput.safeParse(shaped).success).toBe(true);
  });
});

describe('regressions, waste, queues, a what-if and the slowest jobs for an agent', () => {
  const point = (job: string | null, part: string, before: number, after: number, first: number) => ({
    job,
    stage: job === null ? null : 'test',
    part: part as Regressions['change_points'][number]['part'],
    before_seconds: before,
    after_seconds: after,
    first_pipeline_id: first,
    first_sha: 'abcdef0123456789',
    first_ref: 'main',
    first_seen_at: '2026-11-25T10:00:00.000Z',
    confidence: 0.99,
    pipelines: 30,
  });

  it('lists the steps up, largest first, and only counts the steps down', () => {
    const answer = {
      from: 'a',
      to: 'b',
      ref: 'main',
      change_points: [point('test', 'restore_cache', 10, 70, 15), point(null, 'critical_path', 300, 200, 9), point('build', 'step_script', 40, 45, 12)],
      pipelines: 30,
      series: { tested: 12, too_short: 0 },
      false_alarm_rate: 0.01,
      method: 'binary segmentation',
    };
    const shaped = page(regressionsAnswer(answer));
    expect(shaped.largest).toMatchObject({ job: 'test', part: 'restore_cache', change_seconds: 60, first_pipeline_id: 15 });
    expect(shaped).toMatchObject({ pipelines_considered: 30, speedups: 1, regressions_total: 2 });
    expect(regressionsOutput.safeParse(shaped).success).toBe(true);
    expect(page(regressionsAnswer({ ...answer, change_points: [point(null, 'critical_path', 300, 200, 9)] })).largest).toBeNull();
    // The whole path stepped up more than any stage (it carries the stage's step and noise): the stage is named.
    const withPath = page(regressionsAnswer({ ...answer, change_points: [point(null, 'critical_path', 190, 255, 15), ...answer.change_points] }));
    expect(withPath.largest).toMatchObject({ job: 'test', part: 'restore_cache' });
    expect((withPath.regressions as Array<{ part: string }>)[0].part).toBe('critical_path');
    expect(page(regressionsAnswer({ ...answer, change_points: [point(null, 'critical_path', 190, 255, 15)] })).largest).toMatchObject({
      part: 'critical_path',
    });
  });

  it('names the one job and kind of waste with most seconds, queue wait summed over tag sets', () => {
    const jobWaste = (name: string, retry: number, cache: number, queues: number[]) => ({
      name,
      runs: 30,
      pipelines: 30,
      runner_seconds: split(3000),
      retry_seconds: split(retry),
      flaky: { commits: retry > 0 ? 1 : 0, runs: retry > 0 ? 1 : 0, runner_seconds: split(retry) },
      cache_seconds: split(cache, cache),
      cache_hits: 29,
      cache_misses: 1,
      inferred: false,
      queue_seconds: queues.map((seconds, index) => ({ tags: `tags-${index}`, seconds: split(seconds) })),
    });
    const ledger: WasteLedger & { from: string; to: string } = {
      from: 'a',
      to: 'b',
      pipelines: 30,
      jobs: [jobWaste('test', 41, 300, [90]), jobWaste('build', 0, 10, [200, 250])],
      totals: {
        runner_seconds: split(6000),
        retry_seconds: split(41),
        flaky_runner_seconds: split(41),
        cache_seconds: split(310, 310),
        queue_seconds: split(540),
        cache_hits: 58,
        cache_misses: 2,
      },
    };
    const shaped = page(wasteAnswer(ledger));
    expect(shaped.largest).toEqual({ job: 'build', kind: 'queue', seconds: 450 });
    expect((shaped.jobs as Array<{ job: string; queue_tags: string }>).map((job) => [job.job, job.queue_tags])).toEqual([
      ['test', 'tags-0'],
      ['build', 'tags-1'],
    ]);
    expect(shaped).toMatchObject({ pipelines_considered: 30, totals: { on_critical_path_seconds: 310 } });
    expect(wasteOutput.safeParse(shaped).success).toBe(true);
    expect(page(wasteAnswer({ ...ledger, jobs: [] })).largest).toBeNull();
  });

  it('names the tag set with the longest p95 wait, and its worst hour', () => {
    const bucket = (start: string, p95: number) => ({ start, jobs: 3, pipelines: 3, queue_seconds: { p50: 1, p95 }, max_waiting: 1 });
    const queue: RunnerQueue = {
      from: 'a',
      to: 'b',
      bucket: 'hour',
      pipelines: 30,
      tag_sets: [
        { tags: 'deploy', jobs: 30, pipelines: 30, queue_seconds: { p50: 2, p95: 3 }, max_waiting: 1, buckets: [bucket('h1', 3)] },
        { tags: 'docker,linux', jobs: 90, pipelines: 30, queue_seconds: { p50: 3, p95: 40 }, max_waiting: 4, buckets: [bucket('h1', 5), bucket('h2', 80)] },
      ],
    };
    const shaped = page(runnerQueueAnswer(queue));
    expect(shaped.longest_wait).toEqual({ tags: 'docker,linux', p95_seconds: 40, p50_seconds: 3, jobs: 90 });
    expect((shaped.tag_sets as Array<{ worst_bucket: unknown }>)[0].worst_bucket).toEqual({ start: 'h2', p95_seconds: 80 });
    expect(runnerQueueOutput.safeParse(shaped).success).toBe(true);
  });

  it("states a what-if's effect on the p95 wait, and the pipelines that change most first", () => {
    const q = (p50: number, p95: number) => ({ p50, p95 });
    const change = (id: number, seconds: number) => ({
      pipeline_id: id,
      critical_path_seconds: { before: 300, after: 300 + seconds },
      change_seconds: seconds,
    });
    const answer: WhatIf & { from: string; to: string } = {
      from: 'a',
      to: 'b',
      tags: 'docker,linux',
      runners_added: 2,
      concurrency: { runners: 1, identified: true, max_running: 1, fit_error_seconds: 0.5, pickup_latency_seconds: 1 },
      jobs: 90,
      pipelines: 30,
      sampled: false,
      queue_seconds: { recorded: q(3, 40), before: q(3, 41), after: q(1, 2) },
      critical_path_seconds: { before: q(300, 400), after: q(290, 310) },
      affected_pipelines: 2,
      changed_pipelines: [change(1, -5), change(2, -38)],
    };
    const shaped = page(whatIfAnswer(answer));
    expect(shaped.effect).toEqual({ tags: 'docker,linux', runners_added: 2, queue_p95_before_seconds: 41, queue_p95_after_seconds: 2 });
    expect((shaped.changed_pipelines as Array<{ pipeline_id: number }>).map((entry) => entry.pipeline_id)).toEqual([2, 1]);
    expect(whatIfOutput.safeParse(shaped).success).toBe(true);
  });

  it('lists the jobs slowest p95 first', () => {
    const summary = (name: string, p95: number) => ({
      name,
      runs: 10,
      failures: 1,
      retries: 0,
      duration_seconds: { p50: p95 / 2, p95 },
      queue_seconds: { p50: 1, p95: 2 },
      critical_path: { share: 0.5, p50_seconds: 10 },
    });
    const answer: JobsAnswer = { from: 'a', to: 'b', ref: null, jobs: [summary('lint', 20), summary('test', 120), summary('build', 45)] };
    const shaped = page(slowestJobsAnswer(answer));
    expect(shaped.slowest).toEqual({ job: 'test', stage: null, p95_seconds: 120 });
    expect((shaped.jobs as Array<{ job: string }>).map((job) => job.job)).toEqual(['test', 'build', 'lint']);
    expect(slowestJobsOutput.safeParse(shaped).success).toBe(true);
  });
});

describe("a job's trace, summarised", () => {
  const at = (seconds: number) => String(BigInt(1_800_000_000 + seconds) * 1_000_000_000n);
  const span = (spanId: string, parentSpanId: string, name: string, start: number, end: number, extra: Record<string, unknown> = {}) => ({
    traceId: '5b8efff798038103d269b633813fc60c',
    spanId,
    parentSpanId,
    name,
    startTimeUnixNano: at(start),
    endTimeUnixNano: at(end),
    ...extra,
  });
  const answer: TraceAnswer = {
    trace: {
      resourceSpans: [
        {
          resource: { attributes: [] },
          scopeSpans: [
            {
              spans: [
                span('a1', 'p1', 'job', 0, 100, {
                  attributes: [
                    { key: 'cicd.pipeline.task.name', value: { stringValue: 'test' } },
                    { key: 'ci.job.stage', value: { stringValue: 'test' } },
                    { key: 'ci.job.status', value: { stringValue: 'failed' } },
                    { key: 'ci.job.failure_reason', value: { stringValue: 'script_failure' } },
                  ],
                }),
                span('a2', 'a1', 'queue_wait', 0, 30),
                span('a3', 'a1', 'job_execution', 30, 100),
                span('a4', 'a3', 'restore_cache', 30, 50),
                span('a5', 'a3', 'step_script', 50, 95, { status: { code: 2, message: 'exit code 1' } }),
                span('a6', 'a5', 'rspec', 51, 94),
              ],
            },
          ],
        },
      ],
    },
    completeness: {
      spans: 6,
      total_spans: 6,
      truncated: false,
      roots: 0,
      missing_parents: 0,
      jobs_without_runner_spans: 0,
      final: true,
      sampling_reason: 'failed',
      adjusted_count: 1,
    },
  };

  it("names the runner's slowest stage first, then the job's outcome, its errors and its spans longest first", () => {
    const shaped = page(jobTraceAnswer(answer, 2));
    expect(Object.keys(shaped)[0]).toBe('slowest_stage');
    expect(shaped).toMatchObject({
      slowest_stage: { stage: 'step_script', seconds: 45 },
      job: 'test',
      job_id: 2,
      status: 'failed',
      failure_reason: 'script_failure',
      queue_seconds: 30,
      runner_stages: [
        { stage: 'step_script', seconds: 45 },
        { stage: 'restore_cache', seconds: 20 },
      ],
      errors: [{ span: 'step_script', span_id: 'a5', message: 'exit code 1' }],
      spans_total: 6,
    });
    expect((shaped.spans as Array<{ name: string; start_offset_seconds: number }>).slice(0, 2)).toEqual([
      expect.objectContaining({ name: 'job', start_offset_seconds: 0 }),
      expect.objectContaining({ name: 'job_execution', start_offset_seconds: 30 }),
    ]);
    expect(jobTraceOutput.safeParse(shaped).success).toBe(true);
  });
});
