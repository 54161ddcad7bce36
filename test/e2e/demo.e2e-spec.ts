import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';

const ROOT = join(__dirname, '..', '..');
/** Where the demo's second pipeline, with a retried job, begins in its output. */
const RETRY_STORY = "Then a flaky test: pipeline 501's test job fails, is retried, and passes.";
/** Where its third part, outcome-based sampling (SPEC §11), begins. */
const OUTCOME_STORY = 'Then the operator samples 10 % of pipelines and turns outcome keeping on, in the flag file, with no restart:';
/** Where its fourth, a slowdown found across pipelines (SPEC §13), begins. */
const SLOWDOWN_STORY = 'Then a slowdown: ';
/** And its fifth, an assistant asking the same over MCP (SPEC §14). */
const AGENT_STORY = 'Then an assistant asks the same over MCP: ';
const run = promisify(execFile);

/**
 * `npm run demo` on the built service: the same two steps as the script after its `npm run build`
 * (which `npm test` has done already, and which must not rewrite dist/ under the other e2e tests).
 */
/** The waterfall's rows in `text`: depth, label, bar, and whether the span says error. */
function waterfallRows(text: string) {
  return text
    .split('\n')
    .filter((line) => /\|[ █]{40}\|/.test(line))
    .map((line) => {
      const [, indent, label, bar, rest] = /^( *)(.*?)\s*\|([ █]{40})\|(.*)$/.exec(line)!;
      return { depth: indent.length / 2, label, bar, error: rest.includes('error') };
    });
}

