import { Inject, Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { SECRETS } from '../config/config.constants';
import { JobPayloadConfig } from '../config/sections/job-payload';
import { OutboxConfig } from '../config/sections/outbox';
import { OutcomeSamplingConfig } from '../config/sections/outcome-sampling';
import { PipelineSpansConfig } from '../config/sections/pipeline-spans';
import { StoreConfig } from '../config/sections/store';
import { WebhooksConfig } from '../config/sections/webhooks';
import { Secrets } from '../config/secrets';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { bundled, type EnqueueOutcome, type OutboxEntry, type OutboxStore } from '../outbox/outbox';
import { OUTBOX_STORE } from '../outbox/outbox.constants';
import { OutboxDeliverer } from '../outbox/outbox-deliverer';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { MIN_TRACED_MEMORY_MS, TracedJob, TracedWorkStore } from '../traced-work/traced-work';
import { withTimeout } from '../observability/with-timeout';
import { WebhookEvent } from './pipeline-events';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';
import { CicdMetrics } from './cicd.metrics';
import { ControlPlaneSpan, outboxKeyOf } from './pipeline-span-model';
import { atSliceBoundary, PickupBatch } from './pickup-batch';
import { appendTo, SpanDrawer } from './drawn-spans';
import { Pickup, PickupSpans } from './pickup-spans';
import { HookSpans } from './hook-spans';
import { RunnerSpans } from './runner-spans';

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
 * Jobs whose span this process closed from their runner's `job_execution` span: a repeat costs nothing
 * (issue 29). Bounded: a job forgotten here and repeated later costs one store write again, which the
 * outbox drops as the copy it is, as it does a close by another replica.
 */
const CLOSED_FROM_RUNNER_MAX = 10_000;

/**
 * SPEC §10: which spans the control plane emits, and when, routed. Facts come from three sources, each its own file:
 * the pickup (pickup-spans.ts), GitLab's webhooks (hook-spans.ts) and, without webhooks, the runner's `job_execution`
 * span seen by the gateway (runner-spans.ts). This file is the one way out of them: what outcome sampling must know
 * goes through its one door (a fact noted), and spans go to the store's outbox, from which {@link OutboxDeliverer}
 * sends them to the collector, or, for a pipeline traced provisionally, are offered to outcome sampling (SPEC §11).
 * Each span has a fixed id, so whichever source tells of it first emits it and the outbox drops any later copy.
 * A pipeline's span (and a bridge's, drawn from its child pipeline) follows the pipeline's story instead:
 * emitted again, same id, as each newer version of its facts appears (see pipelineSpanVersion); the outbox
 * keeps each version once, and a version older than one emitted already is not emitted at all.
 */
@Injectable()
export class PipelineSpansService implements OnModuleDestroy {
  private readonly logger = new Logger(PipelineSpansService.name);
  private readonly limits: { maxSpans: number; rememberMs: number };
  private readonly pipelineMemoryMs: number;
  private readonly pickups = new PickupBatch<Pickup>((batch) => this.writePickups(batch), PICKUP_LINGER_MS, PICKUP_BATCH_MAX);
  private readonly closedFromRunner = new LRUCache<number, true>({ max: CLOSED_FROM_RUNNER_MAX });
  private readonly pickupSpans: PickupSpans;
  private readonly hookSpans: HookSpans;
  private readonly runnerSpans: RunnerSpans;
  private readonly drawer: SpanDrawer;

  constructor(
    config: PipelineSpansConfig,
    outboxConfig: OutboxConfig,
    outcomeSamplingConfig: OutcomeSamplingConfig,
    private readonly jobPayload: JobPayloadConfig,
    private readonly webhooks: WebhooksConfig,
    private readonly storeConfig: StoreConfig,
    @Inject(SECRETS) secrets: Secrets,
    @Inject(TRACED_WORK_STORE) private readonly store: TracedWorkStore,
    @Inject(OUTBOX_STORE) private readonly outbox: OutboxStore,
    private readonly deliverer: OutboxDeliverer,
    private readonly metrics: PipelineSpansMetrics,
    private readonly outcomeSampling: OutcomeSamplingService,
    cicdMetrics: CicdMetrics,
  ) {
    this.limits = { maxSpans: outboxConfig.maxSpans, rememberMs: outboxConfig.dedupSeconds * 1000 };
    this.pipelineMemoryMs = outcomeSamplingConfig.maxWaitSeconds * 1000;
    this.drawer = new SpanDrawer(config.serviceName, secrets.traceKey, store, metrics, this.limits.rememberMs);
    this.pickupSpans = new PickupSpans(this.drawer, jobPayload.traceIdScheme === 'keyed');
    this.hookSpans = new HookSpans(this.drawer, store, jobPayload.traceIdScheme, cicdMetrics);
    this.runnerSpans = new RunnerSpans(this.drawer, store);
  }

  /** Whether GitLab's webhooks close job spans; otherwise the gateway does, from the runner's span. */
  get webhooksConfigured(): boolean {
    return this.webhooks.secretFile !== undefined;
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
      const { pipelines, spans } = await this.pickupSpans.told(batch, now);
      const provisional = batch.filter(({ job }) => job.outcomePolicy !== undefined).map(({ job }) => job);
      const spanEntries = await this.spanEntries(spans, Date.now());
      await withTimeout(
        () =>
          Promise.all([
            pipelines.length === 0 ? undefined : this.store.recordTracedPipelines(pipelines),
            this.enqueueEntries(spanEntries, 'pickup', true),
            provisional.length === 0 ? undefined : this.outcomeSampling.note({ kind: 'pickups', jobs: provisional }),
          ]),
        Math.max(this.jobPayload.storeTimeoutMs, this.storeConfig.commandTimeoutMs),
      );
      this.pickupSpans.recorded(pipelines, now);
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
    const told = await this.hookSpans.told(event);
    await Promise.all([
      ...told.jobStatuses.map(({ job, statuses }) => this.outcomeSampling.note({ kind: 'job_statuses', pipeline: job, statuses })),
      ...told.untracedStatuses.map(({ pipelineId, statuses }) =>
        this.outcomeSampling.note({ kind: 'untraced_job_statuses', pipelineId, statuses, pipelineOf: () => this.store.findTracedPipeline(pipelineId) }),
      ),
    ]);
    // The hook's own spans first: parked, for a provisional pipeline, before its outcome decides on them.
    const outcome = await this.enqueue(told.spans, event.kind === 'job' ? 'job_hook' : 'pipeline_hook');
    if (event.kind === 'pipeline' && told.pipeline?.outcomePolicy !== undefined) {
      await this.outcomeSampling.note({ kind: 'pipeline_hook', pipeline: told.pipeline, hook: event });
    }
    return outcome;
  }

  /**
   * The job span id whose `job_execution` children the gateway should report, or undefined when it need
   * not look: with webhooks GitLab's own account closes job spans, and in the `gitlab` scheme Rails does.
   */
  jobSpanToCloseFromRunner(jobId: number): string | undefined {
    if (this.webhooksConfigured || this.jobPayload.traceIdScheme !== 'keyed') return undefined;
    return this.drawer.jobSpanId(jobId);
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
      const outcome = await this.enqueue(await this.runnerSpans.closed(job, end), 'runner');
      // A full outbox took nothing: a repeat may close the job yet.
      if (outcome.refused > 0) this.closedFromRunner.delete(jobId);
    } catch (error) {
      this.closedFromRunner.delete(jobId);
      this.metrics.storeFailure('close_job');
      this.logger.warn(`job ${jobId}: job span not closed from its runner's span: ${(error as Error).message}`);
    }
  }

  /**
   * The outbox entries of `spans`, made JSON a slice at a time, a provisional pipeline's by trace. Not bounded by
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
   * Where each entry goes. A provisional pipeline's spans are offered to outcome sampling instead (SPEC §11): parked
   * per trace, each with its outbox key, so a redelivered hook's copy is dropped at delivery; those of a pipeline
   * decided kept already come back settled with the reason, for the outbox; those of one dropped go nowhere.
   */
  private async placed({ entries, provisional }: SpanEntries): Promise<{ entries: readonly OutboxEntry[]; parked: number; dropped: number }> {
    if (provisional.size === 0) return { entries, parked: 0, dropped: 0 };
    const toOutbox = [...entries];
    let parked = 0;
    let dropped = 0;
    for (const [traceId, waiting] of provisional) {
      const answer = await this.outcomeSampling.offer(traceId, waiting);
      if (answer.kind === 'parked') parked += waiting.length;
      else if (answer.kind === 'dropped') dropped += waiting.length;
      else for (const [i, settled] of answer.spans.entries()) toOutbox.push({ ...waiting[i], body: settled.body });
    }
    return { entries: toOutbox, parked, dropped };
  }

  /** A source's spans, each its own outbox entry. */
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
