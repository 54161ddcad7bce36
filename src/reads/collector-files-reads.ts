import type { JobRunRow } from '../across/job-run';
import { jobRunsOfTrace } from '../across/job-runs-of-trace';
import { trustedSpans } from '../otlp/control-plane-mark';
import { CollectorFilesIndex, versionOf } from './collector-files-index';
import { jobRunsOf } from './job-runs';
import { JobSummary, summarizeJobs } from './job-summary';
import { carriesId } from '../otlp/span-identity';
import { byStart, countedFor, spanRank } from './trace-selection';
import { findsWithin, overlapsWindow, StoredSpan, TimeWindow, TraceBound, TraceRead, TraceReads } from './trace-reads';

/**
 * The read port over the embedded collector's files (`<DATA_DIR>/otlp/traces.jsonl` and the file before it), so
 * `npm start` answers SPEC §12's questions with no server. Each read first indexes what was appended since the one
 * before (src/reads/collector-files-index.ts), then decodes the lines of the traces it needs, nothing else. Each span
 * once, in its latest version (SPEC §10); a line that does not decode is skipped, as a reader of the Collector's file
 * exporter would. Synchronous work: the service runs it in a worker thread (src/reads/reads-pool.ts).
 */
export class CollectorFilesTraceReads implements TraceReads {
  private readonly index: CollectorFilesIndex;
  /** By trace id: its job-run rows per project, as of the revision of its lines they were computed at. */
  private readonly rows = new Map<string, { readonly revision: string | null; readonly byProject: Map<number, JobRunRow[]> }>();

  constructor(directory: string) {
    this.index = new CollectorFilesIndex(directory);
  }

  async prepare(): Promise<void> {
    this.index.refresh();
  }

  async pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    const identifies = (span: StoredSpan) => carriesId(span, 'ci.pipeline.id', pipelineId) && carriesId(span, 'ci.project.id', projectId);
    return this.boundedTraceOf('ci.pipeline.id', pipelineId, window, identifies, bound.limit, projectId);
  }

  async jobTrace(projectId: number, jobId: number, window: TimeWindow, bound: TraceBound): Promise<TraceRead | null> {
    const identifies = (span: StoredSpan) => carriesId(span, 'ci.job.id', jobId) && carriesId(span, 'ci.project.id', projectId);
    return this.boundedTraceOf('ci.job.id', jobId, window, identifies, bound.limit, projectId, jobId);
  }

  async projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobSummary[]> {
    this.index.refresh();
    const runs = [];
    for (const traceId of this.index.tracesOf('ci.project.id', projectId).sort()) {
      if (!this.index.mayOverlap(traceId, window.fromMs - 1, window.toMs + 1)) continue;
      const spans = trustedSpans(this.index.spansOf(traceId));
      if (!spans.some((span) => span.name === 'job' && carriesId(span, 'ci.project.id', projectId) && overlapsWindow(span, window))) continue;
      runs.push(...jobRunsOf(spans, projectId, window, ref));
    }
    return summarizeJobs(runs);
  }

  /**
   * SPEC §13, from whole traces as projectJobs reads them: each trace of the project whose spans may reach into the
   * window (a pipeline's span starts at its creation, within its trace's first and last span) gives its rows, and
   * those of pipelines created within the window are kept.
   */
  async jobRunRows(projectId: number, window: TimeWindow, filter: { readonly ref?: string }): Promise<JobRunRow[]> {
    this.index.refresh();
    const rows: JobRunRow[] = [];
    for (const traceId of this.index.tracesOf('ci.project.id', projectId).sort()) {
      if (!this.index.mayOverlap(traceId, window.fromMs, window.toMs)) continue;
      for (const row of this.keptRows(traceId, projectId)) {
        if (row.pipelineCreatedAt < window.fromMs || row.pipelineCreatedAt > window.toMs) continue;
        if (filter.ref !== undefined && row.ref !== filter.ref) continue;
        rows.push(row);
      }
    }
    return rows;
  }

  /**
   * A trace's rows of one project, computed from its spans once and kept while its lines stay as they were (SPEC §13's
   * rows beside the collector's files): a read across a month decodes and walks only the traces that changed since
   * the last. Kept for the traces the files hold, at most, and dropped with them.
   */
  private keptRows(traceId: string, projectId: number): readonly JobRunRow[] {
    const revision = this.index.revisionOf(traceId);
    let kept = this.rows.get(traceId);
    if (kept === undefined || kept.revision !== revision) {
      kept = { revision, byProject: new Map() };
      this.rows.set(traceId, kept);
    }
    let rows = kept.byProject.get(projectId);
    if (rows === undefined) {
      rows = jobRunsOfTrace(trustedSpans(this.index.spansOf(traceId)), projectId);
      kept.byProject.set(projectId, rows);
    }
    if (this.rows.size > 2 * this.index.size + 100) {
      for (const id of this.rows.keys()) if (this.index.revisionOf(id) === null) this.rows.delete(id);
    }
    return rows;
  }

  /** SPEC §13: the pipeline's whole trace (its root's, child pipelines included), as jobRunsOfTrace makes its rows. */
  async pipelineRunRows(projectId: number, pipelineId: number, window: TimeWindow): Promise<JobRunRow[] | null> {
    const read = await this.pipelineTrace(projectId, pipelineId, window, { limit: 0 });
    const rows = read === null ? [] : jobRunsOfTrace(read.spans, projectId);
    return rows.length === 0 ? null : rows;
  }

  /**
   * The first trace (by id) holding a span within `window` that `identifies`, bounded as the port says: every
   * structural span within the window (latest version), and of the rest counted for the read the first `limit` by
   * start, with their count. Decoded a line at a time, the rest kept to at most about twice `limit`, so a read of a
   * 100,000-span trace holds its structural spans and a few thousand others, not the whole trace.
   */
  private boundedTraceOf(
    key: 'ci.pipeline.id' | 'ci.job.id',
    id: number,
    window: TimeWindow,
    identifies: (span: StoredSpan) => boolean,
    limit: number,
    projectId: number,
    jobId?: number,
  ): TraceRead | null {
    this.index.refresh();
    const keep = Math.max(0, limit);
    for (const traceId of this.index.tracesOf(key, id).sort()) {
      if (!this.index.mayOverlap(traceId, window.fromMs, window.toMs)) continue;
      const runners = this.index.runnerSpanIds(traceId);
      const structural = new Map<string, StoredSpan>();
      const seen = new Set<string>();
      let rest: StoredSpan[] = [];
      let found = false;
      this.index.visit(traceId, (span) => {
        if (!overlapsWindow(span, window)) return;
        found ||= findsWithin(span, window) && identifies(span);
        if (spanRank(span, runners) < 3) {
          const kept = structural.get(span.spanId);
          if (kept === undefined || versionOf(span) > versionOf(kept)) structural.set(span.spanId, span);
        } else if (!seen.has(span.spanId) && countedFor(span, projectId, jobId)) {
          seen.add(span.spanId);
          rest.push(span);
          if (rest.length >= 2 * keep + 1024) rest = rest.sort(byStart).slice(0, keep);
        }
      });
      if (found) return { spans: [...structural.values(), ...rest.sort(byStart).slice(0, keep)], others: seen.size };
    }
    return null;
  }
}
