import { jobRunRow, partsOf, recordedFleet } from '../../test/helpers/job-run-rows';
import { randomSource } from '../../test/helpers/seeded-random';
import type { JobRunRow } from './job-run';
import { replayFifo, runnerQueue, whatIf } from './runner-queue';

const TAGS = 'docker,arm64';
const HOUR = 3600_000;

/** A fleet drawn from the seed: 2..12 runners, 80 %..95 % busy, 2000 jobs. */
function fleetOf(seed: number, pickupLatencyMs?: readonly [number, number]) {
  const random = randomSource(seed * 31);
  const runners = 2 + Math.floor(random() * 11);
  const utilization = 0.8 + random() * 0.15;
  return { runners, rows: recordedFleet({ seed, runners, jobs: 2000, utilization, pickupLatencyMs }) };
}

const within = (actual: number, expected: number, share: number) => Math.abs(actual - expected) <= share * expected + 0.001;

describe('the what-if of more runners (SPEC §13)', () => {
  it.each([
    ['first in, first out', 1, undefined],
    ['with a pickup latency of 1 to 5 s', 21, [1000, 5000] as const],
  ])(
    'learns the runners of a fleet %s from its recorded queue within one, and its replay reproduces the recorded p50/p95 within 10 %',
    (_, firstSeed, latency) => {
      // Seeds 1..20 and 21..40: each a fleet of its own size and load.
      const outcomes = [];
      for (let seed = firstSeed; seed < firstSeed + 20; seed++) {
        const { runners, rows } = fleetOf(seed, latency);
        const answer = whatIf(rows, { tags: TAGS, runners: 2 });
        const { recorded, before } = answer.queue_seconds;
        outcomes.push({
          seed,
          runners,
          learned: answer.concurrency.runners,
          ok:
            answer.concurrency.identified &&
            Math.abs(answer.concurrency.runners - runners) <= 1 &&
            within(before.p50, recorded.p50, 0.1) &&
            within(before.p95, recorded.p95, 0.1),
        });
      }
      expect(outcomes.filter((outcome) => !outcome.ok)).toEqual([]);
    },
  );

  it('answers the queue wait with the runners added, and what it does to the critical paths', () => {
    // Seed 3: the fleet is busy; two more runners cut the wait and the pipelines' paths.
    const { rows } = fleetOf(3);
    const answer = whatIf(rows, { tags: TAGS, runners: 2 });
    expect(answer.queue_seconds.after.p95).toBeLessThan(answer.queue_seconds.before.p95 / 2);
    expect(answer.critical_path_seconds.after.p95).toBeLessThan(answer.critical_path_seconds.before.p95);
    expect(answer.affected_pipelines).toBeGreaterThan(0);
    expect(answer.changed_pipelines.length).toBe(Math.min(100, answer.affected_pipelines));
    expect(answer.changed_pipelines.every((pipeline) => pipeline.change_seconds < 0)).toBe(true);
    expect(answer).toMatchObject({ jobs: 2000, pipelines: 500, sampled: false, runners_added: 2 });
    // Taking a runner away makes it worse.
    expect(whatIf(rows, { tags: TAGS, runners: -1 }).queue_seconds.after.p95).toBeGreaterThan(answer.queue_seconds.before.p95);
  });

  it('moves a pipeline’s path by the change of its on-path jobs’ waits', () => {
    // One runner, three jobs pending at once, a minute each: they waited 0, 60 and 120 s.
    const rows = [0, 1, 2].map((i) =>
      jobRunRow({
        pipelineId: i + 1,
        rootPipelineId: i + 1,
        jobId: i + 1,
        runnerTags: TAGS,
        pendingAt: 0,
        startedAt: i * 60_000,
        finishedAt: (i + 1) * 60_000,
        queueMs: i * 60_000,
        partsMs: partsOf({ step_script: 60_000 }),
      }),
    );
    const answer = whatIf(rows, { tags: TAGS, runners: 1 });
    expect(answer.concurrency).toMatchObject({ runners: 1, identified: true, max_running: 1 });
    expect(answer.changed_pipelines).toEqual([
      { pipeline_id: 2, critical_path_seconds: { before: 120, after: 60 }, change_seconds: -60 },
      { pipeline_id: 3, critical_path_seconds: { before: 180, after: 120 }, change_seconds: -60 },
    ]);
    // A job off the path changes no path.
    const offPath = whatIf(
      rows.map((row) => (row.jobId === 3 ? { ...row, onCriticalPath: false } : row)),
      { tags: TAGS, runners: 1 },
    );
    expect(offPath.changed_pipelines.map((pipeline) => pipeline.pipeline_id)).toEqual([2]);
  });

  it('says when the recording cannot tell the runners apart: no job waited for one', () => {
    // Seed 8: 20 runners 10 % busy.
    const rows = recordedFleet({ seed: 8, runners: 20, jobs: 500, utilization: 0.1 });
    const answer = whatIf(rows, { tags: TAGS, runners: 5 });
    expect(answer.concurrency.identified).toBe(false);
    expect(answer.concurrency.runners).toBe(answer.concurrency.max_running);
    expect(answer.queue_seconds.after).toEqual(answer.queue_seconds.before);
  });

  it('replays 50,000 jobs', () => {
    // Seed 50: 40 runners 90 % busy; the replay is n log M with a heap.
    const rows = recordedFleet({ seed: 50, runners: 40, jobs: 50_000, utilization: 0.9 });
    const answer = whatIf(rows, { tags: TAGS, runners: 5 });
    expect(answer.jobs).toBe(50_000);
    expect(Math.abs(answer.concurrency.runners - 40)).toBeLessThanOrEqual(1);
    expect(within(answer.queue_seconds.before.p95, answer.queue_seconds.recorded.p95, 0.1)).toBe(true);
    expect(answer.queue_seconds.after.p95).toBeLessThan(answer.queue_seconds.before.p95);
  });

  it('replays first in, first out on the earliest free runner, as the recording did', () => {
    // Seeds 60..64: on the recorded number of runners and no latency, every job waits what it waited.
    for (let seed = 60; seed < 65; seed++) {
      const { runners, rows } = fleetOf(seed);
      const jobs = rows.map((row) => ({ pendingAt: row.pendingAt, runMs: row.finishedAt! - row.startedAt!, waitMs: row.queueMs }));
      expect(Array.from(replayFifo(jobs, runners))).toEqual(rows.map((row) => row.queueMs));
    }
  });
});

