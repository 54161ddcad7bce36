import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { criticalPath, RUNNER_PARTS } from '../critical-path/critical-path';
import { JobRunRow, runMs } from './job-run';
import { jobRunsOfTrace, runnerTagsOf } from './job-runs-of-trace';

/**
 * SPEC §13: the rows of a trace, one per job attempt, from the control plane's spans (the real span model) and those
 * GitLab Runner exports (test/helpers/pipeline-trace.ts). Times are seconds after the root pipeline was created.
 */

const PROJECT = 7;
const SHA = 'bcbb5ec396a2c0f828686f14fac9b80b780504f2';

const byJob = (rows: readonly JobRunRow[]) => new Map(rows.map((row) => [row.jobId, row]));

/** Whatever the trace: the rows on the path add up to the path's duration exactly, in whole milliseconds. */
function expectOnPathSumsToPath(trace: PipelineTrace, rows: readonly JobRunRow[]): void {
  const path = criticalPath(trace.spans())!;
  const onPath = rows.filter((row) => row.onCriticalPath === true);
  expect(onPath.map((row) => row.jobId).sort()).toEqual(path.path.map((element) => element.job_id).sort());
  const sum = onPath.reduce((total, row) => total + row.waitMs + row.queueMs + runMs(row), 0);
  expect(sum).toBe(Math.round(path.duration_seconds * 1000));
  for (const row of rows) expect(runMs(row)).toBe(row.finishedAt! - row.startedAt!);
}

