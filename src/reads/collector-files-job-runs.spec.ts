import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { localCollectorDirectory, signalFile } from '../collector/collector-files';
import { jobRunsOfTrace } from '../across/job-runs-of-trace';
import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { writeCollectorFiles } from '../../test/helpers/reads-cases';
import { CollectorFilesTraceReads } from './collector-files-reads';

/**
 * SPEC §13 on the embedded files: the rows of each trace are computed once and kept beside the collector's files, so
 * a second read across the month walks no trace again; a trace the collector writes more of is computed again, so a
 * read never answers what the trace said before (a retry, the pipeline's end).
 */
describe('the rows of job runs kept beside the collector files (SPEC §13)', () => {
  const T0 = Date.parse('2026-12-01T10:00:00Z');
  const window = { fromMs: T0 - 3_600_000, toMs: T0 + 3_600_000 };
  const byRun = (a: { jobId: number }, b: { jobId: number }) => a.jobId - b.jobId;

  it('answers the rows of what the files hold now: a job retried after the first read is there at the second', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cjt-kept-rows-'));
    const failed = new PipelineTrace(7, 700, T0)
      .job({ jobId: 7001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 7002, name: 'test', status: 'failed', queuedAt: 31, pickedUpAt: 32, finishedAt: 60 })
      .pipeline(700, { status: 'failed', finishedAt: 61, ref: 'main' });
    const other = new PipelineTrace(7, 701, T0 + 60_000)
      .job({ jobId: 7101, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .pipeline(701, { status: 'success', finishedAt: 31, ref: 'main' });
    writeCollectorFiles(dataDir, [...failed.resourceSpans(), ...other.resourceSpans()]);
    const reads = new CollectorFilesTraceReads(localCollectorDirectory(dataDir));

    const first = (await reads.jobRunRows(7, window, {})).sort(byRun);
    expect(first.map((row) => [row.jobId, row.status, row.retried])).toEqual([
      [7001, 'success', false],
      [7002, 'failed', false],
      [7101, 'success', false],
    ]);
    // Asked again, unchanged: the same rows.
    expect((await reads.jobRunRows(7, window, {})).sort(byRun)).toEqual(first);

    // test retried and passing, the pipeline ending again: the collector appends the new spans to its file.
    const retried = new PipelineTrace(7, 700, T0)
      .job({ jobId: 7001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 7002, name: 'test', status: 'failed', queuedAt: 31, pickedUpAt: 32, finishedAt: 60 })
      .job({ jobId: 7003, name: 'test', retriesCount: 1, queuedAt: 120, pickedUpAt: 121, finishedAt: 150 })
      .pipeline(700, { status: 'success', finishedAt: 151, ref: 'main' });
    const added = retried
      .resourceSpans()
      .filter((resourceSpans) => !failed.resourceSpans().some((sent) => JSON.stringify(sent) === JSON.stringify(resourceSpans)));
    appendFileSync(
      signalFile(localCollectorDirectory(dataDir), 'traces'),
      added.map((resourceSpans) => `${JSON.stringify({ resourceSpans: [resourceSpans] })}\n`).join(''),
    );

    const second = (await reads.jobRunRows(7, window, {})).sort(byRun);
    expect(second.map((row) => [row.jobId, row.status, row.retried])).toEqual([
      [7001, 'success', false],
      [7002, 'failed', true],
      [7003, 'success', false],
      [7101, 'success', false],
    ]);
    expect(second.filter((row) => row.pipelineId === 700)).toEqual(jobRunsOfTrace(retried.spans(), 7).sort(byRun));
    expect(second.find((row) => row.jobId === 7003)?.pipelineStatus).toBe('success');
  });
});
