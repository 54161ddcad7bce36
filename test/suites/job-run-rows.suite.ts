import type { JobRunRow } from '../../src/across/job-run';
import { jobRunsOfTrace } from '../../src/across/job-runs-of-trace';
import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import type { TimeWindow, TraceReads } from '../../src/reads/trace-reads';
import { withCriticalPathAttributes } from '../helpers/critical-path-attributes';
import { PipelineTrace } from '../helpers/pipeline-trace';
import type { ReadsBackend } from '../helpers/reads-cases';

/**
 * SPEC §13 on both backends of the read port: `jobRunRows` gives, for the pipelines of a project created in a window,
 * the rows `jobRunsOfTrace` makes from each whole trace (src/across/job-runs-of-trace.ts), whatever the backend holds
 * them in (the embedded collector's files, read whole; ClickHouse's ci_job_runs, filled by a materialized view). The
 * expected rows are computed here from the traces as built, never typed by hand: what is asserted is that a backend
 * keeps every fact a row needs, picks the window's pipelines and a ref's, and reads no other project's.
 */

const HOUR = 3_600_000;
const PROJECT = 61;
const OTHER = 62;
const SHA = 'bcbb5ec396a2c0f828686f14fac9b80b780504f2';

export interface JobRunRowsWorld {
  readonly exports: OtlpResourceSpans[];
  readonly traces: PipelineTrace[];
  /** The last four hours before `now`. */
  readonly window: TimeWindow;
}

