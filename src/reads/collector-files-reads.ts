import { CollectorFilesIndex } from './collector-files-index';
import { jobRunsOf } from './job-runs';
import { JobSummary, summarizeJobs } from './job-summary';
import { boundedTrace, carriesId } from './trace-selection';
import { overlapsWindow, StoredSpan, TimeWindow, TraceBound, TraceRead, TraceReads } from './trace-reads';

/**
 * The read port over the embedded collector's files (`<DATA_DIR>/otlp/traces.jsonl` and the file before it), so
 * `npm start` answers SPEC §12's questions with no server. Each read first indexes what was appended since the one
 * before (src/reads/collector-files-index.ts), then decodes the lines of the traces it needs, nothing else. Each span
 * once, in its latest version (SPEC §10); a line that does not decode is skipped, as a reader of the Collector's file
 * exporter would. Synchronous work: the service runs it in a worker thread (src/reads/reads-pool.ts).
 */
export class CollectorFilesTraceReads implements TraceReads {
  private readonly index: CollectorFilesIndex;

  constructor(directory: string) {
    this.index = new CollectorFilesIndex(directory);
  }

  async pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    const identifies = (span: StoredSpan) => carriesId(span, 'ci.pipeline.id', pipelineId) && carriesId(span, 'ci.project.id', projectId);
    const spans = this.traceOf('ci.pipeline.id', pipelineId, window, identifies);
    return spans === null ? null : boundedTrace(spans, bound.limit, projectId);
  }

  async jobTrace(projectId: number, jobId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    const identifies = (span: StoredSpan) => carriesId(span, 'ci.job.id', jobId) && carriesId(span, 'ci.project.id', projectId);
    const spans = this.traceOf('ci.job.id', jobId, window, identifies);
    return spans === null ? null : boundedTrace(spans, bound.limit, projectId, jobId);
  }

  async projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobSummary[]> {
    this.index.refresh();
    const runs = [];
    for (const traceId of this.index.tracesOf('ci.project.id', projectId).sort()) {
      if (!this.index.mayOverlap(traceId, window.fromMs - 1, window.toMs + 1)) continue;
      const spans = this.index.spansOf(traceId);
      if (!spans.some((span) => span.name === 'job' && carriesId(span, 'ci.project.id', projectId) && overlapsWindow(span, window))) continue;
      runs.push(...jobRunsOf(spans, projectId, window, ref));
    }
    return summarizeJobs(runs);
  }

  /** The spans within `window` of the first trace (by id) holding a span that `identifies` within it. */
  private traceOf(key: 'ci.pipeline.id' | 'ci.job.id', id: number, window: TimeWindow, identifies: (span: StoredSpan) => boolean): StoredSpan[] | null {
    this.index.refresh();
    for (const traceId of this.index.tracesOf(key, id).sort()) {
      if (!this.index.mayOverlap(traceId, window.fromMs, window.toMs)) continue;
      const spans = this.index.spansOf(traceId).filter((span) => overlapsWindow(span, window));
      if (spans.some(identifies)) return spans;
    }
    return null;
  }
}
