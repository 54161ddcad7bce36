import type { PipelineStoryStore, TracedJob } from '../traced-work/traced-work';
import { pipelineSpanIdFor, queueSpanIdFor, spanIdFor } from '../trace-context/trace-context';
import { ControlPlaneSpan, jobSpan, JobEnd, pipelineSpanVersion, PipelineEnd, WrittenPath } from './pipeline-span-model';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';

/**
 * What every source of control-plane spans (pickups, GitLab's hooks, the runner's spans) draws alike (SPEC §10): the
 * ids anyone holding the trace key recomputes, a job's span, and the final story's guard, which lets a version of a
 * pipeline's span go on only if no newer one was emitted already (on any replica).
 */
export class SpanDrawer {
  constructor(
    readonly serviceName: string,
    private readonly traceKey: Buffer,
    private readonly story: Pick<PipelineStoryStore, 'raisePipelineSpanVersion'>,
    private readonly metrics: PipelineSpansMetrics,
    /** How long a version (and what else a hook records) is remembered: OUTBOX_DEDUP_SECONDS. */
    readonly rememberMs: number,
  ) {}

  jobSpanId(jobId: number): string {
    return spanIdFor(this.traceKey, jobId);
  }

  pipelineSpanId(pipelineId: number): string {
    return pipelineSpanIdFor(this.traceKey, pipelineId);
  }

  queueSpanId(jobId: number): string {
    return queueSpanIdFor(this.traceKey, jobId);
  }

  jobSpanOf(job: TracedJob, end: JobEnd, path?: WrittenPath): ControlPlaneSpan {
    return jobSpan(
      this.serviceName,
      { traceId: job.traceId, spanId: this.jobSpanId(job.jobId), parentSpanId: this.pipelineSpanId(job.pipelineId), tracestate: job.tracestate },
      job,
      end,
      path,
    );
  }

  /**
   * The spans of a pipeline's version, unless a newer version of its span was emitted already. The same
   * version goes on (the outbox keeps one copy), so a hook retried after a failed enqueue is not lost.
   * `firstTold` is called when this call is the first, on any replica, to tell of this version (a redelivered,
   * repeated or older hook's is not): with the highest version told before (0: none), for what must count a
   * pipeline's story once (its CI/CD metrics).
   */
  async newerVersion(
    source: string,
    pipelineId: number,
    end: Pick<PipelineEnd, 'finishedAt' | 'status' | 'jobsSeen'>,
    spans: ControlPlaneSpan[],
    firstTold?: (before: number) => void,
  ): Promise<ControlPlaneSpan[]> {
    const version = pipelineSpanVersion(end);
    const { before, highest } = await this.story.raisePipelineSpanVersion(pipelineId, version, this.rememberMs);
    if (before < version) firstTold?.(before);
    if (highest <= version) return spans;
    // Told of already, by a newer version: counted as the outbox counts a copy it drops.
    this.metrics.enqueued(source, { queued: 0, duplicates: spans.length, refused: 0 });
    return [];
  }
}

export function appendTo<K, V>(lists: Map<K, V[]>, key: K, value: V): void {
  const list = lists.get(key);
  if (list === undefined) lists.set(key, [value]);
  else list.push(value);
}
