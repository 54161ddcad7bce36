import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);

/**
 * `npm run demo` on the built service: the same two steps as the script after its `npm run build`
 * (which `npm test` has done already, and which must not rewrite dist/ under the other e2e tests).
 */
describe('npm run demo (README "See a pipeline become a trace")', () => {
  let stdout = '';

  beforeAll(async () => {
    await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'demo', 'tsconfig.json')], { cwd: ROOT });
    ({ stdout } = await run(process.execPath, [join(ROOT, 'build', 'demo', 'demo', 'pipeline-demo.js')], {
      cwd: ROOT,
      env: { PATH: process.env.PATH },
      timeout: 60_000,
    }));
  }, 120_000);

  it('prints the three-job pipeline as one trace, each job with its build stages and durations', () => {
    const header = /pipeline 500 of project 7: trace ([0-9a-f]{32}), 3 jobs, 24 spans, 3m 39\.0s/.exec(stdout);
    expect(header).not.toBeNull();
    // Every job was picked up into that one trace and exported to its own capability URL.
    for (const job of [1001, 1002, 1003]) {
      expect(stdout).toContain(`job ${job} (`);
      expect(stdout).toMatch(
        new RegExp(`job ${job} \\(\\w+\\) picked up: trace ${header![1]}, .*export to http://127\\.0\\.0\\.1:\\d+/jobs/${job}/…/v1/traces`),
      );
    }

    const waterfall = stdout.split('\n').filter((line) => /\|[ █]{40}\|/.test(line));
    const rows = waterfall.map((line) => {
      const [, label, bar, duration] = /^(.*?)\s*\|([ █]{40})\| +(\S+(?: \S+)?)$/.exec(line)!;
      return { label, bar, duration };
    });
    expect(rows.map((row) => [row.label, row.duration])).toEqual([
      ['job_execution  job 1001 success', '1m 10.0s'],
      ['  prepare_executor', '4.0s'],
      ['  get_sources', '3.0s'],
      ['  restore_cache', '6.0s'],
      ['  step_script', '48.0s'],
      ['  after_script', '1.0s'],
      ['  archive_cache', '5.0s'],
      ['  upload_artifacts', '3.0s'],
      ['job_execution  job 1002 success', '1m 55.0s'],
      ['  prepare_executor', '4.0s'],
      ['  get_sources', '2.0s'],
      ['  restore_cache', '7.0s'],
      ['  step_script', '1m 35.0s'],
      ['  after_script', '1.0s'],
      ['  archive_cache', '2.0s'],
      ['  upload_artifacts', '4.0s'],
      ['job_execution  job 1003 success', '30.0s'],
      ['  prepare_executor', '3.0s'],
      ['  get_sources', '2.0s'],
      ['  restore_cache', '1.0s'],
      ['  step_script', '21.0s'],
      ['  after_script', '1.0s'],
      ['  archive_cache', '1.0s'],
      ['  upload_artifacts', '1.0s'],
    ]);
    // A waterfall: each job's bar starts where the previous one ended, the first at the left edge.
    const jobBars = rows.filter((row) => row.label.startsWith('job_execution')).map((row) => row.bar);
    const starts = jobBars.map((bar) => bar.indexOf('█'));
    expect(starts[0]).toBe(0);
    expect(starts[1]).toBeGreaterThan(starts[0]);
    expect(starts[2]).toBeGreaterThan(starts[1]);
    expect(jobBars[2].trimEnd().length).toBe(40);
  });
});
