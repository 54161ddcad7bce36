import { PipelineTrace, SCRIPT_ONLY } from '../../test/helpers/pipeline-trace';
import { CriticalPath, criticalPath, PathElement, RUNNER_PARTS } from './critical-path';

/**
 * SPEC §12: the critical path of pipelines whose spans are those the control plane emits (the real span model)
 * and those GitLab Runner exports. Times are seconds after the pipeline was created.
 */

const PROJECT = 7;

function pathOf(trace: PipelineTrace): CriticalPath {
  const found = criticalPath(trace.spans());
  if (found === null) throw new Error('no critical path');
  // Whatever the pipeline, the parts add up to the path's time: nothing counted twice, nothing left out.
  const sum = Object.values(found.totals).reduce((total, seconds) => total + seconds, 0);
  expect(sum).toBeCloseTo(found.duration_seconds, 6);
  for (const element of found.path) {
    const run = RUNNER_PARTS.reduce((total, part) => total + element.parts[part], 0);
    expect(element.queue_seconds + run).toBeCloseTo(element.duration_seconds, 6);
  }
  return found;
}

const summary = (path: readonly PathElement[]) =>
  path.map((element) => [element.job_id, element.blocked_by, element.waiting_for, element.delay_seconds, element.queue_seconds]);
const slackOf = (found: CriticalPath) => Object.fromEntries(found.slack.map((entry) => [entry.name, entry.slack_seconds]));