export function jobRunRowsWorld(now = Date.now()): JobRunRowsWorld {
  const hour = (hours: number) => Math.floor((now - hours * HOUR) / 1000) * 1000;
  const window = { fromMs: hour(4), toMs: now };
  // A retried test and a tagged runner, on main.
  const retried = new PipelineTrace(PROJECT, 6100, hour(3))
    .job({
      jobId: 61001,
      name: 'build',
      createdAt: 0,
      queuedAt: 1,
      pickedUpAt: 4,
      finishedAt: 60,
      runner: { id: 5, type: 'group_type', tags: ['linux', 'docker'] },
    })
    .job({
      jobId: 61002,
      name: 'test',
      status: 'failed',
      queuedAt: 61,
      pickedUpAt: 63,
      finishedAt: 90,
      stages: [
        ['restore_cache', 7],
        ['step_script', 20],
      ],
    })
    .job({ jobId: 61003, name: 'test', retriesCount: 1, queuedAt: 120, pickedUpAt: 121, finishedAt: 150 })
    .job({ jobId: 61004, name: 'lint', stage: 'test', allowFailure: true, status: 'failed', queuedAt: 61, pickedUpAt: 62, finishedAt: 70 })
    .pipeline(6100, { status: 'success', finishedAt: 151, ref: 'main', sha: SHA, source: 'push' });
  // A child pipeline through its bridge, on main.
  const parent = new PipelineTrace(PROJECT, 6200, hour(2.5))
    .job({ jobId: 62001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .bridge(62002, 6200, 6201, { createdAt: 31, finishedAt: 90 })
    .job({ jobId: 62011, name: 'compile', pipelineId: 6201, queuedAt: 33, pickedUpAt: 35, finishedAt: 60 })
    .job({ jobId: 62012, name: 'child-test', pipelineId: 6201, queuedAt: 61, pickedUpAt: 62, finishedAt: 88 })
    .pipeline(6201, { status: 'success', createdAt: 31, finishedAt: 90, ref: 'main', source: 'parent_pipeline' }, 62002)
    .job({ jobId: 62003, name: 'deploy', queuedAt: 91, pickedUpAt: 92, finishedAt: 110 })
    .pipeline(6200, { status: 'success', finishedAt: 111, ref: 'main', sha: SHA, source: 'push' });
  // A manual deploy played 40 minutes later, on a release branch; kept by a 10 % head sample (it stands for 10).
  const manual = new PipelineTrace(PROJECT, 6300, hour(2), 'ot=th:e666666666666')
    .job({ jobId: 63001, name: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: 40 })
    .job({ jobId: 63002, name: 'deploy', manual: true, queuedAt: 2400, pickedUpAt: 2410, finishedAt: 2460 })
    .pipeline(6300, { status: 'success', finishedAt: 2461, ref: 'release', source: 'web' });
  // Created before the window, a job played within it: not a pipeline of the window. Its child, created within
  // the window, is (its walk needs its root, read with it).
  const before = new PipelineTrace(PROJECT, 6400, hour(4) - 20 * 60_000)
    .job({ jobId: 64001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .bridge(64002, 6400, 6401, { createdAt: 1500, finishedAt: 1600 })
    .job({ jobId: 64011, name: 'child-build', pipelineId: 6401, queuedAt: 1502, pickedUpAt: 1503, finishedAt: 1590 })
    .pipeline(6401, { status: 'success', createdAt: 1500, finishedAt: 1600, ref: 'main', source: 'parent_pipeline' }, 64002)
    .job({ jobId: 64003, name: 'deploy', manual: true, queuedAt: 1700, pickedUpAt: 1701, finishedAt: 1760 })
    .pipeline(6400, { status: 'success', finishedAt: 1761, ref: 'main', source: 'push' });
  // Still running: no Pipeline Hook yet, one job ended, one running.
  const running = new PipelineTrace(PROJECT, 6500, hour(1))
    .job({ jobId: 65001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .job({ jobId: 65002, name: 'test', queuedAt: 31, pickedUpAt: 32 });
  // Another project's pipeline in the window, with jobs named as this project's are.
  const other = new PipelineTrace(OTHER, 6600, hour(2))
    .job({ jobId: 66001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .pipeline(6600, { status: 'success', finishedAt: 31, ref: 'main' });
  // After the window.
  const later = new PipelineTrace(PROJECT, 6700, now + HOUR)
    .job({ jobId: 67001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .pipeline(6700, { status: 'success', finishedAt: 31, ref: 'main' });
  const traces = [retried, parent, manual, before, running, other, later];
  // The control plane writes the walk's figures on each job span at the root's end (withCriticalPathAttributes, as the
  // service does): ClickHouse reads those rows from its compact columns. Not for the manual pipeline (as if it ended
  // before the service wrote them) nor the running one: those are read as whole traces there.
  const unwritten = new Set([manual, running]);
  const exports = traces.flatMap((trace) => (unwritten.has(trace) ? trace.resourceSpans() : withCriticalPathAttributes(trace.resourceSpans())));
  return { exports, traces, window };
}

const byRun = (a: JobRunRow, b: JobRunRow) => a.pipelineId - b.pipelineId || a.jobId - b.jobId;

/** What a backend should answer: the rows of each whole trace, of the window's pipelines (and on `ref`). */
function expected(world: JobRunRowsWorld, projectId: number, window: TimeWindow, ref?: string): JobRunRow[] {
  return world.traces
    .flatMap((trace) => jobRunsOfTrace(trace.spans(), projectId))
    .filter((row) => row.pipelineCreatedAt >= window.fromMs && row.pipelineCreatedAt <= window.toMs && (ref === undefined || row.ref === ref))
    .sort(byRun);
}

export function describeJobRunRowsConformance(backendName: string, makeBackend: () => Promise<ReadsBackend>): void {
  describe(`the rows of job runs (SPEC §13): ${backendName}`, () => {
    const world = jobRunRowsWorld();
    let backend: ReadsBackend;
    let reads: TraceReads;

    beforeAll(async () => {
      backend = await makeBackend();
      reads = await backend.load(world.exports);
    }, 120_000);

    afterAll(async () => {
      await backend?.close?.();
    });

    it("gives the rows of the project's pipelines created in the window, as each whole trace makes them", async () => {
      const rows = (await reads.jobRunRows(PROJECT, world.window, {})).sort(byRun);
      expect(rows).toEqual(expected(world, PROJECT, world.window));
      // The world reaches what it is built for: a retry, a child pipeline and one created in the window under an
      // earlier root, a manual job, a running pipeline, a weighted pipeline; not the earlier root, another project or later.
      expect([...new Set(rows.map((row) => row.pipelineId))]).toEqual([6100, 6200, 6201, 6300, 6401, 6500]);
      expect(rows.filter((row) => row.retried).map((row) => row.jobId)).toEqual([61002]);
      expect(rows.find((row) => row.jobId === 63002)).toMatchObject({ waitingFor: 'manual', adjustedCount: expect.closeTo(10, 6) });
      expect(rows.find((row) => row.jobId === 61001)).toMatchObject({ runnerId: 5, runnerType: 'group_type', runnerTags: 'docker,linux' });
      expect(rows.find((row) => row.jobId === 61002)?.partsMs.restore_cache).toBe(7000);
      expect(rows.find((row) => row.jobId === 65001)).toMatchObject({ pipelineFinishedAt: null, onCriticalPath: null });
    });

    it("gives one pipeline's rows with its root's, by the root's id or a child's, written or not; none of another project's", async () => {
      const [retried, parent, manual] = world.traces;
      const rowsOf = (trace: PipelineTrace) => jobRunsOfTrace(trace.spans(), PROJECT).sort(byRun);
      const family = rowsOf(parent);
      expect([...new Set(family.map((row) => row.pipelineId))]).toEqual([6200, 6201]);
      expect((await reads.pipelineRunRows(PROJECT, 6200, world.window))?.sort(byRun)).toEqual(family);
      expect((await reads.pipelineRunRows(PROJECT, 6201, world.window))?.sort(byRun)).toEqual(family);
      expect((await reads.pipelineRunRows(PROJECT, 6100, world.window))?.sort(byRun)).toEqual(rowsOf(retried));
      expect((await reads.pipelineRunRows(PROJECT, 6300, world.window))?.sort(byRun)).toEqual(rowsOf(manual));
      expect(await reads.pipelineRunRows(PROJECT, 6600, world.window)).toBeNull();
      expect(await reads.pipelineRunRows(OTHER, 6100, world.window)).toBeNull();
      expect(await reads.pipelineRunRows(PROJECT, 6100, { fromMs: world.window.toMs + 2 * HOUR, toMs: world.window.toMs + 3 * HOUR })).toBeNull();
    });

    it('keeps the rows of one ref', async () => {
      const onMain = (await reads.jobRunRows(PROJECT, world.window, { ref: 'main' })).sort(byRun);
      expect(onMain).toEqual(expected(world, PROJECT, world.window, 'main'));
      expect(onMain.every((row) => row.ref === 'main')).toBe(true);
      expect((await reads.jobRunRows(PROJECT, world.window, { ref: 'release' })).map((row) => row.jobId).sort()).toEqual([63001, 63002]);
      expect(await reads.jobRunRows(PROJECT, world.window, { ref: 'nowhere' })).toEqual([]);
    });

    it("reads no other project's rows, and none outside the window", async () => {
      expect((await reads.jobRunRows(OTHER, world.window, {})).map((row) => [row.projectId, row.jobId])).toEqual([[OTHER, 66001]]);
      expect(await reads.jobRunRows(999, world.window, {})).toEqual([]);
      const earlier = { fromMs: world.window.fromMs - 2 * HOUR, toMs: world.window.fromMs - 1 };
      expect((await reads.jobRunRows(PROJECT, earlier, {})).sort(byRun)).toEqual(expected(world, PROJECT, earlier));
      expect([...new Set((await reads.jobRunRows(PROJECT, earlier, {})).map((row) => row.pipelineId))]).toEqual([6400]);
    });
  });
}
