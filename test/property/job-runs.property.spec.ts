import fc from 'fast-check';
import { criticalPath } from '../../src/critical-path/critical-path';
import { runMs } from '../../src/across/job-run';
import { jobRunsOfTrace } from '../../src/across/job-runs-of-trace';
import { ModelNode, SchedulerWorld, schedulerWorld, simulate } from './gitlab-scheduler';
import { traceOf } from './scheduler-spans';

/**
 * The rows of job runs (SPEC §13) against the model of GitLab's scheduler the critical path is checked against
 * (test/property/gitlab-scheduler.ts): generated pipelines with stages, `needs:`, retries, manual and delayed jobs, a
 * resource group, child pipelines, limited runners, drawn as the control plane and GitLab Runner draw them. After each
 * run:
 *
 * - one row per attempt of every job, with GitLab's times and its attempt number;
 * - every job's wait, on the path or off it, named for its true cause, and, where the timing identifies what released
 *   it (the one job of its pipeline that ended last before it became pending, no tie), as long as the model says;
 * - the rows on the path add up to the path's duration exactly, in whole milliseconds.
 *
 * PROPERTY_RUNS and PROPERTY_SEED as in critical-path.property.spec.ts (200 runs, seed 20261207, by default).
 */

const RUNS = Number(process.env.PROPERTY_RUNS ?? 200);
const SEED = process.env.PROPERTY_SEED !== undefined ? Number(process.env.PROPERTY_SEED) : process.env.PROPERTY_RANDOM === undefined ? 20261207 : undefined;
const PROJECT = 42;

/** The node that released `node`, when the trace's timing identifies it: a job of its pipeline that ended last, alone. */
function identifiedReleaser(node: ModelNode, nodes: readonly ModelNode[]): ModelNode | null {
  const releaser = node.releaser;
  if (releaser === 'pipeline' || releaser === 'outside' || releaser.kind !== 'job' || releaser.pipelineId !== node.pipelineId) return null;
  const before = nodes.filter((other) => other !== node && other.pipelineId === node.pipelineId && other.end <= node.pending);
  const latest = Math.max(...before.map((other) => (other.kind === 'bridge' ? other.child!.end : other.end)));
  const atLatest = before.filter((other) => (other.kind === 'bridge' ? other.child!.end : other.end) === latest);
  return atLatest.length === 1 && atLatest[0] === releaser ? releaser : null;
}

function check(world: SchedulerWorld): { waitsCompared: number } {
  const run = simulate(world);
  const trace = traceOf(run);
  const rows = jobRunsOfTrace(trace.spans, PROJECT);
  const jobs = run.nodes.filter((node) => node.kind === 'job');
  expect(rows.map((row) => row.jobId).sort((a, b) => a - b)).toEqual(jobs.map((node) => node.jobId).sort((a, b) => a - b));

  const byId = new Map(jobs.map((node) => [node.jobId, node]));
  let waitsCompared = 0;
  for (const row of rows) {
    const node = byId.get(row.jobId)!;
    expect({ job: row.jobId, attempt: row.attempt, pending: row.pendingAt, started: row.startedAt, end: row.finishedAt }).toEqual({
      job: node.jobId,
      attempt: node.attempt,
      pending: node.pending,
      started: node.started,
      end: node.end,
    });
    expect({ job: row.jobId, waitingFor: row.waitingFor }).toEqual({ job: row.jobId, waitingFor: node.waitKind });
    expect(row.waitMs).toBeGreaterThanOrEqual(0);
    const releaser = identifiedReleaser(node, run.nodes);
    if (row.onCriticalPath !== true && releaser !== null) {
      expect({ job: row.jobId, waitMs: row.waitMs }).toEqual({ job: row.jobId, waitMs: node.pending - releaser.end });
      waitsCompared += 1;
    }
  }

  const path = criticalPath(trace.spans);
  if (path !== null) {
    const onPath = rows.filter((row) => row.onCriticalPath === true);
    const sum = onPath.reduce((total, row) => total + row.waitMs + row.queueMs + runMs(row), 0);
    // A trigger job whose child has no job is the one element of a path without a row: the model draws none.
    expect(sum).toBe(Math.round(path.duration_seconds * 1000));
    expect(onPath.map((row) => row.jobId).sort((a, b) => a - b)).toEqual(path.path.map((element) => element.job_id).sort((a, b) => a - b));
  }
  return { waitsCompared };
}

describe("the rows of job runs against a model of GitLab's scheduler (SPEC §13)", () => {
  it(`generated pipelines (${RUNS} runs${SEED === undefined ? '' : `, seed ${SEED}`})`, () => {
    let compared = 0;
    fc.assert(
      fc.property(schedulerWorld, (world) => {
        compared += check(world).waitsCompared;
      }),
      { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }) },
    );
    // The generated worlds reach the waits of jobs off the path, not only the path's.
    expect(compared).toBeGreaterThan(RUNS / 2);
    process.stdout.write(`job-run rows vs the scheduler model: ${RUNS} worlds, ${compared} waits off the path compared\n`);
  });
});