describe('the critical path of a pipeline (SPEC §12)', () => {
  it('stages in sequence: every job is on it, each blocked by the one before, its time split into delay, queue and the runner stages', () => {
    const trace = new PipelineTrace(PROJECT, 500)
      .job({
        jobId: 1,
        name: 'build',
        queuedAt: 0,
        pickedUpAt: 5,
        finishedAt: 61,
        // GitLab Runner's own stage names: prepare_script is part of preparing, the on-success upload an upload.
        stages: [
          ['prepare_executor', 8],
          ['prepare_script', 2],
          ['get_sources', 5],
          ['restore_cache', 4],
          ['step_script', 30],
          ['archive_cache', 3],
          ['upload_artifacts_on_success', 2],
          ['cleanup_file_variables', 1],
        ],
      })
      .job({ jobId: 2, name: 'test', queuedAt: 62, pickedUpAt: 70, finishedAt: 100 })
      .job({ jobId: 3, name: 'deploy', queuedAt: 101, pickedUpAt: 103, finishedAt: 123 })
      .pipeline(500, { status: 'success', finishedAt: 124 });
    const found = pathOf(trace);

    expect(summary(found.path)).toEqual([
      [1, null, 'gitlab', 0, 5],
      [2, 1, 'gitlab', 1, 8],
      [3, 2, 'gitlab', 1, 2],
    ]);
    expect(found.path[0]).toMatchObject({ name: 'build', stage: 'build', pipeline_id: 500, duration_seconds: 61, attempts: 1, runner_spans: true });
    // The runner's job_execution ended at 60, GitLab's job at 61: that second, and cleanup, are `other`.
    expect(found.path[0].parts).toEqual({
      prepare_executor: 10,
      pull_image: 0,
      get_sources: 5,
      restore_cache: 4,
      step_script: 30,
      after_script: 0,
      archive_cache: 3,
      upload_artifacts: 2,
      other: 2,
    });
    expect(found.duration_seconds).toBe(123);
    expect(found.totals).toMatchObject({ delay: 2, queue: 15, step_script: 30 + 30 + 20, manual_wait: 0, retry_wait: 0 });
    expect(found.slack).toEqual([]);
  });

  it('parallel jobs of different lengths: the longer is on the path, the shorter has the difference as slack', () => {
    const trace = new PipelineTrace(PROJECT, 501)
      .job({ jobId: 10, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 20 })
      .job({ jobId: 11, name: 'unit', stage: 'test', queuedAt: 21, pickedUpAt: 22, finishedAt: 82 })
      .job({ jobId: 12, name: 'lint', stage: 'test', queuedAt: 21, pickedUpAt: 22, finishedAt: 32 })
      .job({ jobId: 13, name: 'deploy', queuedAt: 83, pickedUpAt: 84, finishedAt: 90 })
      .pipeline(501, { status: 'success', finishedAt: 91 });
    const found = pathOf(trace);

    expect(found.path.map((element) => element.name)).toEqual(['build', 'unit', 'deploy']);
    expect(found.path[2].blocked_by).toBe(11);
    expect(found.slack).toEqual([{ job_id: 12, name: 'lint', slack_seconds: 50 }]);
  });

  it('a job that waited for a runner: the wait is on the path as queue, not as the job running', () => {
    const trace = new PipelineTrace(PROJECT, 502)
      .job({ jobId: 20, name: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: 30 })
      .job({ jobId: 21, name: 'gpu-test', stage: 'test', queuedAt: 31, pickedUpAt: 151, finishedAt: 181 })
      .pipeline(502, { status: 'success', finishedAt: 182 });
    const found = pathOf(trace);

    expect(found.path[1]).toMatchObject({ job_id: 21, queue_seconds: 120, duration_seconds: 150, delay_seconds: 1 });
    expect(found.path[1].parts.step_script).toBe(30);
    expect(found.totals.queue).toBe(122);
  });

  it("GitLab's delay between the blocker's end and the job pending is the delay, named as GitLab's", () => {
    const trace = new PipelineTrace(PROJECT, 503)
      .job({ jobId: 30, name: 'build', queuedAt: 3, pickedUpAt: 4, finishedAt: 20 })
      .job({ jobId: 31, name: 'test', queuedAt: 27, pickedUpAt: 28, finishedAt: 40 })
      .pipeline(503, { status: 'success', finishedAt: 41 });
    const found = pathOf(trace);

    // 3 s from the pipeline's creation to the first job pending, 7 s after build ended.
    expect(summary(found.path)).toEqual([
      [30, null, 'gitlab', 3, 1],
      [31, 30, 'gitlab', 7, 1],
    ]);
    expect(found.totals.delay).toBe(10);
  });

  it('needs: that skip a stage: timing decides, so a job pending right after its need is blocked by it, not by the stage before', () => {
    const trace = new PipelineTrace(PROJECT, 504)
      .job({ jobId: 40, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      // stage test, slow; package (stage deploy) needs only build and starts before test ends.
      .job({ jobId: 41, name: 'test', queuedAt: 31, pickedUpAt: 32, finishedAt: 100 })
      .job({ jobId: 42, name: 'package', stage: 'deploy', queuedAt: 31, pickedUpAt: 33, finishedAt: 150 })
      .pipeline(504, { status: 'success', finishedAt: 151 });
    const found = pathOf(trace);

    expect(found.path.map((element) => [element.name, element.blocked_by])).toEqual([
      ['build', null],
      ['package', 40],
    ]);
    expect(slackOf(found)).toEqual({ test: 50 });
  });

  it('a child pipeline through its bridge: its jobs are on the path, its first blocked by what blocked the bridge', () => {
    const trace = new PipelineTrace(PROJECT, 505)
      .job({ jobId: 50, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .bridge(51, 505, 506, { createdAt: 31, finishedAt: 90 })
      .job({ jobId: 60, name: 'compile', pipelineId: 506, queuedAt: 33, pickedUpAt: 35, finishedAt: 60 })
      .job({ jobId: 61, name: 'child-test', pipelineId: 506, queuedAt: 61, pickedUpAt: 62, finishedAt: 88 })
      .job({ jobId: 62, name: 'child-lint', pipelineId: 506, queuedAt: 61, pickedUpAt: 62, finishedAt: 70 })
      .pipeline(506, { status: 'success', createdAt: 31, finishedAt: 90 }, 51)
      .job({ jobId: 52, name: 'deploy', queuedAt: 91, pickedUpAt: 92, finishedAt: 110 })
      .pipeline(505, { status: 'success', finishedAt: 111 });
    const found = pathOf(trace);

    expect(found.path.map((element) => [element.job_id, element.pipeline_id, element.blocked_by])).toEqual([
      [50, 505, null],
      [60, 506, 50],
      [61, 506, 60],
      [52, 505, 61],
    ]);
    expect(found.path[1].delay_seconds).toBe(3);
    expect(found.path[3].delay_seconds).toBe(3);
    // The bridge is no job of its own: it is not listed with slack; the child's short job is.
    expect(found.slack).toEqual([{ job_id: 62, name: 'child-lint', slack_seconds: 18 }]);
    expect(found.duration_seconds).toBe(110);
  });

  it('a job retried to success: both attempts are jobs, the earlier one the blocker of the retry, the wait between them a retry', () => {
    const trace = new PipelineTrace(PROJECT, 507)
      .job({ jobId: 70, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 71, name: 'test', status: 'failed', queuedAt: 31, pickedUpAt: 32, finishedAt: 60 })
      .job({ jobId: 72, name: 'test', queuedAt: 70, pickedUpAt: 71, finishedAt: 100 })
      .job({ jobId: 73, name: 'deploy', queuedAt: 101, pickedUpAt: 102, finishedAt: 120 })
      .pipeline(507, { status: 'success', finishedAt: 121 });
    const found = pathOf(trace);

    expect(summary(found.path)).toEqual([
      [70, null, 'gitlab', 0, 1],
      [71, 70, 'gitlab', 1, 1],
      [72, 71, 'retry', 10, 1],
      [73, 72, 'gitlab', 1, 1],
    ]);
    expect(found.path.map((element) => element.attempts)).toEqual([1, 1, 2, 1]);
    expect(found.totals).toMatchObject({ retry_wait: 10, delay: 2 });
    expect(found.slack).toEqual([]);
  });

  it('a manual job played an hour later: the wait before it is a manual wait, not GitLab delaying the pipeline', () => {
    const trace = new PipelineTrace(PROJECT, 508)
      .job({ jobId: 80, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 81, name: 'deploy', manual: true, queuedAt: 3630, pickedUpAt: 3631, finishedAt: 3650 })
      .pipeline(508, { status: 'success', finishedAt: 3651 });
    const found = pathOf(trace);

    expect(summary(found.path)).toEqual([
      [80, null, 'gitlab', 0, 1],
      [81, 80, 'manual', 3600, 1],
    ]);
    expect(found.totals).toMatchObject({ manual_wait: 3600, delay: 0 });
    // The pipeline ran for 30 + 20 s; the rest was waiting for a person.
    expect(found.duration_seconds - found.totals.manual_wait).toBe(50);
  });

  it('a pipeline still running: the path so far', () => {
    const trace = new PipelineTrace(PROJECT, 509)
      .job({ jobId: 90, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 91, name: 'test', queuedAt: 31, pickedUpAt: 33 });
    const found = pathOf(trace);

    expect(found.path.map((element) => element.job_id)).toEqual([90]);
  });

  it("a job whose runner's export never arrived: its run is GitLab's times, all `other`", () => {
    const trace = new PipelineTrace(PROJECT, 510)
      .job({ jobId: 100, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 101, name: 'test', queuedAt: 31, pickedUpAt: 35, finishedAt: 60, stages: null })
      .pipeline(510, { status: 'success', finishedAt: 61 });
    const found = pathOf(trace);

    expect(found.path[1]).toMatchObject({ job_id: 101, runner_spans: false, queue_seconds: 4, duration_seconds: 29 });
    expect(found.path[1].parts).toMatchObject({ other: 25, step_script: 0 });
  });

  it('a trace without any finished job has no path', () => {
    const trace = new PipelineTrace(PROJECT, 511).job({ jobId: 110, name: 'build', queuedAt: 0, pickedUpAt: 1 });
    expect(criticalPath(trace.spans())).toBeNull();
  });

  it('a long pipeline: every job accounted for once, on the path or with its slack', () => {
    const trace = new PipelineTrace(PROJECT, 512);
    let at = 0;
    let jobId = 1000;
    for (let stage = 0; stage < 20; stage++) {
      const jobs = Array.from({ length: 10 }, (_, i) => ({ jobId: jobId++, seconds: 10 + ((stage * 7 + i * 13) % 50) }));
      const end = at + 1 + Math.max(...jobs.map((job) => job.seconds));
      for (const job of jobs) {
        trace.job({
          jobId: job.jobId,
          name: `job-${job.jobId}`,
          stage: `stage-${stage}`,
          queuedAt: at + 1,
          pickedUpAt: at + 1,
          finishedAt: at + 1 + job.seconds,
          stages: SCRIPT_ONLY(job.seconds),
        });
      }
      at = end;
    }
    trace.pipeline(512, { status: 'success', finishedAt: at + 1 });
    const found = pathOf(trace);

    expect(found.path).toHaveLength(20);
    expect(found.path.length + found.slack.length).toBe(200);
    expect(found.duration_seconds).toBe(at);
    expect(found.slack.every((entry) => entry.slack_seconds >= 0)).toBe(true);
  });

  describe("true to GitLab's scheduling (issue 56)", () => {
    it("5a: a child pipeline without strategy: depend running past its parent is not on the parent's path, and the path does not change when it ends", () => {
      // build, then trigger (no depend: it succeeds as it creates the child) and deploy after it; the root ends at 20,
      // its child runs to 100.
      const atRootEnd = () =>
        new PipelineTrace(PROJECT, 530)
          .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
          .job({ jobId: 3, name: 'deploy', queuedAt: 11, pickedUpAt: 12, finishedAt: 19 })
          .job({ jobId: 60, name: 'child-build', pipelineId: 531, queuedAt: 12, pickedUpAt: 13, finishedAt: 18 })
          .pipeline(530, { status: 'success', finishedAt: 20 });
      const written = pathOf(atRootEnd());
      const later = atRootEnd()
        .job({ jobId: 61, name: 'child-test', pipelineId: 531, queuedAt: 19, pickedUpAt: 20, finishedAt: 100 })
        .bridge(2, 530, 531, { createdAt: 11, finishedAt: 100 })
        .pipeline(531, { status: 'success', createdAt: 11, finishedAt: 100 }, 2);
      const read = pathOf(later);

      expect(read.duration_seconds).toBe(19);
      expect(read.path.every((element) => element.pipeline_id === 530)).toBe(true);
      expect(read.path.map((element) => element.job_id)).toEqual([1, 3]);
      // The child's jobs are beside the path, with slack to their own pipeline's end.
      expect(read.slack.map((entry) => [entry.name, entry.slack_seconds])).toEqual([
        ['child-build', 0],
        ['child-test', 0],
      ]);
      // What the control plane wrote at the root's end (before the child's hook drew its bridge) is what is read
      // after the child ended.
      expect({ ...written, slack: [] }).toEqual({ ...read, slack: [] });
    });

    it('5a: a root whose only job triggered a child without depend, still running after the root ended, has no path through the child', () => {
      const trace = new PipelineTrace(PROJECT, 550)
        .pipeline(550, { status: 'success', finishedAt: 2 })
        .job({ jobId: 60, name: 'child-test', pipelineId: 551, queuedAt: 1, pickedUpAt: 2, finishedAt: 100 });
      expect(criticalPath(trace.spans())).toBeNull();
    });

    it('5a: a child with strategy: depend still holds its parent up through its bridge', () => {
      const trace = new PipelineTrace(PROJECT, 532)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .bridge(2, 532, 533, { createdAt: 11, finishedAt: 100 })
        .job({ jobId: 60, name: 'child-test', pipelineId: 533, queuedAt: 12, pickedUpAt: 13, finishedAt: 99 })
        .pipeline(533, { status: 'success', createdAt: 11, finishedAt: 100 }, 2)
        .job({ jobId: 3, name: 'deploy', queuedAt: 101, pickedUpAt: 102, finishedAt: 110 })
        .pipeline(532, { status: 'success', finishedAt: 111 });
      expect(pathOf(trace).path.map((element) => element.job_id)).toEqual([1, 60, 3]);
    });

    it("5b: a person retries an allowed-to-fail job 70 s after the last job ended: 70 s of retry wait, not GitLab's delay", () => {
      const trace = new PipelineTrace(PROJECT, 534)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 2, name: 'test', status: 'failed', queuedAt: 10, pickedUpAt: 11, finishedAt: 30 })
        .job({ jobId: 3, name: 'deploy', queuedAt: 30, pickedUpAt: 31, finishedAt: 50 })
        .job({ jobId: 4, name: 'test', queuedAt: 120, pickedUpAt: 121, finishedAt: 150, retriesCount: 1 })
        .pipeline(534, { status: 'success', finishedAt: 151 });
      const found = pathOf(trace);

      expect(found.path.at(-1)).toMatchObject({ job_id: 4, blocked_by: 3, waiting_for: 'retry', delay_seconds: 70, attempts: 2 });
      expect(found.totals).toMatchObject({ retry_wait: 70, delay: 0 });
    });

    it('5b: re-running an earlier job keeps its first attempt as the blocker of what it released: no delay GitLab never had', () => {
      const trace = new PipelineTrace(PROJECT, 535)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 2, name: 'test', queuedAt: 10, pickedUpAt: 11, finishedAt: 40 })
        // build is run again after the pipeline ended; the pipeline ends again.
        .job({ jobId: 3, name: 'build', queuedAt: 100, pickedUpAt: 101, finishedAt: 110 })
        .pipeline(535, { status: 'success', finishedAt: 111 });
      const found = pathOf(trace);

      expect(summary(found.path)).toEqual([
        [1, null, 'gitlab', 0, 1],
        [2, 1, 'gitlab', 0, 1],
        [3, 2, 'retry', 60, 1],
      ]);
      expect(found.totals).toMatchObject({ delay: 0, retry_wait: 60 });
    });

    it("5c: a when: delayed job (start_in 300) waits 300 s of delayed wait, not GitLab's delay", () => {
      const trace = new PipelineTrace(PROJECT, 536)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 2, name: 'rollout', when: 'delayed', queuedAt: 310, pickedUpAt: 311, finishedAt: 320 })
        .pipeline(536, { status: 'success', finishedAt: 321 });
      const found = pathOf(trace);

      expect(found.path[1]).toMatchObject({ job_id: 2, blocked_by: 1, waiting_for: 'delayed', delay_seconds: 300 });
      expect(found.totals).toMatchObject({ delayed_wait: 300, delay: 0 });
    });

    it('5c: a resource_group wait is a resource wait, not 210 s of delay blamed on an unrelated job', () => {
      // deploy's resource group is held by another pipeline's deploy until 220; lint, unrelated, ended at 10.
      const trace = new PipelineTrace(PROJECT, 537)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 9 })
        .job({ jobId: 2, name: 'lint', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 3, name: 'deploy', waitedForResource: true, queuedAt: 220, pickedUpAt: 221, finishedAt: 230 })
        .pipeline(537, { status: 'success', finishedAt: 231 });
      const found = pathOf(trace);

      expect(found.path.at(-1)).toMatchObject({ job_id: 3, waiting_for: 'resource', delay_seconds: 210 });
      expect(found.totals).toMatchObject({ resource_wait: 210, delay: 0 });
    });

    it("5c: without queued_at at pickup, GitLab's build_queued_duration is the queue wait, not GitLab's delay", () => {
      const trace = new PipelineTrace(PROJECT, 538)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .job({ jobId: 2, name: 'gpu-test', withoutQueuedAtAtPickup: true, queuedAt: 10, pickedUpAt: 130, finishedAt: 160 })
        .pipeline(538, { status: 'success', finishedAt: 161 });
      const found = pathOf(trace);

      expect(found.path[1]).toMatchObject({ job_id: 2, blocked_by: 1, waiting_for: 'gitlab', delay_seconds: 0, queue_seconds: 120 });
      expect(found.totals).toMatchObject({ delay: 0, queue: 121 });
    });

    it("the path never runs past the end of the pipeline it explains, whatever rounding GitLab's times had", () => {
      const trace = new PipelineTrace(PROJECT, 539)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10.6 })
        .pipeline(539, { status: 'success', finishedAt: 10 });
      const found = pathOf(trace);
      expect(found.duration_seconds).toBe(10);
    });
  });
});
