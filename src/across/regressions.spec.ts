import { generatedProject, normalSource } from '../../test/helpers/job-run-rows';
import { randomSource } from '../../test/helpers/seeded-random';
import { bestSplit, findRegressions } from './regressions';

const FIRST_PIPELINE_ID = 1000;

describe('regressions: change points over pipelines (SPEC §13)', () => {
  it('finds a +60 s restore_cache of the job holding the pipeline up, at the pipeline it began, in at least 19 of 20 seeds', () => {
    // Seeds 1..20: 60 pipelines of 6 jobs in 4 stages, every stage time log-normal (σ 0.15), 10 % cache misses, 5 %
    // retried runs; from pipeline N (15..45, drawn from the seed) `integration` restores its cache 60 s longer.
    const outcomes = [];
    for (let seed = 1; seed <= 20; seed++) {
      const from = 15 + Math.floor(randomSource(seed * 7919)() * 31);
      const rows = generatedProject({ seed, pipelines: 60, step: { job: 'integration', part: 'restore_cache', fromPipeline: from, addMs: 60000 } });
      const answer = findRegressions(rows);
      const jobChanges = answer.change_points.filter((change) => change.job !== null);
      const step = jobChanges.find((change) => change.job === 'integration' && change.stage === 'test' && change.part === 'restore_cache');
      outcomes.push({
        seed,
        found:
          step !== undefined &&
          Math.abs(step.first_pipeline_id - (FIRST_PIPELINE_ID + from)) <= 1 &&
          Math.abs(step.after_seconds - step.before_seconds - 60) <= 10 &&
          jobChanges.length === 1,
        expected: FIRST_PIPELINE_ID + from,
        changes: jobChanges.map((change) => `${change.job}/${change.part}@${change.first_pipeline_id}: ${change.before_seconds} → ${change.after_seconds}`),
      });
    }
    const missed = outcomes.filter((outcome) => !outcome.found);
    expect(missed.length <= 1 ? [] : missed).toEqual([]);
  });

  it('names the first pipeline after the change by its commit, ref and time, and says what it rests on', () => {
    // Seed 3: +180 s, so the critical path (about 700 s) steps up by more than the 10 % that counts.
    const rows = generatedProject({ seed: 3, pipelines: 60, step: { job: 'integration', part: 'restore_cache', fromPipeline: 30, addMs: 180000 } });
    const answer = findRegressions(rows);
    const step = answer.change_points.find((change) => change.part === 'restore_cache')!;
    const first = rows.find((row) => row.pipelineId === FIRST_PIPELINE_ID + 30)!;
    expect(step).toMatchObject({
      job: 'integration',
      stage: 'test',
      first_pipeline_id: first.pipelineId,
      first_sha: first.sha,
      first_ref: 'main',
      first_seen_at: new Date(first.pipelineCreatedAt).toISOString(),
      pipelines: 60,
    });
    expect(step.confidence).toBeGreaterThan(0.99);
    expect(answer.pipelines).toBe(60);
    // The critical path as a whole stepped up too, at about the same pipeline, by about the same.
    const path = answer.change_points.find((change) => change.part === 'critical_path')!;
    expect(path).toMatchObject({ job: null, stage: null });
    expect(Math.abs(path.first_pipeline_id - first.pipelineId)).toBeLessThanOrEqual(1);
    expect(path.after_seconds - path.before_seconds).toBeGreaterThan(150);
  });

  it('finds no change point at all in 20 projects of noise alone', () => {
    // Seeds 101..120: the same projects with nothing changed.
    const alarms = [];
    for (let seed = 101; seed <= 120; seed++) {
      const answer = findRegressions(generatedProject({ seed, pipelines: 60 }));
      // The 39 stages the 6 jobs have, and the critical path.
      expect(answer.series.tested).toBe(40);
      if (answer.change_points.length > 0) alarms.push({ seed, changes: answer.change_points });
    }
    expect(alarms).toEqual([]);
  });

  it('reports no real but tiny shift: below 10 % or below 1 s', () => {
    // Seed 7: almost no noise (σ 0.01), so both shifts are plain to the rank test; neither matters to anyone.
    const small = (part: 'step_script' | 'after_script', addMs: number) =>
      findRegressions(generatedProject({ seed: 7, pipelines: 80, noise: 0.01, retryRate: 0, step: { job: 'integration', part, fromPipeline: 40, addMs } }));
    // +15 s on a 300 s script is 5 %; +0.8 s on a 2 s after_script is 40 % but under a second.
    expect(small('step_script', 15000).change_points.filter((change) => change.job !== null)).toEqual([]);
    expect(small('after_script', 800).change_points.filter((change) => change.job !== null)).toEqual([]);
    // The same script 20 % longer is one.
    expect(small('step_script', 60000).change_points.filter((change) => change.job !== null)).toMatchObject([{ job: 'integration', part: 'step_script' }]);
  });

  it('finds a step up and a step back down in one series', () => {
    // Seed 11: a cache server slow for pipelines 50..99 of 150. (Binary segmentation looks for one step first: a
    // change that reverts is found when the window is long enough against it, here a third of 150 pipelines.)
    const rows = generatedProject({ seed: 11, pipelines: 150, cacheMissRate: 0 }).map((row) => {
      const index = row.pipelineId - FIRST_PIPELINE_ID;
      if (row.name !== 'unit' || index < 50 || index >= 100) return row;
      return { ...row, partsMs: { ...row.partsMs, restore_cache: row.partsMs.restore_cache + 40000 } };
    });
    const changes = findRegressions(rows).change_points.filter((change) => change.job === 'unit');
    expect(changes.map((change) => [change.part, change.first_pipeline_id])).toEqual([
      ['restore_cache', FIRST_PIPELINE_ID + 50],
      ['restore_cache', FIRST_PIPELINE_ID + 100],
    ]);
    expect(changes[0].after_seconds).toBeCloseTo(changes[1].before_seconds, 5);
    expect(changes[1].after_seconds).toBeLessThan(changes[1].before_seconds - 30);
  });

  it('says a window is too short to decide instead of guessing', () => {
    const answer = findRegressions(
      generatedProject({ seed: 4, pipelines: 8, step: { job: 'integration', part: 'restore_cache', fromPipeline: 4, addMs: 60000 } }),
    );
    expect(answer.change_points).toEqual([]);
    expect(answer.series.tested).toBe(0);
    expect(answer.series.too_short).toBe(40);
  });
});

describe('the split statistic and its p-value bound', () => {
  it('overstates the chance of a false alarm rather than understating it', () => {
    // Seed 58: 4000 series of 60 independent log-normal values; the share with p ≤ 5 % must not exceed 5 %.
    const normal = normalSource(randomSource(58));
    let alarms = 0;
    for (let i = 0; i < 4000; i++) {
      const values = Array.from({ length: 60 }, () => Math.round(20000 * Math.exp(0.15 * normal())));
      if (bestSplit(values)!.p <= 0.05) alarms += 1;
    }
    expect(alarms / 4000).toBeLessThanOrEqual(0.05);
  });

  it('puts the split where the values change, with ties among them', () => {
    const values = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 5, 5, 6, 5, 5, 5, 7, 5, 5, 5];
    expect(bestSplit(values)).toMatchObject({ at: 10 });
    expect(bestSplit(values)!.z).toBeGreaterThan(3);
    expect(bestSplit(values.map((value) => -value))!.z).toBeLessThan(-3);
    expect(bestSplit(new Array(20).fill(3))).toBeNull();
    expect(bestSplit([1, 2, 3])).toBeNull();
  });
});
