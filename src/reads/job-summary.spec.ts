import { weightedPercentile } from '../across/percentiles';
import { summarizeJobs } from './job-summary';
import type { JobRun } from './job-summary';

const run = (overrides: Partial<JobRun>): JobRun => ({
  jobId: 1,
  name: 'test',
  stage: 'test',
  pipelineId: 1,
  status: 'success',
  durationSeconds: 60,
  queueSeconds: 5,
  retried: false,
  adjustedCount: 1,
  ...overrides,
});

describe("a project's jobs over a window (SPEC §12)", () => {
  it('weights each run by its adjusted count: a 10 % sample of passing runs with every failure kept is not a 50 % failure rate', () => {
    const [test] = summarizeJobs([run({ adjustedCount: 10 }), run({ status: 'failed', adjustedCount: 1, retried: true })]);
    expect(test).toMatchObject({ name: 'test', runs: 11, failures: 1, retries: 1 });
  });

  it('gives p50 and p95 of duration and queue wait, and how often and how long the job was on the critical path', () => {
    const runs = Array.from({ length: 20 }, (_, i) =>
      run({ jobId: i, durationSeconds: i + 1, queueSeconds: 20 - i, onCriticalPath: i % 2 === 0, criticalPathSeconds: i % 2 === 0 ? 100 + i : undefined }),
    );
    const [test] = summarizeJobs([...runs, run({ name: 'lint', durationSeconds: 3 })]);
    expect(test).toMatchObject({
      runs: 20,
      duration_seconds: { p50: 10, p95: 19 },
      queue_seconds: { p50: 10, p95: 19 },
      critical_path: { share: 0.5, p50_seconds: 108 },
    });
    expect(summarizeJobs(runs.concat(run({ name: 'lint' })))[1]).toMatchObject({ name: 'lint', critical_path: { share: null, p50_seconds: null } });
  });

  it('takes the least value reaching the weight asked for', () => {
    expect(
      weightedPercentile(
        [
          [1, 1],
          [2, 1],
          [3, 8],
        ],
        0.5,
      ),
    ).toBe(3);
    expect(weightedPercentile([], 0.5)).toBeNull();
  });
});
