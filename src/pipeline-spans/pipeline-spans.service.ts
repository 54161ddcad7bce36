import { Inject, Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { bundled, type EnqueueOutcome, type OutboxEntry, type OutboxStore } from '../outbox/outbox';
import { OUTBOX_STORE } from '../outbox/outbox.constants';
import { MIN_TRACED_MEMORY_MS, Remembered, RunnerJobEnd, TracedJob, TracedPipeline, tracedPipelineOf, TracedWorkStore } from '../traced-work/traced-work';
import { withTimeout } from '../observability/with-timeout';
import { gitlabPipelineSpanIdFor, gitlabTraceIdFor, pipelineSpanIdFor, queueSpanIdFor, spanIdFor } from '../trace-context/trace-context';
import { FinishedJob, PipelineEvent, WebhookEvent } from './pipeline-events';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';
import {
  BridgeJob,
  bridgeSpan,
  ControlPlaneSpan,
  jobSpan,
  JobEnd,
  outboxKeyOf,
  pipelineSeenFromJobs,
  pipelineSpan,
  pipelineSpanVersion,
  PipelineEnd,
  queueWaitSpan,
  SpanPlace,
  WrittenPath,
} from './pipeline-span-model';
import { writtenCriticalPath } from './pipeline-critical-path';
import { PickupBatch } from './pickup-batch';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { OutboxDeliverer } from '../outbox/outbox-deliverer';

/**
 * What a webhook's spans became, as its answer tells GitLab's webhook log: in the outbox, or (a pipeline traced
 * provisionally, SPEC §11) parked until its outcome, or dropped with a pipeline outcome sampling has dropped.
 */
export interface WebhookOutcome extends EnqueueOutcome {
  readonly parked: number;
  readonly dropped: number;
}

const NOTHING: WebhookOutcome = { queued: 0, duplicates: 0, refused: 0, parked: 0, dropped: 0 };

/**
 * Pickups' pipelines and queue waits are written to the store together (see PickupBatch): the first
 * waits at most this long. The queue-wait spans then linger in the outbox before delivery too, so they
 * reach the collector within about a tenth of a second of the pickup either way.
 */
const PICKUP_LINGER_MS = 50;
/** As the outbox's claims (outbox-deliverer.ts): a batch's one script holds Redis for every pickup's grant write. */
const PICKUP_BATCH_MAX = 100;
/**
 * Spans are made JSON (a pickup batch's also built) this many at a time, the event loop let go between: a batch of 25
 * to 100 pickups is 0.3 to 1.5 ms of work, which a pickup arriving meanwhile would otherwise wait behind whole; in
 * slices it waits behind one (about 60 µs). Measured in GitLab's view (bench:ruby-client, docs/performance.md).
 */
const SPANS_PER_TURN = 5;
/**
 * Lets the event loop go at each slice's boundary, nothing in between: a promise only every SPANS_PER_TURN items, so
 * the items within a slice cost no microtask each (`if (atSliceBoundary(i)) await nextTurn()`).
 */
const atSliceBoundary = (index: number): boolean => index > 0 && index % SPANS_PER_TURN === 0;
/**
 * Every job of a pipeline names the same pipeline record: one written by this process in the last
 * minute, to last at least as long as a new job needs, is not written again. Bounded so that a record
 * the store lost (a failover, a flush) is written again by the next pickup after at most a minute.
 */
const RECORDED_PIPELINES_MAX = 10_000;
const RECORDED_PIPELINE_MEMO_MS = 60_000;
/**
 * Jobs whose span this process closed from their runner's `job_execution` span: a repeat costs nothing
 * (issue 29). Bounded: a job forgotten here and repeated later costs one store write again, which the
 * outbox drops as the copy it is, as it does a close by another replica.
 */
const CLOSED_FROM_RUNNER_MAX = 10_000;
/** Jobs of a hook's pipeline looked up when the pipeline's record is not found (one store read each, in parallel). */
const PIPELINE_JOBS_LOOKED_UP = 20;

/**
 * A chapter of a root pipeline's story (PipelineStoryStore): a job as its span was drawn, or a bridge as its child
 * pipeline's hook told it; what its critical path is computed from at the root pipeline's end.
 */
type Chapter =
  | { readonly kind: 'job'; readonly job: TracedJob; readonly end: FinishedJob; readonly toldBy: 'job_hook' | 'pipeline_hook' }
  | { readonly kind: 'bridge'; readonly place: SpanPlace; readonly bridge: BridgeJob; readonly child: PipelineEnd };

/** One enabled pickup, waiting in the batch. */
interface Pickup {
  readonly job: TracedJob;
  /** How long its pipelines must be remembered: as long as the job's grant can live. */
  readonly ttlMs: number;
  readonly jobSpanId: string;
}

/**
 * SPEC §10: which spans the control plane emits, and when. Facts come from the pickup (the decorator),
 * GitLab's webhooks, and, without webhooks, the runner's `job_execution` span seen by the gateway; spans
 * go to the store's outbox, from which {@link OutboxDeliverer} sends them to the collector. Each span
 * has a fixed id, so whichever source tells of it first emits it and the outbox drops any later copy.
 * A pipeline's span (and a bridge's, drawn from its child pipeline) follows the pipeline's story instead:
 * emitted again, same id, as each newer version of its facts appears (see pipelineSpanVersion); the outbox
 * keeps each version once, and a version older than one emitted already is not emitted at all.
 */
@Injectable()
export class PipelineSpansService implements OnModuleDestroy {
  private readonly logger = new Logger(PipelineSpansService.name);
  private readonly serviceName: string;
  private readonly limits: { maxSpans: number; rememberMs: number };
  private readonly pipelineMemoryMs: number;
  private readonly pickups = new PickupBatch<Pickup>((batch) => this.writePickups(batch), PICKUP_LINGER_MS, PICKUP_BATCH_MAX);
  /** Epoch ms until which this process has had each pipeline recorded (see RECORDED_PIPELINE_MEMO_MS). */
  private readonly recordedPipelines = new LRUCache<number, number>({ max: RECORDED_PIPELINES_MAX, ttl: RECORDED_PIPELINE_MEMO_MS });
  private readonly closedFromRunner = new LRUCache<number, true>({ max: CLOSED_FROM_RUNNER_MAX });

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(TRACED_WORK_STORE) private readonly store: TracedWorkStore,
    @Inject(OUTBOX_STORE) private readonly outbox: OutboxStore,
    private readonly deliverer: OutboxDeliverer,
    private readonly metrics: PipelineSpansMetrics,
    private readonly outcomeSampling: OutcomeSamplingService,
  ) {
    this.serviceName = config.PIPELINE_SPANS_SERVICE_NAME;
    this.limits = { maxSpans: config.OUTBOX_MAX_SPANS, rememberMs: config.OUTBOX_DEDUP_SECONDS * 1000 };
    this.pipelineMemoryMs = config.OUTCOME_SAMPLING_MAX_WAIT_SECONDS * 1000;
  }

  /** Whether GitLab's webhooks close job spans; otherwise the gateway does, from the runner's span. */
  get webhooksConfigured(): boolean {
    return this.config.GITLAB_WEBHOOK_SECRET_FILE !== undefined;
  }

  /** Pickups still waiting in the batch are written before the store closes (its module stops after this one). */
  async onModuleDestroy(): Promise<void> {
    await this.pickups.flushed();
  }

  /**
   * At an enabled pickup, whose traced job the decorator stored with its grant: remembers the job's
   * pipelines for as long as its grant can live, and emits its queue wait. Never throws and never delays
   * the pickup: these are written with other pickups' within PICKUP_LINGER_MS, and a slow or failing store
   * only loses these spans, and says so (SPEC §4). `jobSpanId` is the job's `span_parent_id`, which the
   * decorator has derived already.
   */
  recordPickup(job: TracedJob, grantExpiresAt: number, jobSpanId: string): void {
    // A pipeline outlives its jobs' grants (untraced jobs after them, a manual gate): its record lasts at least the
    // time a pipeline is given to end (the outcome-sampling time limit), and each of its hooks lengthens it.
    const ttlMs = Math.max(MIN_TRACED_MEMORY_MS, this.pipelineMemoryMs, grantExpiresAt - job.pickedUpAt);
    this.pickups.add({ job, ttlMs, jobSpanId });
  }

  /** Never throws (the batch is not awaited by anyone who could handle it): a failure is counted and logged. */
  private async writePickups(batch: readonly Pickup[]): Promise<void> {
    try {
      const now = Date.now();
      const pipelines = new Map<number, Remembered<TracedPipeline>>();
      const spans: ControlPlaneSpan[] = [];
      for (const [index, { job, ttlMs, jobSpanId }] of batch.entries()) {
        if (atSliceBoundary(index)) await nextTurn();
        for (const pipelineId of [job.pipelineId, job.rootPipelineId]) {
          // Written lately to last about as long (within the memo's minute): not written again at every pickup.
          if ((this.recordedPipelines.get(pipelineId) ?? 0) >= now + ttlMs - RECORDED_PIPELINE_MEMO_MS) continue;
          if ((pipelines.get(pipelineId)?.ttlMs ?? 0) < ttlMs) pipelines.set(pipelineId, { value: tracedPipelineOf(job, pipelineId), ttlMs });
        }
        if (this.config.TRACE_ID_SCHEME === 'keyed' && job.queuedAt !== undefined) {
          const place = { traceId: job.traceId, spanId: queueSpanIdFor(this.secrets.traceKey, job.jobId), parentSpanId: jobSpanId, tracestate: job.tracestate };
          spans.push(queueWaitSpan(this.serviceName, place, { ...job, queuedAt: job.queuedAt }));
        }
      }
      const provisional = batch.filter(({ job }) => job.outcomePolicy !== undefined).map(({ job }) => job);
      const spanEntries = await this.spanEntries(spans, Date.now());
      await withTimeout(
        () =>
          Promise.all([
            pipelines.size === 0 ? undefined : this.store.recordTracedPipelines([...pipelines.values()]),
            this.enqueueEntries(spanEntries, 'pickup', true),
            provisional.length === 0 ? undefined : this.outcomeSampling.notePickups(provisional),
          ]),
        Math.max(this.config.STORE_TIMEOUT_MS, this.config.REDIS_COMMAND_TIMEOUT_MS),
      );
      for (const { value, ttlMs } of pipelines.values()) this.recordedPipelines.set(value.pipelineId, now + ttlMs);
    } catch (error) {
      this.metrics.storeFailure('record_pickup');
      const jobIds = batch.length === 1 ? `job ${batch[0].job.jobId}` : `${batch.length} jobs (${batch[0].job.jobId}, …)`;
      this.logger.warn(`${jobIds}: pipeline spans not recorded at pickup: ${(error as Error).message}`);
    }
  }

  /** A GitLab webhook, already authenticated and parsed. Throws StoreUnavailableError when the store is down. */
  async handleWebhook(event: WebhookEvent): Promise<WebhookOutcome> {
    // The traced work it reads may still wait in this process's pickup batch.
    await this.pickups.flushed();
    if (event.kind === 'job') return event.job === undefined ? NOTHING : this.enqueue(await this.finishedJobSpans([event.job], 'job_hook'), 'job_hook');
    const recorded = await this.store.findTracedPipeline(event.pipelineId);
    // Found through its jobs or its root instead, its record was written just now.
    const pipeline = recorded ?? (await this.pipelineOfItsJobs(event));
    if (pipeline === null) return NOTHING;
    // A pipeline lives as long as GitLab still tells of it (untraced jobs, a manual gate): its record with it.
    if (recorded !== null) await this.store.recordTracedPipelines([{ value: pipeline, ttlMs: this.limits.rememberMs }]);
    // The hook's own spans first: parked, for a provisional pipeline, before its outcome decides on them.
    const outcome = await this.enqueue(await this.pipelineEventSpans(event, pipeline), 'pipeline_hook');
    if (pipeline.outcomePolicy !== undefined) await this.outcomeSampling.onPipelineHook(pipeline, event);
    return outcome;
  }

  /**
   * A pipeline whose record is not in the store yet, known from one of its jobs the decorator enabled: the traced job
   * is written with its grant, before the pickup's answer, while the pipeline's record waits in its replica's pickup
   * batch for PICKUP_LINGER_MS. So a hook that reaches another replica within that window still finds its pipeline.
   */
  private async pipelineOfItsJobs(event: PipelineEvent): Promise<TracedPipeline | null> {
    const jobIds = [...event.finishedJobs.map((job) => job.jobId), ...event.activeJobIds].slice(0, PIPELINE_JOBS_LOOKED_UP);
    const jobs = await Promise.all(jobIds.map((jobId) => this.store.findTracedJob(jobId)));
    const job = jobs.find((found) => found !== null && found.pipelineId === event.pipelineId);
    const pipeline = job === undefined || job === null ? await this.childOfTracedRoot(event) : tracedPipelineOf(job, event.pipelineId);
    if (pipeline === null) return null;
    await this.store.recordTracedPipelines([{ value: pipeline, ttlMs: this.limits.rememberMs }]);
    return pipeline;
  }

  /**
   * A child pipeline none of whose jobs was traced (their pickups found the store away), of a root pipeline that is:
   * it is in its root's trace under its root's head decision, so its hooks still tell (a child failing keeps the
   * whole pipeline, SPEC §11). Found through the hook's root pipeline id, else the pipeline that triggered it.
   */
  private async childOfTracedRoot(event: PipelineEvent): Promise<TracedPipeline | null> {
    const rootId = event.rootPipelineId ?? event.source?.pipelineId;
    if (rootId === undefined || rootId === event.pipelineId) return null;
    const root = await this.store.findTracedPipeline(rootId);
    if (root === null) return null;
    return { ...root, pipelineId: event.pipelineId };
  }

  /**
   * The job span id whose `job_execution` children the gateway should report, or undefined when it need
   * not look: with webhooks GitLab's own account closes job spans, and in the `gitlab` scheme Rails does.
   */
  jobSpanToCloseFromRunner(jobId: number): string | undefined {
    if (this.webhooksConfigured || this.config.TRACE_ID_SCHEME !== 'keyed') return undefined;
    return this.jobSpanId(jobId);
  }

  /**
   * Without webhooks, the job span is closed from what the gateway saw: the end and `ci.job.status` of the
   * runner's `job_execution` span. Never throws: the export it came with is answered already.
   */
  async closeJobFromRunner(jobId: number, end: { endMs: number; status?: string }): Promise<void> {
    // Once per job and process; marked before the first await, so exports repeating it at once wait for nothing either.
    if (this.closedFromRunner.has(jobId)) return;
    this.closedFromRunner.set(jobId, true);
    try {
      await this.pickups.flushed();
      const job = await this.store.findTracedJob(jobId);
      if (job === null) {
        this.closedFromRunner.delete(jobId);
        return;
      }
      const status = end.status ?? 'success';
      const closed = this.jobSpanOf(job, { status, finishedAt: end.endMs, failureReason: status === 'failed' ? 'failed' : undefined });
      const outcome = await this.enqueue(
        [closed, ...(await this.pipelineSpansSeenFromRunners(job, { jobId, queuedAt: job.queuedAt ?? job.pickedUpAt, finishedAt: end.endMs, status }))],
        'runner',
      );
      // A full outbox took nothing: a repeat may close the job yet.
      if (outcome.refused > 0) this.closedFromRunner.delete(jobId);
    } catch (error) {
      this.closedFromRunner.delete(jobId);
      this.metrics.storeFailure('close_job');
      this.logger.warn(`job ${jobId}: job span not closed from its runner's span: ${(error as Error).message}`);
    }
  }

  /**
   * Without webhooks, each trace still gets its root: the job's pipeline's span, and its root pipeline's
   * when it is a child's (hung on the root, as nothing tells of its trigger job), drawn from the ends of
   * the traced jobs its runners have reported so far, the root's from all of its pipelines' jobs.
   */
  private async pipelineSpansSeenFromRunners(job: TracedJob, end: RunnerJobEnd): Promise<ControlPlaneSpan[]> {
    const pipelineIds = job.pipelineId === job.rootPipelineId ? [job.pipelineId] : [job.pipelineId, job.rootPipelineId];
    const seen = await Promise.all(pipelineIds.map((pipelineId) => this.store.recordRunnerJobEnd(pipelineId, end, this.limits.rememberMs)));
    const spans: ControlPlaneSpan[] = [];
    for (const [i, pipelineId] of pipelineIds.entries()) {
      const facts = pipelineSeenFromJobs(seen[i]);
      if (facts === undefined) continue;
      const place = {
        traceId: job.traceId,
        spanId: this.pipelineSpanId(pipelineId),
        tracestate: job.tracestate,
        ...(pipelineId === job.rootPipelineId ? {} : { parentSpanId: this.pipelineSpanId(job.rootPipelineId) }),
      };
      spans.push(...(await this.newerVersion('runner', pipelineId, facts, [pipelineSpan(this.serviceName, place, tracedPipelineOf(job, pipelineId), facts)])));
    }
    return spans;
  }

  /**
   * The spans of a pipeline's version, unless a newer version of its span was emitted already. The same
   * version goes on (the outbox keeps one copy), so a hook retried after a failed enqueue is not lost.
   */
  private async newerVersion(source: string, pipelineId: number, end: PipelineEnd, spans: ControlPlaneSpan[]): Promise<ControlPlaneSpan[]> {
    const version = pipelineSpanVersion(end);
    const highest = await this.store.raisePipelineSpanVersion(pipelineId, version, this.limits.rememberMs);
    if (highest <= version) return spans;
    // Told of already, by a newer version: counted as the outbox counts a copy it drops.
    this.metrics.enqueued(source, { queued: 0, duplicates: spans.length, refused: 0 });
    return [];
  }

  private jobSpanId(jobId: number): string {
    return spanIdFor(this.secrets.traceKey, jobId);
  }

  private pipelineSpanId(pipelineId: number): string {
    return pipelineSpanIdFor(this.secrets.traceKey, pipelineId);
  }

  private jobSpanOf(job: TracedJob, end: JobEnd, path?: WrittenPath): ControlPlaneSpan {
    return jobSpan(
      this.serviceName,
      { traceId: job.traceId, spanId: this.jobSpanId(job.jobId), parentSpanId: this.pipelineSpanId(job.pipelineId), tracestate: job.tracestate },
      job,
      end,
      path,
    );
  }

  /** Job spans for the finished jobs the decorator enabled; the others are not ours to tell of. */
  private async finishedJobSpans(finished: readonly FinishedJob[], toldBy: 'job_hook' | 'pipeline_hook'): Promise<ControlPlaneSpan[]> {
    if (this.config.TRACE_ID_SCHEME !== 'keyed' || finished.length === 0) return [];
    const traced = await Promise.all(finished.map((job) => this.store.findTracedJob(job.jobId)));
    // One pass gathers what the hook tells, one write per trace or pipeline:
    // - a provisional pipeline's job that failed keeps it even when the pipeline succeeds (allowed to fail), so its
    //   jobs' statuses are noted;
    // - each job's chapter of its root pipeline's story, while its record is there to tell it: one per kind of hook,
    //   as they tell different things (the Job Hook's times to the millisecond, the Pipeline Hook's whether manual);
    // - a job the decorator did not trace (its pickup found the store away) still tells its pipeline's outcome: the
    //   Pipeline Hook lists only the last attempt of a retried job, so a Job Hook may be the only word of a failure.
    const statuses = new Map<string, { job: TracedJob; seen: string[] }>();
    const chapters = new Map<number, Array<{ key: string; text: string }>>();
    const untraced = new Map<number, string[]>();
    for (const [i, end] of finished.entries()) {
      const job = traced[i];
      if (job === null) {
        if (toldBy === 'job_hook' && end.status !== 'success') appendTo(untraced, end.pipelineId, end.status);
        continue;
      }
      if (job.outcomePolicy !== undefined) {
        const known = statuses.get(job.traceId);
        if (known === undefined) statuses.set(job.traceId, { job, seen: [end.status] });
        else known.seen.push(end.status);
      }
      const chapter: Chapter = { kind: 'job', job, end, toldBy };
      appendTo(chapters, job.rootPipelineId, { key: `job:${job.jobId}:${toldBy}`, text: JSON.stringify(chapter) });
    }
    await Promise.all([
      ...[...statuses.values()].map(({ job, seen }) => this.outcomeSampling.noteJobStatuses(job, seen)),
      ...[...untraced].map(([pipelineId, seen]) => this.noteUntracedJobStatuses(pipelineId, seen)),
      ...[...chapters].map(([root, told]) => this.store.recordTraceStory(root, told, this.limits.rememberMs)),
    ]);
    return finished.flatMap((end, i) => {
      const job = traced[i];
      return job === null ? [] : [this.jobSpanOf(job, end)];
    });
  }

  /** Kept under the pipeline's id first, then noted on its trace if it is known: one of the two meets its end (§11). */
  private async noteUntracedJobStatuses(pipelineId: number, statuses: readonly string[]): Promise<void> {
    await this.outcomeSampling.notePipelineJobStatuses(pipelineId, statuses);
    const pipeline = await this.store.findTracedPipeline(pipelineId);
    if (pipeline?.outcomePolicy !== undefined) await this.outcomeSampling.noteJobStatuses(pipeline, statuses);
  }

  private async pipelineEventSpans(event: PipelineEvent, pipeline: TracedPipeline): Promise<ControlPlaneSpan[]> {
    const spans = await this.finishedJobSpans(event.finishedJobs, 'pipeline_hook');
    if (event.end === undefined) return spans;
    const root = event.rootPipelineId ?? pipeline.rootPipelineId;
    if (this.config.TRACE_ID_SCHEME === 'gitlab') {
      // Rails emits the job spans under a pipeline parent it never emits: only the root's is ours.
      if (event.pipelineId !== root) return spans;
      const rootSpan = pipelineSpan(this.serviceName, { traceId: gitlabTraceIdFor(root), spanId: gitlabPipelineSpanIdFor(root) }, pipeline, event.end);
      return this.newerVersion('pipeline_hook', event.pipelineId, event.end, [rootSpan]);
    }
    const place = { traceId: pipeline.traceId, spanId: this.pipelineSpanId(event.pipelineId), tracestate: pipeline.tracestate };
    if (event.pipelineId === root) {
      return [...spans, ...(await this.newerVersion('pipeline_hook', event.pipelineId, event.end, await this.rootEndSpans(event, pipeline, place)))];
    }
    const parent = await this.childPipelineParent(event, pipeline, root);
    const child = pipelineSpan(this.serviceName, { ...place, parentSpanId: parent.spanId }, pipeline, event.end);
    const emitted = await this.newerVersion('pipeline_hook', event.pipelineId, event.end, [...parent.spans, child]);
    if (emitted.length > 0 && parent.chapter !== undefined) {
      await this.store.recordTraceStory(root, [{ key: `bridge:${event.pipelineId}`, text: JSON.stringify(parent.chapter) }], this.limits.rememberMs);
    }
    return [...spans, ...emitted];
  }

  /**
   * The root pipeline's span at its end with its critical path written on it and on each job span of
   * the trace (SPEC §12), the job spans again as a newer version: the root pipeline's. Computed from the story told so
   * far (every job and bridge of the trace whose hook has come), with the jobs this hook names as it tells them.
   */
  private async rootEndSpans(event: PipelineEvent, pipeline: TracedPipeline, place: SpanPlace): Promise<ControlPlaneSpan[]> {
    const end = event.end!;
    const chapters = (await this.store.traceStory(event.pipelineId)).map((text) => JSON.parse(text) as Chapter);
    // A job as its Job Hook told it (its times to the millisecond), else as a Pipeline Hook did; manual as the latter says.
    const told = new Map<number, { job: TracedJob; end: FinishedJob }>();
    for (const chapter of chapters) {
      if (chapter.kind !== 'job') continue;
      const other = told.get(chapter.job.jobId);
      const [byJobHook, byPipelineHook] = chapter.toldBy === 'job_hook' ? [chapter, other] : [other, chapter];
      const manual = byPipelineHook?.end.manual;
      const end = byJobHook?.end ?? byPipelineHook!.end;
      told.set(chapter.job.jobId, { job: chapter.job, end: manual === undefined ? end : { ...end, manual } });
    }
    const jobs = [...told.values()];
    const drawn: ControlPlaneSpan[] = [pipelineSpan(this.serviceName, place, pipeline, end)];
    for (const chapter of chapters) if (chapter.kind === 'bridge') drawn.push(bridgeSpan(this.serviceName, chapter.place, chapter.bridge, chapter.child));
    for (const { job, end: jobEnd } of jobs) {
      drawn.push(this.jobSpanOf(job, jobEnd));
      if (job.queuedAt !== undefined) {
        const queuePlace = { traceId: job.traceId, spanId: queueSpanIdFor(this.secrets.traceKey, job.jobId), parentSpanId: this.jobSpanId(job.jobId) };
        drawn.push(queueWaitSpan(this.serviceName, queuePlace, { ...job, queuedAt: job.queuedAt }));
      }
    }
    const written = writtenCriticalPath(drawn);
    if (written === null) return [drawn[0]];
    const version = pipelineSpanVersion(end);
    return [
      pipelineSpan(this.serviceName, place, pipeline, end, written.pipeline),
      // An earlier attempt of a retried job is neither on the path nor beside it: not on it.
      ...jobs.map(({ job, end: jobEnd }) =>
        this.jobSpanOf(job, jobEnd, { attributes: written.jobs.get(job.jobId) ?? { 'ci.job.critical_path': false }, version }),
      ),
    ];
  }

  /**
   * A child pipeline hangs on the trigger job that started it, when that job's pipeline is traced in the
   * same trace; the trigger job's span is emitted from here, since GitLab sends no Job Hook for it.
   * Otherwise (source unknown, or not traced) it hangs on the root pipeline's span.
   */
  private async childPipelineParent(
    event: PipelineEvent,
    pipeline: TracedPipeline,
    root: number,
  ): Promise<{ spanId: string; spans: ControlPlaneSpan[]; chapter?: Chapter }> {
    const source = event.source;
    const upstream = source?.jobId === undefined ? null : await this.store.findTracedPipeline(source.pipelineId);
    if (source?.jobId === undefined || upstream === null || upstream.traceId !== pipeline.traceId) return { spanId: this.pipelineSpanId(root), spans: [] };
    const place = {
      traceId: pipeline.traceId,
      spanId: this.jobSpanId(source.jobId),
      parentSpanId: this.pipelineSpanId(source.pipelineId),
      tracestate: pipeline.tracestate,
    };
    const job = {
      jobId: source.jobId,
      pipelineId: source.pipelineId,
      projectId: source.projectId ?? upstream.projectId,
      downstreamPipelineId: event.pipelineId,
    };
    const bridge = bridgeSpan(this.serviceName, place, job, event.end!);
    return { spanId: bridge.spanId, spans: [bridge], chapter: { kind: 'bridge', place, bridge: job, child: event.end! } };
  }

  /**
   * The outbox entries of `spans`, made JSON SPANS_PER_TURN at a time, a provisional pipeline's by trace. Not bounded by
   * a store timeout: made before the store is asked, so a busy event loop's turns never count against the store.
   */
  private async spanEntries(spans: readonly ControlPlaneSpan[], enqueuedAt: number): Promise<SpanEntries> {
    const entries: OutboxEntry[] = [];
    const provisional = new Map<string, OutboxEntry[]>();
    for (const [index, span] of spans.entries()) {
      if (atSliceBoundary(index)) await nextTurn();
      const entry = { key: outboxKeyOf(span), body: JSON.stringify(span.resourceSpans), enqueuedAt };
      if (span.provisional !== true) entries.push(entry);
      else appendTo(provisional, span.resourceSpans.scopeSpans[0].spans[0].traceId, entry);
    }
    return { entries, provisional };
  }

  /**
   * Where each entry goes. A provisional pipeline's spans wait with its runner's instead (SPEC §11): parked per trace,
   * each with its outbox key, so a redelivered hook's copy is dropped at delivery; those of a pipeline decided kept
   * already go to the outbox settled with the reason, those of one dropped go nowhere.
   */
  private async placed({ entries, provisional }: SpanEntries): Promise<{ entries: readonly OutboxEntry[]; parked: number; dropped: number }> {
    if (provisional.size === 0) return { entries, parked: 0, dropped: 0 };
    const toOutbox = [...entries];
    let parked = 0;
    let dropped = 0;
    for (const [traceId, waiting] of provisional) {
      const answer = await this.outcomeSampling.parkSpans(traceId, waiting);
      if (answer.kind === 'parked') parked += waiting.length;
      else if (answer.kind === 'dropped') dropped += waiting.length;
      else for (const entry of waiting) toOutbox.push({ ...entry, body: this.outcomeSampling.settledSpans(entry.body, answer.reason) });
    }
    return { entries: toOutbox, parked, dropped };
  }

  /** A hook's spans, each its own outbox entry. */
  private async enqueue(spans: readonly ControlPlaneSpan[], source: string): Promise<WebhookOutcome> {
    return spans.length === 0 ? NOTHING : this.enqueueEntries(await this.spanEntries(spans, Date.now()), source);
  }

  /**
   * `asBundles`: the spans go to the outbox in bundles (a pickup batch's queue waits: many, and each its own; see
   * bundled in outbox.ts).
   */
  private async enqueueEntries(spanEntries: SpanEntries, source: string, asBundles = false): Promise<WebhookOutcome> {
    const { entries, parked, dropped } = await this.placed(spanEntries);
    if (entries.length === 0) return { ...NOTHING, parked, dropped };
    const enqueued = await this.outbox.enqueue(asBundles ? bundled(entries) : entries, this.limits);
    this.metrics.enqueued(source, enqueued);
    if (enqueued.refused > 0) {
      this.logger.error(`outbox full (OUTBOX_MAX_SPANS=${this.limits.maxSpans}): ${enqueued.refused} ${source} span(s) refused; is the collector reachable?`);
    }
    const outcome = { ...enqueued, parked, dropped };
    if (outcome.queued > 0) this.deliverer.kick();
    return outcome;
  }
}

/** Spans made outbox entries: those bound for the outbox, and a provisional pipeline's by trace id. */
interface SpanEntries {
  readonly entries: readonly OutboxEntry[];
  readonly provisional: ReadonlyMap<string, OutboxEntry[]>;
}

function appendTo<K, V>(lists: Map<K, V[]>, key: K, value: V): void {
  const list = lists.get(key);
  if (list === undefined) lists.set(key, [value]);
  else list.push(value);
}
