import { generatedProject, jobRunRow, partsOf } from '../../test/helpers/job-run-rows';
import { randomSource } from '../../test/helpers/seeded-random';
import { chooseBaseline, comparePipelines, CONTRIBUTIONS } from './compare';
import type { JobRunRow } from './job-run';
import { groupByPipeline, pathMs } from './pipeline-runs';

const millis = (value: number) => Math.round(value * 1000);

/** A small pipeline: a build job, then two test jobs of which `onPath` held it up. */
function pipeline(pipelineId: number, times: { build: number; a: number; b: number; onPath: 'a' | 'b' }): JobRunRow[] {
  const base = { pipelineId, rootPipelineId: pipelineId, pipelineCreatedAt: 0 };
  const build = jobRunRow({
    ...base,
    jobId: pipelineId * 10 + 1,
    name: 'build',
    stage: 'build',
    waitMs: 1000,
    queueMs: 2000,
    partsMs: partsOf({ step_script: times.build }),
  });
  const test = (name: 'a' | 'b', run: number, jobId: number) =>
    jobRunRow({
      ...base,
      jobId,
      name,
      stage: 'test',
      waitMs: 500,
      queueMs: 1000,
      partsMs: partsOf({ restore_cache: 2000, step_script: run }),
      onCriticalPath: times.onPath === name,
    });
  return [build, test('a', times.a, pipelineId * 10 + 2), test('b', times.b, pipelineId * 10 + 3)];
}

describe('compare a pipeline with a baseline (SPEC §13)', () => {
  it('splits the change in the critical path by part, to the millisecond, on generated pipelines', () => {
    // Seeds 1..20; each compares two pipelines of a generated project with retries and reruns.
    for (let seed = 1; seed <= 20; seed++) {
      const rows = generatedProject({ seed, pipelines: 12, retryRate: 0.2 });
      const pipelines = groupByPipeline(rows);
      const random = randomSource(seed);
      const target = pipelines[Math.floor(random() * pipelines.length)];
      const baseline = pipelines[Math.floor(random() * pipelines.length)];
      const answer = comparePipelines(target.rows, baseline.rows, 'chosen by the test');
      const summed = CONTRIBUTIONS.reduce((sum, part) => sum + millis(answer.contributions[part]), 0);
      // The generated pipeline's duration is its path's time, found independently of the rows' path flags.
      const expected = target.finishedAt! - target.createdAt - (baseline.finishedAt! - baseline.createdAt);
      expect({ seed, delta: millis(answer.duration_delta_seconds), summed }).toEqual({ seed, delta: expected, summed: expected });
      expect(answer.paths_known).toBe(true);
    }
  });

  it('attributes a +60 s restore_cache of the job holding the pipeline up to that job and stage', () => {
    // Seeds 1..20: the same pipeline drawn with and without the slowdown (the step draws no randomness).
    for (let seed = 1; seed <= 20; seed++) {
      const before = generatedProject({ seed, pipelines: 1, retryRate: 0 });
      const after = generatedProject({
        seed,
        pipelines: 1,
        retryRate: 0,
        firstPipelineId: 2000,
        step: { job: 'integration', part: 'restore_cache', fromPipeline: 0, addMs: 60000 },
      });
      const answer = comparePipelines(after, before, 'the same commit');
      expect(answer.duration_delta_seconds).toBe(60);
      expect(answer.contributions.restore_cache).toBe(60);
      expect(CONTRIBUTIONS.filter((part) => part !== 'restore_cache' && answer.contributions[part] !== 0)).toEqual([]);
      expect(answer.jobs[0]).toMatchObject({ name: 'integration', stage: 'test', delta_seconds: 60, on_critical_path: { target: true, baseline: true } });
      expect(answer.jobs.slice(1).every((job) => job.delta_seconds === 0)).toBe(true);
    }
  });

  it('counts a job that moved onto the path as path_moved, not as its stage', () => {
    const baseline = pipeline(1, { build: 10000, a: 100000, b: 80000, onPath: 'a' });
    const target = pipeline(2, { build: 15000, a: 100000, b: 150000, onPath: 'b' });
    const answer = comparePipelines(target, baseline, 'by hand');
    expect(answer.duration_delta_seconds).toBe(55);
    expect(answer.contributions).toMatchObject({ path_moved: 50, step_script: 5, restore_cache: 0, queue: 0, delay: 0 });
    expect(answer.jobs.map((job) => [job.name, job.delta_seconds, job.on_critical_path])).toEqual([
      ['b', 70, { target: true, baseline: false }],
      ['build', 5, { target: true, baseline: true }],
      ['a', 0, { target: false, baseline: true }],
    ]);
  });

  it('matches jobs by name and stage, never by id, and names the jobs added and gone', () => {
    const baseline = pipeline(1, { build: 10000, a: 100000, b: 80000, onPath: 'a' }).map((row) => (row.name === 'b' ? { ...row, name: 'old' } : row));
    const target = pipeline(2, { build: 10000, a: 100000, b: 80000, onPath: 'a' }).map((row) =>
      row.name === 'b' ? { ...row, name: 'new' } : row.name === 'a' ? { ...row, stage: 'verify' } : row,
    );
    const answer = comparePipelines(target, baseline, 'by hand');
    expect(answer.added).toEqual(['a', 'new']);
    expect(answer.gone).toEqual(['a', 'old']);
    // `a` moved to another stage: another job, so the path moved though its time did not change.
    expect(answer.duration_delta_seconds).toBe(0);
    expect(answer.contributions).toMatchObject({ path_moved: 0, step_script: 0 });
    expect(answer.jobs.find((job) => job.name === 'build')).toMatchObject({ delta_seconds: 0, on_critical_path: { target: true, baseline: true } });
  });

  it('names a retry for what it cost: the failed attempt on the path and the wait before its retry are retry, not its stages', () => {
    const baseline = pipeline(1, { build: 10000, a: 100000, b: 80000, onPath: 'a' });
    const failed = { ...baseline[1], pipelineId: 2, rootPipelineId: 2, jobId: 30, retried: true, status: 'failed' };
    const retry = { ...baseline[1], pipelineId: 2, rootPipelineId: 2, jobId: 31, attempt: 2, waitMs: 20000, waitingFor: 'retry' as const };
    const target = [...pipeline(2, { build: 10000, a: 100000, b: 80000, onPath: 'a' }).filter((row) => row.name !== 'a'), failed, retry];
    const answer = comparePipelines(target, baseline, 'by hand');
    // The failed attempt's queue (1 s) and run (102 s), and the 20 s before its retry; GitLab's delay before `a` and
    // the last attempt's stages are unchanged.
    expect(answer.duration_delta_seconds).toBe(123);
    expect(answer.contributions).toMatchObject({ retry: 123, delay: 0, queue: 0, restore_cache: 0, step_script: 0, path_moved: 0 });
    expect(answer.jobs[0]).toMatchObject({ name: 'a', delta_seconds: 123 });
  });

  it('refuses rows of no pipeline or of several', () => {
    const one = pipeline(1, { build: 1, a: 1, b: 1, onPath: 'a' });
    expect(() => comparePipelines([], one, '')).toThrow(RangeError);
    expect(() => comparePipelines([...one, ...pipeline(2, { build: 1, a: 1, b: 1, onPath: 'a' })], one, '')).toThrow(RangeError);
  });
});