describe('npm run demo (README "See a pipeline become a trace")', () => {
  let stdout = '';

  beforeAll(async () => {
    await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'simulator', 'tsconfig.json')], { cwd: ROOT });
    ({ stdout } = await run(process.execPath, [join(ROOT, 'build', 'simulator', 'simulator', 'pipeline-demo.js')], {
      cwd: ROOT,
      env: { PATH: process.env.PATH },
      // About 30 s alone; the slowdown's 30 pipelines are most of it.
      timeout: 150_000,
    }));
  }, 200_000);

  it('picks the three jobs up into one trace, each after its queue wait, and closes them with GitLab webhooks', () => {
    const header = /pipeline 500 of project 7: trace ([0-9a-f]{32}), 3 jobs, 31 spans, 2m 13\.0s/.exec(stdout);
    expect(header).not.toBeNull();
    // Every job was picked up into that one trace and exported to its own capability URL.
    for (const [job, name, waited] of [
      [1001, 'build', 14],
      [1002, 'test', 12],
      [1003, 'lint', 9],
    ]) {
      expect(stdout).toMatch(
        new RegExp(
          `job ${job} \\(${name}\\) picked up after ${waited}s in the queue: trace ${header![1]}, parent span [0-9a-f]{16}, export to http://127\\.0\\.0\\.1:\\d+/jobs/${job}/…/v1/traces`,
        ),
      );
    }
    // One span per Job Hook; the Pipeline Hook adds the pipeline's, its jobs' spans being sent already.
    expect(stdout).toContain(
      [
        'GitLab Job Hook for job 1003 (lint) success: accepted, 1 span queued',
        'GitLab Job Hook for job 1001 (build) success: accepted, 1 span queued',
        'GitLab Job Hook for job 1002 (test) success: accepted, 1 span queued',
        // The pipeline span, and each job span again with the critical path written on it.
        'GitLab Pipeline Hook for pipeline 500 success: accepted, 4 spans queued, 3 duplicates dropped',
      ].join('\n'),
    );
  });

  it('prints one connected waterfall: the pipeline, each job under it with its queue wait and its runner job, and the durations', () => {
    const waterfall = stdout
      .split('Which job held pipeline 500 up?')[0]
      .split('\n')
      .filter((line) => /\|[ █]{40}\|/.test(line));
    const rows = waterfall.map((line) => {
      const [, indent, label, bar, duration] = /^( *)(.*?)\s*\|([ █]{40})\| +(\S+(?: \S+)?)$/.exec(line)!;
      return { depth: indent.length / 2, label, bar, duration, from: bar.indexOf('█'), to: bar.lastIndexOf('█') + 1 };
    });
    const stages = (durations: string[]) =>
      ['prepare_executor', 'get_sources', 'restore_cache', 'step_script', 'after_script', 'archive_cache', 'upload_artifacts'].map((stage, i) => [
        3,
        stage,
        durations[i],
      ]);
    expect(rows.map((row) => [row.depth, row.label, row.duration])).toEqual([
      [0, 'pipeline 500 success', '2m 13.0s'],
      [1, 'job 1001 build success', '1m 26.0s'],
      [2, 'queue_wait', '14s'],
      [2, 'job_execution  runner 17 shell', '1m 10.0s'],
      ...stages(['4.0s', '3.0s', '6.0s', '48.0s', '1.0s', '5.0s', '3.0s']),
      [1, 'job 1002 test success', '2m 09.0s'],
      [2, 'queue_wait', '12s'],
      [2, 'job_execution  runner 17 shell', '1m 55.0s'],
      ...stages(['4.0s', '2.0s', '7.0s', '1m 35.0s', '1.0s', '2.0s', '4.0s']),
      [1, 'job 1003 lint success', '41.0s'],
      [2, 'queue_wait', '9s'],
      [2, 'job_execution  runner 17 shell', '30.0s'],
      ...stages(['3.0s', '2.0s', '1.0s', '21.0s', '1.0s', '1.0s', '1.0s']),
    ]);
    // One root, the pipeline: no span was printed as an orphan (its parent not received).
    expect(rows.filter((row) => row.depth === 0).map((row) => row.label)).toEqual(['pipeline 500 success']);
    expect(stdout).not.toContain('orphan');

    // The bars: the pipeline spans the trace; each job starts at its queue wait, which ends where its
    // runner's job_execution begins, and ends after it; the stages follow each other inside job_execution.
    expect(rows[0].bar).toBe('█'.repeat(40));
    for (const at of [1, 11, 21]) {
      const [job, queueWait, execution] = rows.slice(at, at + 3);
      expect(queueWait.from).toBe(job.from);
      expect(queueWait.to).toBe(execution.from);
      expect(job.to).toBeGreaterThanOrEqual(execution.to);
      const stageRows = rows.slice(at + 3, at + 10);
      expect(stageRows[0].from).toBe(execution.from);
      for (let i = 1; i < stageRows.length; i++) expect(stageRows[i].from).toBeGreaterThanOrEqual(stageRows[i - 1].to - 1);
    }

    // And exactly as the README shows it.
    expect(waterfall).toEqual([
      'pipeline 500 success                |████████████████████████████████████████|  2m 13.0s',
      '  job 1001 build success            |██████████████████████████              |  1m 26.0s',
      '    queue_wait                      |████                                    |       14s',
      '    job_execution  runner 17 shell  |    █████████████████████               |  1m 10.0s',
      '      prepare_executor              |    ██                                  |      4.0s',
      '      get_sources                   |      █                                 |      3.0s',
      '      restore_cache                 |      ██                                |      6.0s',
      '      step_script                   |        ███████████████                 |     48.0s',
      '      after_script                  |                       █                |      1.0s',
      '      archive_cache                 |                       █                |      5.0s',
      '      upload_artifacts              |                        █               |      3.0s',
      '  job 1002 test success             |███████████████████████████████████████ |  2m 09.0s',
      '    queue_wait                      |████                                    |       12s',
      '    job_execution  runner 17 shell  |    ███████████████████████████████████ |  1m 55.0s',
      '      prepare_executor              |    ██                                  |      4.0s',
      '      get_sources                   |      █                                 |      2.0s',
      '      restore_cache                 |      ██                                |      7.0s',
      '      step_script                   |        █████████████████████████████   |  1m 35.0s',
      '      after_script                  |                                     █  |      1.0s',
      '      archive_cache                 |                                     █  |      2.0s',
      '      upload_artifacts              |                                      █ |      4.0s',
      '  job 1003 lint success             | █████████████                          |     41.0s',
      '    queue_wait                      | ███                                    |        9s',
      '    job_execution  runner 17 shell  |    █████████                           |     30.0s',
      '      prepare_executor              |    █                                   |      3.0s',
      '      get_sources                   |     █                                  |      2.0s',
      '      restore_cache                 |      █                                 |      1.0s',
      '      step_script                   |      ██████                            |     21.0s',
      '      after_script                  |            █                           |      1.0s',
      '      archive_cache                 |             █                          |      1.0s',
      '      upload_artifacts              |             █                          |      1.0s',
    ]);
  });

  it('says which job held the pipeline up and where its time went, as the read API answers and as `npm run -s trace` prints it', () => {
    const story = stdout.split('Which job held pipeline 500 up?')[1].split(RETRY_STORY)[0];
    // The three jobs ran side by side: test, the longest, is the path; build and lint could have taken longer.
    expect(story).toContain(
      [
        ' GET /internal/ci/telemetry/projects/7/pipelines/500/critical_path answers (final: true):',
        '  job 1002 (test), first: 3s waiting for GitLab, 12s in the queue, 1m 57s running (step_script 1m 35s, restore_cache 7s, prepare_executor 4s, …)',
        '  the path: 2m 12s: step_script 1m 35s, queue 12s, restore_cache 7s, prepare_executor 4s, …',
        '  off the path: job 1003 (lint), 1m 25s of slack',
        '  off the path: job 1001 (build), 45s of slack',
      ].join('\n'),
    );
    const trace = /pipeline 500 of project 7: trace ([0-9a-f]{32})/.exec(stdout)![1];
    expect(story).toContain(`npm run -s trace ${trace} marks it on the waterfall:`);
    const marked = story.split('\n').filter((line) => line.includes('◀ critical path'));
    expect(marked).toEqual(['  job 1002 test success             |███████████████████████████████████████ |  2m 09.0s  ◀ critical path']);
    expect(story).toMatch(
      /on the critical path \(2m 12s\): 1m 35s in scripts, 12s waiting for runners, 7s restoring caches, .*3s waiting for GitLab to start jobs/,
    );
  });

  it('then retries a failed job: the pipeline span is sent again as a newer version, running again at once, and the final picture shows it passed', () => {
    const story = stdout.split(RETRY_STORY)[1].split(OUTCOME_STORY)[0];
    expect(story).toContain(
      [
        'GitLab Pipeline Hook for pipeline 501 failed: accepted, 3 spans queued, 2 duplicates dropped',
        // The retry pending reopens the pipeline: its span's running version at once, so no read calls it final (issue 56).
        'GitLab Pipeline Hook for pipeline 501 running again: accepted, 1 span queued, 1 duplicate dropped',
        'GitLab Job Hook for job 2003 (test, retry 1) success: accepted, 1 span queued',
        'GitLab Pipeline Hook for pipeline 501 success: accepted, 4 spans queued, 2 duplicates dropped',
      ].join('\n'),
    );
    expect(story).toContain("pipeline 501's span reached the collector 3 times, one span id, each a newer version: failed, then running, then success");
    expect(story).toMatch(/pipeline 501 of project 7, final picture: trace [0-9a-f]{32}, 3 jobs \(test twice\), 31 spans, 10\.0s/);
    const rows = story
      .split('\n')
      .filter((line) => /\|[ █]{40}\|/.test(line))
      .map((line) => {
        const [, indent, label, bar, rest] = /^( *)(.*?)\s*\|([ █]{40})\|(.*)$/.exec(line)!;
        return { depth: indent.length / 2, label, bar, error: rest.includes('error'), to: bar.lastIndexOf('█') + 1 };
      });
    // One root, the pipeline, in its final version: success, covering every job, both attempts of test under it.
    expect(rows.filter((row) => row.depth === 0).map((row) => [row.label, row.error, row.bar])).toEqual([['pipeline 501 success', false, '█'.repeat(40)]]);
    expect(rows.filter((row) => row.depth === 1).map((row) => [row.label, row.error])).toEqual([
      ['job 2001 build success', false],
      ['job 2002 test failed', true],
      ['job 2003 test success', false],
    ]);
    expect(story).not.toContain('orphan');
  });

  it('at 10 % head sampling with outcome keeping on: prints whole the failed pipeline head sampling left out, says why, and the passing one dropped, absent from the collector', () => {
    const story = stdout.split(OUTCOME_STORY)[1].split(SLOWDOWN_STORY)[0];
    expect(story).toContain(
      'ci_job_telemetry_sampling at 10 %, ci_job_telemetry_outcome_sampling on with the policy {"keep":{"statuses":["failed"],"slower_than_seconds":1800,"queued_longer_than_seconds":600},"when_no_outcome":"keep"}',
    );
    // Two pipelines the head decision left out, each job's answer provisional; which ids they are depends on the
    // run's trace key (a pipeline head sampling keeps is said and skipped).
    const pickups = [
      ...story.matchAll(
        /job (\d+) \((build|test)\) of pipeline (\d+) picked up after (\d+)s in the queue: trace ([0-9a-f]{32}), left out by head sampling, traced provisionally \(telemetry\.provisional: true, tracestate ot=th:0\)/g,
      ),
    ].map(([, job, name, pipeline, waited, trace]) => ({ job: Number(job), name, pipeline: Number(pipeline), waited: Number(waited), trace }));
    expect(pickups.map(({ name, waited }) => [name, waited])).toEqual([
      ['build', 8],
      ['test', 6],
      ['build', 8],
      ['test', 6],
    ]);
    const [failed, , passed] = pickups;
    expect(pickups.map((pickup) => [pickup.pipeline, pickup.trace])).toEqual([
      [failed.pipeline, failed.trace],
      [failed.pipeline, failed.trace],
      [passed.pipeline, passed.trace],
      [passed.pipeline, passed.trace],
    ]);
    expect(passed.trace).not.toBe(failed.trace);
    // Before its outcome, each one's spans wait in the service, none at the collector.
    for (const { pipeline } of [failed, passed])
      expect(story).toContain(`Before its outcome: 20 spans of pipeline ${pipeline} parked in the service, 0 spans at the collector`);

    // The failed one: said kept and why, and printed whole from what the collector received.
    expect(story).toContain(`pipeline ${failed.pipeline} failed: kept. Head sampling left it out; outcome keeping kept it because it failed.`);
    expect(story).toContain(
      `It reached the collector whole: trace ${failed.trace}, 2 jobs, 21 spans, 1 root (pipeline), 1m 31.0s; every span: trace_state ot=th:0, ci.sampling.reason failed`,
    );
    const stages = ['prepare_executor', 'get_sources', 'restore_cache', 'step_script', 'after_script', 'archive_cache', 'upload_artifacts'].map((stage) => [
      3,
      stage,
      false,
    ]);
    expect(waterfallRows(story).map((row) => [row.depth, row.label, row.error])).toEqual([
      [0, `pipeline ${failed.pipeline} failed`, true],
      [1, `job ${failed.job} build success`, false],
      [2, 'queue_wait', false],
      [2, 'job_execution  runner 17 shell', false],
      ...stages,
      [1, `job ${failed.job + 1} test failed`, true],
      [2, 'queue_wait', false],
      [2, 'job_execution  runner 17 shell', true],
      ...stages,
    ]);
    expect(story).not.toContain('orphan');

    // The passing one: said dropped and why, and nothing of its trace among what the collector received.
    expect(story).toContain(
      `pipeline ${passed.pipeline} success: dropped. Head sampling left it out; outcome keeping dropped it because it passed fast: success in 1m 31.0s, under the policy's 30 minutes, no job failed and none waited 10 minutes for a runner.`,
    );
    expect(story).toMatch(new RegExp(`Nothing of it reached the collector: 0 spans of trace ${passed.trace} among the \\d+ it received`));
    // Its trace is named only where its jobs were picked up and where it is said absent.
    expect(story.split('\n').filter((line) => line.includes(passed.trace))).toHaveLength(3);
    expect(story).toContain('The service counted both (ci_job_telemetry_outcome_decisions_total): dropped, reason outcome: 1; kept, reason failed: 1');
  });

  it('then finds a slowdown across pipelines: the delta by part, the pipeline and commit it began with, the waste, the queue and one more runner', () => {
    const story = stdout.split(SLOWDOWN_STORY)[1].split(AGENT_STORY)[0];
    const [, count, firstPipeline, planted, commit, slowJob] =
      /^(\d+) pipelines of main \((\d+) to \d+\)[^\n]*\nFrom pipeline (\d+) \(commit ([0-9a-f]{8})\) on, (\w+)'s restore_cache takes 60 s longer/.exec(story)!;
    expect(story).toMatch(new RegExp(`${count} pipelines, \\d+ jobs: picked up through the decorator, exported by the runner, closed by GitLab's hooks`));

    // Compare: the last pipeline against its default baseline, an earlier pipeline of the same branch before the
    // slowdown; the minute lands on the slow job's restore_cache, and the parts add up to the change.
    const [, last] = /Why was pipeline (\d+) slower\?/.exec(story)!;
    expect(Number(last)).toBe(Number(firstPipeline) + Number(count) - 1);
    const compare = section(story, `Why was pipeline ${last} slower?`);
    const [, baseline] = new RegExp(`pipeline ${last} against pipeline (\\d+): the median critical path`).exec(compare)!;
    expect(Number(baseline)).toBeLessThan(Number(planted));
    const [, delta, parts] = new RegExp(
      `critical path ${DURATION} → ${DURATION}, ([+−]${DURATION}): (.*) \\(the parts add up to the change, to the millisecond\\)`,
    ).exec(compare)!;
    const byPart = Object.fromEntries(
      [...parts.matchAll(new RegExp(`(\\w+) ([+−]${DURATION})`, 'g'))].map(([, part, seconds]) => [part, signedSeconds(seconds)]),
    );
    expect(byPart.restore_cache).toBeGreaterThanOrEqual(59);
    expect(byPart.restore_cache).toBeLessThanOrEqual(61);
    expect(Math.abs(signedSeconds(delta) - byPart.restore_cache)).toBeLessThan(10);
    const [, jobDelta] = new RegExp(`by job: ${slowJob} \\(test\\) ([+−]${DURATION}), on the path in both`).exec(compare)!;
    expect(signedSeconds(jobDelta)).toBeGreaterThanOrEqual(59);

    // Regressions: the step found at the pipeline and commit it was planted in, for that job and stage (and the
    // critical path as a whole), and nothing else in a series otherwise of noise.
    const regressions = section(story, 'Since when?');
    const points = [
      ...regressions.matchAll(new RegExp(`^ {2}(.+?): (${DURATION}) → (${DURATION}) from pipeline (\\d+), commit ([0-9a-f]{8}) on main`, 'gm')),
    ].map(([, series, before, after, pipeline, sha]) => ({ series, step: unsigned(after) - unsigned(before), pipeline, sha }));
    expect(points.map((point) => point.series).sort()).toEqual([`${slowJob} (test) restore_cache`, 'the critical path']);
    for (const point of points) {
      expect([point.pipeline, point.sha]).toEqual([planted, commit]);
      expect(point.step).toBeGreaterThan(55);
      expect(point.step).toBeLessThan(65);
    }

    // Waste: per job, the flaky build's retried attempt on the path, and what the runner minutes cost.
    const waste = section(story, 'What wastes runner time?');
    expect(waste).toMatch(/^ {2}build: \d+ runs, [^;]+; retried attempts \S+ \(all on the path\); flaky on 1 commit/m);
    for (const job of ['build', 'lint', 'test'])
      expect(waste).toMatch(new RegExp(`^  ${job}: \\d+ runs, .*queue on arm64,docker .*; cost \\d+\\.\\d\\d$`, 'm'));

    // The queue of the one runner's tag set: every job of the series (one build ran twice), hour by hour.
    const queue = section(story, 'Are we short of runners?');
    const [, jobs] = /^ {2}arm64,docker: (\d+) jobs of (\d+) pipelines, queue wait p50 /m.exec(queue)!;
    expect(Number(jobs)).toBe(3 * Number(count) + 1);
    expect(queue).toMatch(/^ {4}\d\d:00 UTC {2}\d+ jobs, p50 /m);

    // What-if: the one runner the simulation had is what the service learned; a second one takes the wait away.
    const whatIf = section(story, 'And with one more?');
    expect(whatIf).toMatch(/learned from the recording: 1 runner of arm64,docker \(the replay is off by/);
    const [, recorded, withTwo] = new RegExp(
      `recorded ${DURATION} / (${DURATION}), replayed ${DURATION} / ${DURATION}, with 2 runners ${DURATION} / (${DURATION})`,
    ).exec(whatIf)!;
    expect(unsigned(withTwo)).toBeLessThan(unsigned(recorded) / 2);
    const [, before, after] = new RegExp(`critical paths p50 / p95: (${DURATION}) / ${DURATION} → (${DURATION}) / `).exec(whatIf)!;
    expect(unsigned(after)).toBeLessThan(unsigned(before));
  });

  it("then an assistant asks over MCP: eight read-only tools, each answering the slowdown's finding first", () => {
    const slowdown = stdout.split(SLOWDOWN_STORY)[1];
    const [, planted, slowJob] = /From pipeline (\d+) \(commit [0-9a-f]{8}\) on, (\w+)'s restore_cache takes 60 s longer/.exec(slowdown)!;
    const [, last] = /Why was pipeline (\d+) slower\?/.exec(slowdown)!;
    const story = stdout.split(AGENT_STORY)[1];
    expect(story).toMatch(/^POST \/internal\/ci\/telemetry\/mcp lists 8 tools, each read-only \(8 say so\) with an output schema: /);
    const finding = (tool: string) => {
      const [, key, json] = new RegExp(`^${tool} \\{[^\n]*\\}: [^\n]+\n  (\\w+): (.+) \\(\\d+ characters in all\\)$`, 'm').exec(story)!;
      return { key, value: JSON.parse(json) as Record<string, unknown> };
    };
    // Why was the last pipeline slower: the minute on the slow job's restore_cache, as the HTTP compare said.
    const cause = finding('compare_pipeline');
    expect(cause.key).toBe('cause');
    expect(cause.value).toMatchObject({ part: 'restore_cache', job: slowJob });
    expect(cause.value.seconds).toBeGreaterThanOrEqual(59);
    expect(story).toMatch(new RegExp(`^compare_pipeline \\{"pipeline_id":${last}\\}: restore_cache of ${slowJob} accounts for \\+`, 'm'));
    // Since when: the step in that job's stage, from the pipeline it was planted in.
    const largest = finding('list_regressions');
    expect(largest.key).toBe('largest');
    expect(largest.value).toMatchObject({ job: slowJob, part: 'restore_cache', first_pipeline_id: Number(planted) });
    // Where runners are short, and what one more would do.
    const queue = finding('runner_queue_health');
    expect(queue).toMatchObject({ key: 'longest_wait', value: { tags: 'arm64,docker' } });
    const effect = finding('runner_what_if');
    expect(effect.key).toBe('effect');
    expect(effect.value.queue_p95_after_seconds as number).toBeLessThan(effect.value.queue_p95_before_seconds as number);
    // And the rest, each with its finding first, within the answer budget.
    expect(finding('pipeline_critical_path').key).toBe('longest');
    expect(finding('job_trace_summary').key).toBe('slowest_stage');
    expect(finding('list_waste').key).toBe('largest');
    expect(finding('slowest_jobs').key).toBe('slowest');
    for (const [, characters] of story.matchAll(/\((\d+) characters in all\)/g)) expect(Number(characters)).toBeLessThanOrEqual(8000);
  });
});

/** A duration as the demo prints it: `1m 07.1s`, `59.4s`, `800ms`. */
const DURATION = '(?:\\d+m )?[\\d.]+m?s';

/** The lines of `story` from the one that starts with `heading` to the next blank line. */
function section(story: string, heading: string): string {
  const start = story.indexOf(heading);
  expect(start).toBeGreaterThanOrEqual(0);
  const end = story.indexOf('\n\n', start);
  return story.slice(start, end < 0 ? undefined : end);
}

/** `1m 07.1s`, `59.4s`, `800ms` in seconds. */
function unsigned(text: string): number {
  const [, minutes, seconds, millis] = /^(?:(\d+)m )?(?:([\d.]+)s|(\d+)ms)$/.exec(text.trim())!;
  return Number(minutes ?? 0) * 60 + (millis === undefined ? Number(seconds) : Number(millis) / 1000);
}

/** `+1m 00.3s`, `−800ms` in seconds. */
const signedSeconds = (text: string) => (text.trim().startsWith('−') ? -1 : 1) * unsigned(text.trim().slice(1));
