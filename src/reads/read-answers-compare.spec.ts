import { generatedProject } from '../../test/helpers/job-run-rows';
import type { JobRunRow } from '../across/job-run';
import { groupByPipeline } from '../across/pipeline-runs';
import { inWindow } from './clickhouse-job-runs';
import { answerRead, ReadOutcome, ReadTask } from './read-answers';
import type { TimeWindow, TraceReads } from './trace-reads';

const DAY_MS = 86_400_000;

/** A backend over rows in memory: the window reads every port has, and how many times they were asked. */
function rowsBackend(rows: readonly JobRunRow[]) {
  const calls = { windows: 0 };
  const backend = {
    async jobRunRows(_projectId: number, window: TimeWindow, filter: { readonly ref?: string }) {
      calls.windows++;
      return inWindow(rows, window, filter.ref);
    },
    async pipelineRunRows(_projectId: number, pipelineId: number) {
      const root = rows.find((row) => row.pipelineId === pipelineId)?.rootPipelineId;
      const family = rows.filter((row) => row.rootPipelineId === root);
      return family.length === 0 ? null : family;
    },
  } as unknown as TraceReads;
  return { backend, calls };
}

/** As ClickHouse lists them: the latest ended roots of the ref created in the window, at most `count`, `keep` of them read. */
function withLatest(rows: readonly JobRunRow[], keep: (pipelineIds: number[]) => number[] = (ids) => ids) {
  const { backend, calls } = rowsBackend(rows);
  const latestEndedRunRows: NonNullable<TraceReads['latestEndedRunRows']> = async (_projectId, latest, window) => {
    const listed = groupByPipeline(inWindow(rows, window, latest.ref))
      .filter((pipeline) => pipeline.pipelineId !== latest.except && pipeline.finishedAt !== null && pipeline.createdAt < window.toMs)
      .sort((a, b) => b.createdAt - a.createdAt || b.pipelineId - a.pipelineId)
      .slice(0, latest.count)
      .map((pipeline) => pipeline.pipelineId);
    const read = new Set(keep(listed));
    return { rows: rows.filter((row) => read.has(row.rootPipelineId)), complete: listed.length < latest.count };
  };
  return { backend: Object.assign(backend, { latestEndedRunRows }), calls };
}

/** The answer as a client reads it. */
const text = (outcome: ReadOutcome) => (outcome.kind === 'answer' ? Buffer.from(outcome.body).toString() : JSON.stringify(outcome));

describe("a compare's default baseline (SPEC §13)", () => {
  // A pipeline every 20 minutes over three days: more than 20 a day, and a target late enough to have them all.
  const rows = generatedProject({ seed: 7, pipelines: 200, retryRate: 0.1 });
  const pipelines = groupByPipeline(rows);
  const compare = (pipelineId: number): ReadTask => ({
    read: 'compare',
    projectId: 7,
    pipelineId,
    baselineId: null,
    window: { fromMs: pipelines[0].createdAt - DAY_MS, toMs: pipelines[pipelines.length - 1].createdAt + DAY_MS },
    lookbackMs: 30 * DAY_MS,
  });

  it('is the same pipeline whether the backend lists the latest ended ones or the window is read', async () => {
    for (const target of [pipelines[5], pipelines[100], pipelines[199]]) {
      const windowed = await answerRead(rowsBackend(rows).backend, compare(target.pipelineId));
      const listing = withLatest(rows);
      const listed = await answerRead(listing.backend, compare(target.pipelineId));
      expect(text(listed)).toEqual(text(windowed));
      expect(text(listed)).toContain('"baseline"');
      // Listed: no window read at all.
      expect(listing.calls.windows).toBe(0);
    }
  });

  it('reads the window when too few of those listed can be chosen from, and chooses the same', async () => {
    const target = pipelines[150];
    const windowed = await answerRead(rowsBackend(rows).backend, compare(target.pipelineId));
    // Of the 40 listed, only 10 turn out to have rows to choose from (another source said by the runner, no path yet).
    const listing = withLatest(rows, (ids) => ids.slice(0, 10));
    const listed = await answerRead(listing.backend, compare(target.pipelineId));
    expect(text(listed)).toEqual(text(windowed));
    expect(listing.calls.windows).toBeGreaterThan(0);
  });

  it('says there is nothing to compare with when the listing is complete and empty, without reading a month', async () => {
    const listing = withLatest(rows);
    const first = await answerRead(listing.backend, compare(pipelines[0].pipelineId));
    expect(first).toMatchObject({ kind: 'unanswerable' });
    expect(listing.calls.windows).toBe(0);
  });
});
