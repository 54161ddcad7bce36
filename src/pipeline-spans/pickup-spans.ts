import { LRUCache } from 'lru-cache';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Remembered, TracedJob, TracedPipeline, tracedPipelineOf } from '../traced-work/traced-work';
import { ControlPlaneSpan, queueWaitSpan } from './pipeline-span-model';
import { SpanDrawer } from './drawn-spans';
import { atSliceBoundary } from './pickup-batch';

/**
 * Every job of a pipeline names the same pipeline record: one written by this process in the last
 * minute, to last at least as long as a new job needs, is not written again. Bounded so that a record
 * the store lost (a failover, a flush) is written again by the next pickup after at most a minute.
 */
const RECORDED_PIPELINES_MAX = 10_000;
const RECORDED_PIPELINE_MEMO_MS = 60_000;

/** One enabled pickup, waiting in the batch. */
export interface Pickup {
  readonly job: TracedJob;
  /** How long its pipelines must be remembered: as long as the job's grant can live. */
  readonly ttlMs: number;
  readonly jobSpanId: string;
}

/** What a batch of pickups tells (SPEC §10): the pipeline records to write, and each job's queue wait. */
export interface PickupsTold {
  readonly pipelines: readonly Remembered<TracedPipeline>[];
  readonly spans: readonly ControlPlaneSpan[];
}

/**
 * The pickup's part of the control-plane spans: which pipelines are traced (the job's own, and the root it names,
 * whose project it can only guess: see tracedPipelineOf) and the queue wait, from `queued_at` to the pickup.
 */
export class PickupSpans {
  /** Epoch ms until which this process has had each pipeline recorded (see RECORDED_PIPELINE_MEMO_MS). */
  private readonly recordedPipelines = new LRUCache<number, number>({ max: RECORDED_PIPELINES_MAX, ttl: RECORDED_PIPELINE_MEMO_MS });

  constructor(
    private readonly drawer: SpanDrawer,
    private readonly keyed: boolean,
  ) {}

  async told(batch: readonly Pickup[], now: number): Promise<PickupsTold> {
    const pipelines = new Map<number, Remembered<TracedPipeline>>();
    const spans: ControlPlaneSpan[] = [];
    for (const [index, { job, ttlMs, jobSpanId }] of batch.entries()) {
      if (atSliceBoundary(index)) await nextTurn();
      for (const pipelineId of [job.pipelineId, job.rootPipelineId]) {
        // Written lately to last about as long (within the memo's minute): not written again at every pickup.
        if ((this.recordedPipelines.get(pipelineId) ?? 0) >= now + ttlMs - RECORDED_PIPELINE_MEMO_MS) continue;
        if ((pipelines.get(pipelineId)?.ttlMs ?? 0) < ttlMs) pipelines.set(pipelineId, { value: tracedPipelineOf(job, pipelineId), ttlMs });
      }
      if (this.keyed && job.queuedAt !== undefined) {
        const place = { traceId: job.traceId, spanId: this.drawer.queueSpanId(job.jobId), parentSpanId: jobSpanId, tracestate: job.tracestate };
        spans.push(queueWaitSpan(this.drawer.serviceName, place, { ...job, queuedAt: job.queuedAt }));
      }
    }
    return { pipelines: [...pipelines.values()], spans };
  }

  /** The store took the batch's pipelines: not written again by this process for a while. */
  recorded(pipelines: readonly Remembered<TracedPipeline>[], now: number): void {
    for (const { value, ttlMs } of pipelines) this.recordedPipelines.set(value.pipelineId, now + ttlMs);
  }
}
