import fc from 'fast-check';
import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSignalLines, signalFile } from '../collector/collector-files';
import { collectedSpans } from '../otlp/collected-spans';
import { JsonLinesFile } from '../collector/json-lines-file';
import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { CollectorFilesIndex } from './collector-files-index';

/** The embedded backend's index (issue 56 item 3): what was appended since the last read, through the collector's rotations. */
describe("the index of the embedded collector's files", () => {
  const exportLine = (trace: PipelineTrace) => trace.resourceSpans().map((resourceSpans) => JSON.stringify({ resourceSpans: [resourceSpans] }));
  const pipeline = (id: number) =>
    new PipelineTrace(7, id, Date.now() - 3_600_000).job({ jobId: id * 10, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 }).pipeline(id, {
      status: 'success',
      finishedAt: 31,
    });

  it('finds what was appended since the last read, and a line only once it is whole', () => {
    const directory = mkdtempSync(join(tmpdir(), 'cjt-index-'));
    const file = signalFile(directory, 'traces');
    const index = new CollectorFilesIndex(directory);
    index.refresh();
    expect(index.tracesOf('ci.pipeline.id', 1)).toEqual([]);

    const first = pipeline(1);
    appendFileSync(file, exportLine(first).join('\n') + '\n');
    index.refresh();
    expect(index.tracesOf('ci.pipeline.id', 1)).toEqual([first.traceId]);
    expect(index.spansOf(first.traceId)).toHaveLength(first.spans().length);

    // A line being written: not there yet, then whole.
    const second = pipeline(2);
    const [line, ...rest] = exportLine(second);
    appendFileSync(file, line.slice(0, 40));
    index.refresh();
    expect(index.tracesOf('ci.pipeline.id', 2)).toEqual([]);
    appendFileSync(file, line.slice(40) + '\n' + rest.join('\n') + '\n');
    index.refresh();
    expect(index.tracesOf('ci.project.id', 7).sort()).toEqual([first.traceId, second.traceId].sort());
    expect(index.spansOf(second.traceId)).toHaveLength(second.spans().length);
    // The first trace is read as it was: nothing indexed twice.
    expect(index.spansOf(first.traceId)).toHaveLength(first.spans().length);
  });

  it('follows the collector through its rotations: a trace moves to the previous file with its offsets, and goes when that file is replaced', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'cjt-index-'));
    const index = new CollectorFilesIndex(directory);
    const traces = [pipeline(11), pipeline(12), pipeline(13)];
    const lines = traces.map(exportLine);
    const bytes = (trace: string[]) => trace.reduce((sum, line) => sum + Buffer.byteLength(line) + 1, 0);
    // Room for one pipeline's lines a file: each new pipeline rotates the file.
    const writer = new JsonLinesFile(signalFile(directory, 'traces'), Math.max(...lines.map(bytes)) + 1);
    const seen: number[][] = [];
    for (const trace of lines) {
      for (const line of trace) await writer.append(line);
      index.refresh();
      seen.push(traces.map((each) => index.spansOf(each.traceId).length));
    }
    await writer.close();
    const whole = traces.map((trace) => trace.spans().length);
    expect(seen).toEqual([
      [whole[0], 0, 0],
      [whole[0], whole[1], 0],
      [0, whole[1], whole[2]],
    ]);
    expect(index.tracesOf('ci.pipeline.id', 11)).toEqual([]);
  });

  it('after any order of exports, reads and rotations, knows each trace exactly as a reader of both files whole would', async () => {
    // Each step: a pipeline's exports (split over several lines, sent twice or not), then a read or none. The file
    // holds about three pipelines' lines, so rotations fall anywhere: between two lines of one pipeline, between reads.
    const step = fc.record({ pipeline: fc.integer({ min: 1, max: 6 }), jobs: fc.integer({ min: 1, max: 3 }), read: fc.boolean(), twice: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const directory = mkdtempSync(join(tmpdir(), 'cjt-index-'));
        const writer = new JsonLinesFile(signalFile(directory, 'traces'), 9000);
        const index = new CollectorFilesIndex(directory);
        const traces = new Map<number, string>();
        const check = () => {
          index.refresh();
          const whole = collectedSpans({ resourceSpans: readSignalLines(directory, 'traces').flatMap((line) => JSON.parse(line).resourceSpans) });
          for (const [pipelineId, traceId] of traces) {
            const expected = new Set(whole.filter((span) => span.traceId === traceId).map((span) => span.spanId));
            const indexed = index.spansOf(traceId).map((span) => span.spanId);
            expect({ pipelineId, spans: [...indexed].sort() }).toEqual({ pipelineId, spans: [...expected].sort() });
            expect(index.tracesOf('ci.pipeline.id', pipelineId)).toEqual(expected.size === 0 ? [] : [traceId]);
          }
        };
        for (const { pipeline: pipelineId, jobs, read, twice } of steps) {
          const trace = new PipelineTrace(7, pipelineId, Date.now() - 3_600_000);
          for (let job = 0; job < jobs; job += 1)
            trace.job({ jobId: pipelineId * 100 + job, name: `job-${job}`, queuedAt: job, pickedUpAt: job + 1, finishedAt: job + 30 });
          traces.set(pipelineId, trace.traceId);
          for (const line of exportLine(trace)) {
            await writer.append(line);
            if (twice) await writer.append(line);
          }
          if (read) check();
        }
        await writer.close();
        check();
      }),
      { numRuns: 40 },
    );
  }, 60_000);
});