describe('queue wait by tag set over time', () => {
  const at = (hours: number) => Date.UTC(2026, 10, 2) + hours * HOUR;
  const waiting = (jobId: number, tags: string, pendingAt: number, queueMs: number, overrides: Partial<JobRunRow> = {}) =>
    jobRunRow({ jobId, pipelineId: jobId, rootPipelineId: jobId, runnerTags: tags, pendingAt, startedAt: pendingAt + queueMs, queueMs, ...overrides });

  it('gives hourly p50/p95 per tag set and the most jobs waiting at once, a wait across an hour counting in both', () => {
    const rows = [
      waiting(1, TAGS, at(0) + 60_000, 600_000),
      waiting(2, TAGS, at(0) + 120_000, 600_000),
      waiting(3, TAGS, at(0) + 180_000, 30_000),
      // Waits from 0:50 to 2:10.
      waiting(4, TAGS, at(0) + 50 * 60_000, 80 * 60_000),
      waiting(5, 'docker,linux', at(1) + 60_000, 5_000),
      // Never picked up: no runner, no tag set.
      waiting(6, '', at(1), 0, { startedAt: null, runnerId: null }),
    ];
    const answer = runnerQueue(rows, { from: at(0), to: at(6) });
    expect(answer.bucket).toBe('hour');
    const arm = answer.tag_sets.find((tagSet) => tagSet.tags === TAGS)!;
    expect(arm).toMatchObject({ jobs: 4, pipelines: 4, max_waiting: 3, queue_seconds: { p50: 600, p95: 4800 } });
    expect(arm.buckets).toEqual([
      { start: new Date(at(0)).toISOString(), jobs: 4, pipelines: 4, queue_seconds: { p50: 600, p95: 4800 }, max_waiting: 3 },
      { start: new Date(at(1)).toISOString(), jobs: 0, pipelines: 0, queue_seconds: { p50: 0, p95: 0 }, max_waiting: 1 },
      { start: new Date(at(2)).toISOString(), jobs: 0, pipelines: 0, queue_seconds: { p50: 0, p95: 0 }, max_waiting: 1 },
    ]);
    expect(answer.tag_sets.map((tagSet) => tagSet.tags)).toEqual([TAGS, 'docker,linux']);
    expect(answer.pipelines).toBe(6);
  });

  it('buckets a week by day and weighs each job by its adjusted count', () => {
    const rows = [waiting(1, TAGS, at(1), 10_000, { adjustedCount: 10 }), waiting(2, TAGS, at(2), 100_000), waiting(3, TAGS, at(30), 50_000)];
    const answer = runnerQueue(rows, { from: at(0), to: at(24 * 7) });
    expect(answer.bucket).toBe('day');
    const [day1, day2] = answer.tag_sets[0].buckets;
    // The job that stands for ten outweighs the one that stands for itself.
    expect(day1).toMatchObject({ start: new Date(at(0)).toISOString(), jobs: 11, pipelines: 2, queue_seconds: { p50: 10, p95: 100 } });
    expect(day2).toMatchObject({ start: new Date(at(24)).toISOString(), jobs: 1 });
  });
});