describe('the default baseline', () => {
  const pipelines = groupByPipeline(generatedProject({ seed: 5, pipelines: 40 }));

  it('is the median critical path of the last 20 ended pipelines of the same ref and source before the target', () => {
    const target = pipelines[35];
    const choice = chooseBaseline(pipelines, target)!;
    const last20 = pipelines.slice(15, 35);
    const sorted = last20.map((candidate) => pathMs(candidate)!).sort((a, b) => a - b);
    const chosen = pipelines.find((candidate) => candidate.pipelineId === choice.pipelineId)!;
    expect(last20).toContain(chosen);
    // The lower median of 20: the 10th.
    expect(pathMs(chosen)).toBe(sorted[9]);
    expect(choice.among).toBe(20);
    expect(choice.description).toMatch(
      /^pipeline \d+: the median critical path \([\d.]+ s\) of the last 20 ended push pipelines of main before pipeline 1035$/,
    );
  });

  it('leaves out other refs, other sources, pipelines still running and later ones, and weighs by adjusted count', () => {
    const target = pipelines[10];
    const others = pipelines
      .slice(0, 10)
      .map((candidate, i) =>
        i === 0
          ? candidate
          : i === 1
            ? { ...candidate, ref: 'feature' }
            : i === 2
              ? { ...candidate, source: 'schedule' }
              : i === 3
                ? { ...candidate, finishedAt: null }
                : { ...candidate, createdAt: target.createdAt + i },
      );
    expect(chooseBaseline(others, target)).toMatchObject({ pipelineId: pipelines[0].pipelineId, among: 1 });
    expect(chooseBaseline(others.slice(1), target)).toBeNull();

    // Three candidates: the slowest stands for 10 pipelines (a head-sampled one), so it is the median.
    const three = pipelines.slice(0, 3).sort((a, b) => pathMs(a)! - pathMs(b)!);
    const weighted = [three[0], three[1], { ...three[2], adjustedCount: 10 }];
    expect(chooseBaseline(weighted, target)!.pipelineId).toBe(three[2].pipelineId);
    expect(chooseBaseline(three, target)!.pipelineId).toBe(three[1].pipelineId);
  });
});
