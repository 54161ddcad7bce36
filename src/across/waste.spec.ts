import { generatedProject, jobRunRow, partsOf } from '../../test/helpers/job-run-rows';
import { randomSource } from '../../test/helpers/seeded-random';
import type { JobRunRow } from './job-run';
import { PathSplit, wasteLedger } from './waste';

/** Seconds of a figure, brute force: every row's ms times its adjusted count, by where on the path it was. */
function bruteForce(rows: readonly JobRunRow[], millis: (row: JobRunRow) => number) {
  const total = { total: 0, on_critical_path: 0, off_critical_path: 0, path_unknown: 0 };
  for (const row of rows) {
    const value = (millis(row) * row.adjustedCount) / 1000;
    total.total += value;
    if (row.onCriticalPath === true) total.on_critical_path += value;
    else if (row.onCriticalPath === false) total.off_critical_path += value;
    else total.path_unknown += value;
  }
  return total;
}

const run = (row: JobRunRow) => Object.values(row.partsMs).reduce((sum, value) => sum + value, 0);

function expectClose(actual: PathSplit, expected: PathSplit, what: string) {
  for (const key of ['total', 'on_critical_path', 'off_critical_path', 'path_unknown'] as const) {
    const tolerance = Math.max(0.002, Math.abs(expected[key]) * 0.001);
    expect({ what, key, off: Math.abs(actual[key] - expected[key]) <= tolerance }).toEqual({ what, key, off: true });
  }
}

