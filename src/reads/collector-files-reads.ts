import { statSync } from 'node:fs';
import { previousFile, readSignalLines, signalFile } from '../collector/collector-files';
import { collectedSpans } from '../otlp/collected-spans';
import { decodeExportRequest } from '../otlp/otlp-receiver';
import { keptVersionOf, trustedSpans } from '../otlp/control-plane-mark';
import { jobRunsOf } from './job-runs';
import { carriesId } from './trace-selection';
import type { JobRun, StoredSpan, TimeWindow, TraceReads } from './trace-reads';

const ms = (nanos: bigint) => Number(nanos / 1_000_000n);
const overlaps = (span: StoredSpan, window: TimeWindow) => ms(span.endNanos) >= window.fromMs && ms(span.startNanos) <= window.toMs;

/**
 * The read port over the embedded collector's files (`<DATA_DIR>/otlp/traces.jsonl` and the file before it), so
 * `npm start` answers SPEC §12's questions with no server. The files are read whole, and again only when one of
 * them changed (size or modification time): the embedded collector is for one machine and small volumes. Each span
 * once, in its latest version (SPEC §10: a pipeline or bridge span sent again with the same id and a higher
 * version); a line that does not decode is skipped, as a reader of the Collector's file exporter would.
 */
export class CollectorFilesTraceReads implements TraceReads {
  private cache?: { readonly stamp: string; readonly traces: ReadonlyMap<string, StoredSpan[]> };

  constructor(private readonly directory: string) {}

  async pipelineTrace(projectId: number, pipelineId: number, window: TimeWindow): Promise<StoredSpan[] | null> {
    return this.traceOf(window, (span) => carriesId(span, 'ci.pipeline.id', pipelineId) && carriesId(span, 'ci.project.id', projectId));
  }

  async jobTrace(projectId: number, jobId: number, window: TimeWindow): Promise<StoredSpan[] | null> {
    return this.traceOf(window, (span) => carriesId(span, 'ci.job.id', jobId) && carriesId(span, 'ci.project.id', projectId));
  }

  async projectJobs(projectId: number, window: TimeWindow, ref?: string): Promise<JobRun[]> {
    const runs: JobRun[] = [];
    for (const trace of this.traces().values()) {
      const spans = trustedSpans(trace);
      if (!spans.some((span) => span.name === 'job' && carriesId(span, 'ci.project.id', projectId) && overlaps(span, window))) continue;
      runs.push(...jobRunsOf(spans, projectId, window, ref));
    }
    return runs;
  }

  /** The spans within `window` of the trace holding a span that `identifies` within it. */
  private traceOf(window: TimeWindow, identifies: (span: StoredSpan) => boolean): StoredSpan[] | null {
    for (const spans of this.traces().values()) {
      if (spans.some((span) => overlaps(span, window) && identifies(span))) return spans.filter((span) => overlaps(span, window));
    }
    return null;
  }

  private traces(): ReadonlyMap<string, StoredSpan[]> {
    const stamp = this.stamp();
    if (this.cache?.stamp === stamp) return this.cache.traces;
    const latest = new Map<string, StoredSpan>();
    for (const line of readSignalLines(this.directory, 'traces')) {
      let spans: StoredSpan[];
      try {
        spans = collectedSpans(decodeExportRequest('traces', 'json', Buffer.from(line)));
      } catch {
        continue;
      }
      for (const span of spans) {
        const key = `${span.traceId}/${span.spanId}`;
        const kept = latest.get(key);
        // The control plane's copy over any other, then its latest version: never a job's copy of GitLab's account.
        if (kept === undefined || keptVersionOf(span) > keptVersionOf(kept)) latest.set(key, span);
      }
    }
    const traces = new Map<string, StoredSpan[]>();
    for (const span of latest.values()) {
      const trace = traces.get(span.traceId);
      if (trace === undefined) traces.set(span.traceId, [span]);
      else trace.push(span);
    }
    this.cache = { stamp, traces };
    return traces;
  }

  private stamp(): string {
    const file = signalFile(this.directory, 'traces');
    return [previousFile(file), file]
      .map((path) => {
        try {
          const stats = statSync(path);
          return `${stats.size}:${stats.mtimeMs}`;
        } catch {
          return '-';
        }
      })
      .join('|');
  }
}
