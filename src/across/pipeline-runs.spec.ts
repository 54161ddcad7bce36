import { jobRunRow, partsOf } from '../../test/helpers/job-run-rows';
import { groupByPipeline, pathMs } from './pipeline-runs';

describe('job runs per root pipeline', () => {
  it("keeps a child pipeline's runs with its root, and takes the root's facts from the root's own runs", () => {
    const root = { rootPipelineId: 10, ref: 'main', sha: 'abc', pipelineFinishedAt: 90_000 };
    const rows = [
      jobRunRow({ ...root, pipelineId: 11, jobId: 3, source: 'parent_pipeline', pipelineCreatedAt: 5_000, pipelineFinishedAt: 80_000 }),
      jobRunRow({ ...root, pipelineId: 10, jobId: 1, source: 'push', pipelineCreatedAt: 1_000, pipelineStatus: 'failed' }),
      jobRunRow({ pipelineId: 9, rootPipelineId: 9, jobId: 2, pipelineCreatedAt: 2_000 }),
    ];
    const pipelines = groupByPipeline(rows);
    expect(pipelines.map((pipeline) => [pipeline.pipelineId, pipeline.rows.length])).toEqual([
      [10, 2],
      [9, 1],
    ]);
    expect(pipelines[0]).toMatchObject({ source: 'push', createdAt: 1_000, finishedAt: 90_000, status: 'failed', sha: 'abc' });
  });

  it("sums the path's wait, queue and run over the runs on it, and knows no path while the pipeline runs", () => {
    const rows = [
      jobRunRow({ waitMs: 1_000, queueMs: 2_000, partsMs: partsOf({ step_script: 30_000, other: 5 }) }),
      jobRunRow({ jobId: 2, waitMs: 1_000, queueMs: 2_000, partsMs: partsOf({ step_script: 90_000 }), onCriticalPath: false }),
    ];
    expect(pathMs({ rows })).toBe(33_005);
    expect(pathMs({ rows: rows.map((row) => ({ ...row, onCriticalPath: null })) })).toBeNull();
  });
});