describe('the waste ledger (SPEC §13)', () => {
  it('adds up to a brute-force sum over generated runs within 0.1 %, weighted by adjusted count', () => {
    // Seeds 1..10: 80 pipelines, a fifth of runs retried, a third of pipelines rerunning a commit, head-sampled
    // pipelines standing for 1, 2 or 10, and every tenth pipeline still running (its path unknown).
    for (let seed = 1; seed <= 10; seed++) {
      const rows = generatedProject({ seed, pipelines: 80, retryRate: 0.2, rerunRate: 0.3, adjustedCounts: [1, 1, 2, 10] }).map((row) =>
        row.pipelineId % 10 === 3 ? { ...row, onCriticalPath: null, slackMs: null, pipelineFinishedAt: null } : row,
      );
      const ledger = wasteLedger(rows);
      const flaky = (row: JobRunRow) =>
        row.status === 'failed' && rows.some((other) => other.name === row.name && other.sha === row.sha && other.status === 'success') ? run(row) : 0;
      expectClose(ledger.totals.runner_seconds, bruteForce(rows, run), `runner, seed ${seed}`);
      expectClose(
        ledger.totals.retry_seconds,
        bruteForce(rows, (row) => (row.retried ? run(row) : 0)),
        `retry, seed ${seed}`,
      );
      expectClose(ledger.totals.flaky_runner_seconds, bruteForce(rows, flaky), `flaky, seed ${seed}`);
      expectClose(
        ledger.totals.cache_seconds,
        bruteForce(rows, (row) => row.partsMs.restore_cache + row.partsMs.archive_cache),
        `cache, seed ${seed}`,
      );
      expectClose(
        ledger.totals.queue_seconds,
        bruteForce(rows, (row) => row.queueMs),
        `queue, seed ${seed}`,
      );
      for (const job of ledger.jobs) {
        const own = rows.filter((row) => row.name === job.name);
        expectClose(
          job.retry_seconds,
          bruteForce(own, (row) => (row.retried ? run(row) : 0)),
          `${job.name} retry, seed ${seed}`,
        );
        for (const { tags, seconds } of job.queue_seconds) {
          expectClose(
            seconds,
            bruteForce(
              own.filter((row) => row.runnerTags === tags),
              (row) => row.queueMs,
            ),
            `${job.name} queue on ${tags}, seed ${seed}`,
          );
        }
      }
      expect(ledger.totals.retry_seconds.on_critical_path).toBeGreaterThan(0);
      expect(ledger.totals.flaky_runner_seconds.total).toBeGreaterThan(0);
      expect(ledger.pipelines).toBe(80);
    }
  });

  it('counts a commit with a failure and a success of a job as flaky, with the failed runs’ runner time', () => {
    const rows = [
      jobRunRow({ jobId: 1, name: 'e2e', sha: 'aaa', pipelineId: 1, rootPipelineId: 1, status: 'failed', partsMs: partsOf({ step_script: 60000 }) }),
      jobRunRow({ jobId: 2, name: 'e2e', sha: 'aaa', pipelineId: 2, rootPipelineId: 2, status: 'success', partsMs: partsOf({ step_script: 90000 }) }),
      // Only failures on this commit: broken, not flaky.
      jobRunRow({ jobId: 3, name: 'e2e', sha: 'bbb', pipelineId: 3, rootPipelineId: 3, status: 'failed', partsMs: partsOf({ step_script: 30000 }) }),
      jobRunRow({
        jobId: 4,
        name: 'e2e',
        sha: 'bbb',
        pipelineId: 3,
        rootPipelineId: 3,
        attempt: 2,
        status: 'failed',
        partsMs: partsOf({ step_script: 30000 }),
      }),
      // Another job's success on the first commit makes nothing flaky.
      jobRunRow({ jobId: 5, name: 'lint', sha: 'bbb', pipelineId: 3, rootPipelineId: 3, status: 'success' }),
    ];
    const [e2e] = wasteLedger(rows).jobs;
    expect(e2e).toMatchObject({ name: 'e2e', pipelines: 3, flaky: { commits: 1, runs: 1, runner_seconds: { total: 60, on_critical_path: 60 } } });
  });

  it('takes hits and misses from the runner where it said, and infers the rest from the restore’s time, flagged', () => {
    // Seed 21: every runner says; seed 21 again with nothing said must infer about the same counts.
    const said = generatedProject({ seed: 21, pipelines: 100, cacheKnownRate: 1, cacheMissRate: 0.15 });
    const truth = wasteLedger(said).jobs.find((job) => job.name === 'integration')!;
    expect(truth.inferred).toBe(false);
    const expectedMisses = said.filter((row) => row.name === 'integration' && row.cacheResult === 'miss').length;
    expect(truth.cache_misses).toBe(expectedMisses);

    const unsaid = said.map((row) => ({ ...row, cacheResult: null }));
    const guessed = wasteLedger(unsaid).jobs.find((job) => job.name === 'integration')!;
    expect(guessed).toMatchObject({ inferred: true, cache_hits: truth.cache_hits, cache_misses: truth.cache_misses });
    // A job without a cache stage has neither.
    expect(wasteLedger(unsaid).jobs.find((job) => job.name === 'lint')).toMatchObject({ cache_hits: 0, cache_misses: 0, inferred: false });
  });

  it('prices runner time by the tag set where it has a price, else by the runner type', () => {
    const rows = [
      jobRunRow({ jobId: 1, runnerTags: 'docker,large', runnerType: 'instance_type', retried: true, partsMs: partsOf({ step_script: 120000 }) }),
      jobRunRow({ jobId: 2, runnerTags: 'docker,linux', runnerType: 'instance_type', partsMs: partsOf({ restore_cache: 60000, step_script: 60000 }) }),
      jobRunRow({ jobId: 3, runnerTags: 'shell', runnerType: 'project_type', partsMs: partsOf({ step_script: 30000 }), adjustedCount: 2 }),
    ];
    const prices = { per_minute: { tags: { 'docker,large': 0.05 }, runner_type: { instance_type: 0.01 } } };
    const ledger = wasteLedger(rows, prices);
    // 2 min at 0.05, 2 min at 0.01; the project runner's minute (twice) has no price.
    expect(ledger.totals.cost).toEqual({ runner: 0.12, retry: 0.1, flaky: 0, cache: 0.01, unpriced_runner_seconds: 60 });
    expect(wasteLedger(rows).totals.cost).toBeUndefined();
  });

  it('splits queue wait by the runner’s tag set and lists the job wasting most first', () => {
    const random = randomSource(9);
    const rows = Array.from({ length: 30 }, (_, i) =>
      jobRunRow({
        jobId: i,
        name: i % 3 === 0 ? 'small' : 'big',
        runnerTags: i % 2 === 0 ? 'docker,arm64' : 'docker,linux',
        queueMs: Math.round(random() * 60000),
      }),
    );
    const ledger = wasteLedger(rows);
    expect(ledger.jobs.map((job) => job.name)).toEqual(['big', 'small']);
    const big = ledger.jobs[0];
    expect(big.queue_seconds.map((entry) => entry.tags).sort()).toEqual(['docker,arm64', 'docker,linux']);
    expect(big.queue_seconds[0].seconds.total).toBeGreaterThanOrEqual(big.queue_seconds[1].seconds.total);
  });
});