describe('the rows of job runs of a trace (SPEC §13)', () => {
  it("gives each job its pipeline's facts, GitLab's wait and queue, the runner's stages, its runner and tags, path and slack", () => {
    const trace = new PipelineTrace(PROJECT, 500)
      .job({
        jobId: 1,
        name: 'build',
        createdAt: -2,
        queuedAt: 0,
        pickedUpAt: 5,
        finishedAt: 61,
        runner: { id: 42, type: 'instance_type', tags: ['linux', 'docker', 'arm64'] },
        stages: [
          ['prepare_executor', 8],
          ['get_sources', 5],
          ['restore_cache', 4],
          ['step_script', 30],
          ['archive_cache', 3],
          ['upload_artifacts_on_success', 2],
        ],
      })
      .job({ jobId: 2, name: 'unit', stage: 'test', queuedAt: 62, pickedUpAt: 70, finishedAt: 100 })
      .job({ jobId: 3, name: 'lint', stage: 'test', status: 'failed', allowFailure: true, queuedAt: 63, pickedUpAt: 64, finishedAt: 80 })
      .pipeline(500, { status: 'success', finishedAt: 101, ref: 'main', sha: SHA, source: 'push' });
    const rows = jobRunsOfTrace(trace.spans(), PROJECT);
    const jobs = byJob(rows);

    expect(rows.map((row) => row.jobId)).toEqual([1, 2, 3]);
    expect(jobs.get(1)).toEqual({
      projectId: PROJECT,
      pipelineId: 500,
      rootPipelineId: 500,
      ref: 'main',
      sha: SHA,
      source: 'push',
      pipelineCreatedAt: trace.at(0),
      pipelineFinishedAt: trace.at(101),
      pipelineStatus: 'success',
      jobId: 1,
      name: 'build',
      stage: 'build',
      attempt: 1,
      retried: false,
      status: 'success',
      failureReason: null,
      allowFailure: false,
      runnerId: 42,
      runnerType: 'instance_type',
      runnerTags: 'arm64,docker,linux',
      createdAt: trace.at(-2),
      pendingAt: trace.at(0),
      startedAt: trace.at(5),
      finishedAt: trace.at(61),
      waitMs: 0,
      waitingFor: 'gitlab',
      queueMs: 5000,
      // The runner's job_execution ended at 57, GitLab's job at 61: the rest is `other`.
      partsMs: {
        prepare_executor: 8000,
        pull_image: 0,
        get_sources: 5000,
        restore_cache: 4000,
        step_script: 30000,
        after_script: 0,
        archive_cache: 3000,
        upload_artifacts: 2000,
        other: 4000,
      },
      runnerSpans: true,
      cacheResult: null,
      onCriticalPath: true,
      slackMs: 0,
      adjustedCount: 1,
    });
    // unit is on the path after build: 1 s of GitLab's delay, 8 s in the queue.
    expect(jobs.get(2)).toMatchObject({ onCriticalPath: true, slackMs: 0, waitMs: 1000, waitingFor: 'gitlab', queueMs: 8000, runnerTags: '' });
    // lint waited for build too, 2 s; off the path, with 20 s to spare before the pipeline's end.
    expect(jobs.get(3)).toMatchObject({
      onCriticalPath: false,
      slackMs: 20_000,
      waitMs: 2000,
      queueMs: 1000,
      status: 'failed',
      failureReason: 'script_failure',
      allowFailure: true,
    });
    expectOnPathSumsToPath(trace, rows);
  });

  it('a retried job: one row per attempt, numbered, the earlier superseded, the wait before the retry a retry wait', () => {
    const trace = new PipelineTrace(PROJECT, 507)
      .job({ jobId: 70, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 71, name: 'test', status: 'failed', queuedAt: 31, pickedUpAt: 32, finishedAt: 60 })
      .job({ jobId: 72, name: 'test', retriesCount: 1, queuedAt: 70, pickedUpAt: 71, finishedAt: 100 })
      .job({ jobId: 73, name: 'deploy', queuedAt: 101, pickedUpAt: 102, finishedAt: 120 })
      .pipeline(507, { status: 'success', finishedAt: 121 });
    const rows = jobRunsOfTrace(trace.spans(), PROJECT);

    expect(rows.map((row) => [row.jobId, row.name, row.attempt, row.retried, row.status])).toEqual([
      [70, 'build', 1, false, 'success'],
      [71, 'test', 1, true, 'failed'],
      [72, 'test', 2, false, 'success'],
      [73, 'deploy', 1, false, 'success'],
    ]);
    expect(byJob(rows).get(72)).toMatchObject({ waitingFor: 'retry', waitMs: 10_000, onCriticalPath: true });
    expectOnPathSumsToPath(trace, rows);
  });

  it('a manual job played an hour later: its wait is a manual wait, and a pipeline reopened by it has no path until it ends again', () => {
    const played = () =>
      new PipelineTrace(PROJECT, 508)
        .job({ jobId: 80, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
        .job({ jobId: 81, name: 'unit', queuedAt: 31, pickedUpAt: 32, finishedAt: 40 })
        .job({ jobId: 82, name: 'deploy', manual: true, queuedAt: 3630, pickedUpAt: 3631, finishedAt: 3650 });
    const ended = played().pipeline(508, { status: 'success', finishedAt: 3651 });
    const rows = jobRunsOfTrace(ended.spans(), PROJECT);
    expect(byJob(rows).get(82)).toMatchObject({ waitingFor: 'manual', waitMs: 3_590_000, queueMs: 1000, onCriticalPath: true });
    expectOnPathSumsToPath(ended, rows);

    // GitLab reopened the pipeline when deploy was played: its span's newer version says running, and has no end yet.
    const reopened = played()
      .pipeline(508, { status: 'success', finishedAt: 41 })
      .push(played().pipelineSpan(508, { status: 'running', finishedAt: 41 }).resourceSpans);
    const running = jobRunsOfTrace(reopened.spans(), PROJECT);
    expect(running.map((row) => [row.jobId, row.pipelineStatus, row.pipelineFinishedAt, row.onCriticalPath, row.slackMs])).toEqual([
      [80, 'running', null, null, null],
      [81, 'running', null, null, null],
      [82, 'running', null, null, null],
    ]);
    // What a job waited for is known as soon as it became pending.
    expect(byJob(running).get(82)).toMatchObject({ waitingFor: 'manual', waitMs: 3_590_000 });
  });

  it("a child pipeline: its jobs are rows of their own pipeline under the trace's root, its first blocked by what blocked the bridge", () => {
    const trace = new PipelineTrace(PROJECT, 505)
      .job({ jobId: 50, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .bridge(51, 505, 506, { createdAt: 31, finishedAt: 90 })
      .job({ jobId: 60, name: 'compile', pipelineId: 506, queuedAt: 33, pickedUpAt: 35, finishedAt: 60 })
      .job({ jobId: 61, name: 'child-test', pipelineId: 506, queuedAt: 61, pickedUpAt: 62, finishedAt: 88 })
      .job({ jobId: 62, name: 'child-lint', pipelineId: 506, queuedAt: 61, pickedUpAt: 62, finishedAt: 70 })
      .pipeline(506, { status: 'success', createdAt: 31, finishedAt: 90, source: 'parent_pipeline' }, 51)
      .job({ jobId: 52, name: 'deploy', queuedAt: 91, pickedUpAt: 92, finishedAt: 110 })
      .pipeline(505, { status: 'success', finishedAt: 111, sha: SHA, source: 'push' });
    const rows = jobRunsOfTrace(trace.spans(), PROJECT);

    // The bridge is no job of a runner: no row.
    expect(rows.map((row) => [row.jobId, row.pipelineId, row.rootPipelineId, row.source, row.pipelineCreatedAt - trace.createdAt])).toEqual([
      [50, 505, 505, 'push', 0],
      [52, 505, 505, 'push', 0],
      [60, 506, 505, 'parent_pipeline', 31_000],
      [61, 506, 505, 'parent_pipeline', 31_000],
      [62, 506, 505, 'parent_pipeline', 31_000],
    ]);
    const jobs = byJob(rows);
    expect(jobs.get(60)).toMatchObject({ waitMs: 3000, onCriticalPath: true });
    expect(jobs.get(62)).toMatchObject({ waitMs: 1000, onCriticalPath: false, slackMs: 18_000 });
    expectOnPathSumsToPath(trace, rows);
  });

  it("another project's spans in the trace are never rows of it, nor what its jobs waited for", () => {
    const own = () =>
      new PipelineTrace(PROJECT, 520)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 2, name: 'test', queuedAt: 30, pickedUpAt: 31, finishedAt: 40 })
        .pipeline(520, { status: 'success', finishedAt: 41 });
    // A job of project 8 naming this pipeline as its root, ending just before test became pending.
    const other = new PipelineTrace(8, 520).job({ jobId: 900, name: 'build', pipelineId: 900, queuedAt: 20, pickedUpAt: 21, finishedAt: 29 });
    const mixed = own();
    for (const resourceSpans of other.resourceSpans()) mixed.push(resourceSpans);

    const rows = jobRunsOfTrace(mixed.spans(), PROJECT);
    expect(rows).toEqual(jobRunsOfTrace(own().spans(), PROJECT));
    expect(rows.map((row) => row.jobId)).toEqual([1, 2]);
    expect(byJob(rows).get(2)).toMatchObject({ waitMs: 20_000 });
    expect(jobRunsOfTrace(mixed.spans(), 8).map((row) => [row.jobId, row.projectId])).toEqual([[900, 8]]);
  });

  it('leaves out jobs GitLab never named, and a trace with no ended job has no rows', () => {
    const trace = new PipelineTrace(PROJECT, 530)
      .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
      // Still running: its queue wait only.
      .job({ jobId: 2, name: 'test', queuedAt: 11, pickedUpAt: 12 });
    expect(jobRunsOfTrace(trace.spans(), PROJECT).map((row) => [row.jobId, row.onCriticalPath, row.pipelineFinishedAt])).toEqual([[1, null, null]]);
    expect(jobRunsOfTrace(new PipelineTrace(PROJECT, 531).job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1 }).spans(), PROJECT)).toEqual([]);
  });

  it("weighs a head-sampled pipeline's rows by its adjusted count", () => {
    const trace = new PipelineTrace(PROJECT, 540, undefined, 'ot=th:e666666666666')
      .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
      .pipeline(540, { status: 'success', finishedAt: 11 });
    expect(jobRunsOfTrace(trace.spans(), PROJECT)[0].adjustedCount).toBeCloseTo(10, 9);
  });

  it("reads a runner's tags as stored, and nothing from what is not a list of them", () => {
    expect(runnerTagsOf('["linux","arm64","linux"]')).toBe('arm64,linux');
    expect(runnerTagsOf('[]')).toBe('');
    for (const odd of [undefined, 42, 'docker', '[not json', '{"a":1}']) expect(runnerTagsOf(odd)).toBe('');
  });

  it('splits every run by the same parts the critical path knows', () => {
    const trace = new PipelineTrace(PROJECT, 550).job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 });
    const [row] = jobRunsOfTrace(trace.pipeline(550, { status: 'success', finishedAt: 11 }).spans(), PROJECT);
    expect(Object.keys(row.partsMs).sort()).toEqual([...RUNNER_PARTS].sort());
  });
});
