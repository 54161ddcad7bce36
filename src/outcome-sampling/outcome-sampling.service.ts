import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import type { CollectorClient, ExportResult } from '../collector/collector-client';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import type { OtlpEncoding } from '../otlp/otlp-encoding';
import { settleSamplingReason } from '../otlp/sampling-reason';
import { KeepReason, ParkedEntry, ParkingLimits, ParkingStore, TraceDecision } from '../parking/parking';
import { PARKING_STORE } from '../parking/parking.constants';
import { OutboxLimits, parkedTracePointer, TracedJob, TracedPipeline, TracedWorkStore } from '../traced-work/traced-work';
import { TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { decideOnOutcome, decideWithoutOutcome, RootOutcome } from './outcome-decision';
import { OutcomeSamplingMetrics } from './outcome-sampling.metrics';

/** What becomes of spans of a provisional pipeline offered for parking. */
export type ParkingAnswer =
  /** Kept in the store: acknowledged, delivered if the outcome keeps the pipeline. */
  | { readonly kind: 'parked' }
  /** Decided kept already: forward them now, settled with this reason. */
  | { readonly kind: 'forward'; readonly reason: KeepReason }
  /** Decided dropped, or a budget is full and the head decision (not sampled) stands: drop them, answered as accepted. */
  | { readonly kind: 'dropped' };

/** Overdue traces looked at per sweep, and how often a replica sweeps. */
const SWEEP_BATCH = 100;
const SWEEP_EVERY_MS = 5000;
/** Protobuf bodies joined into one upstream request at most: well under the Collector's default 20 MiB request limit. */
const MAX_DELIVERY_BYTES = 4 * 1024 * 1024;
/** How often the usage read for the metrics and readiness is refreshed. */
const USAGE_EVERY_MS = 5000;

/**
 * Outcome-based sampling (SPEC §11): provisional pipelines' spans are parked (the gateway's exports, the control
 * plane's own spans), GitLab's hooks gather what the decision reads, the root pipeline's terminal hook decides, and
 * a sweep decides what the time limit ends. A kept pipeline's parked spans reach the collector once, through the
 * outbox: the decision enqueues one pointer to the trace, which the outbox deliverer hands back here.
 */
@Injectable()
export class OutcomeSamplingService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(OutcomeSamplingService.name);
  readonly limits: ParkingLimits;
  private readonly outbox: OutboxLimits;
  private sweeping: NodeJS.Timeout | undefined;
  private usageReadAt = -Infinity;
  /** Set by the decorator's side (ROLE=all or control), which evaluates the toggle. */
  private toggled: () => boolean = () => false;
  private warnedWithoutWebhooks = false;
  /** When an entry last found the total budget full (performance.now()). */
  private totalFullAt = -Infinity;

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(PARKING_STORE) private readonly parking: ParkingStore,
    @Inject(TRACED_WORK_STORE) private readonly tracedWork: TracedWorkStore,
    @Inject(COLLECTOR_CLIENT) private readonly collector: Pick<CollectorClient, 'export'>,
    private readonly metrics: OutcomeSamplingMetrics,
  ) {
    this.limits = {
      maxTraceSpans: config.OUTCOME_SAMPLING_MAX_PIPELINE_SPANS,
      maxTraceBytes: config.OUTCOME_SAMPLING_MAX_PIPELINE_BYTES,
      maxTotalBytes: config.OUTCOME_SAMPLING_MAX_TOTAL_BYTES,
      holdMs: config.OUTCOME_SAMPLING_MAX_WAIT_SECONDS * 1000,
      rememberMs: config.OUTCOME_SAMPLING_DECISION_MEMORY_SECONDS * 1000,
    };
    this.outbox = { maxSpans: config.OUTBOX_MAX_SPANS, rememberMs: config.OUTBOX_DEDUP_SECONDS * 1000 };
  }

  onApplicationBootstrap(): void {
    this.sweeping = setInterval(() => void this.sweep(), SWEEP_EVERY_MS).unref();
  }

  onModuleDestroy(): void {
    clearInterval(this.sweeping);
  }

  /**
   * An enforced traces export of a provisional job, as it would be forwarded (SPEC §11 "Parking"). Throws
   * StoreUnavailableError when the store cannot keep it: the runner is answered retryable, nothing acknowledged.
   */
  async parkExport(traceId: string, encoding: OtlpEncoding, body: Buffer, spans: number): Promise<ParkingAnswer> {
    return this.park(traceId, encoding, body, spans);
  }

  /**
   * The control plane's own spans of a provisional pipeline (SPEC §10): each its outbox key and OTLP/JSON
   * `ResourceSpans`, one per line (JSON text holds no raw newline), so delivery keeps the first of each key as the
   * outbox would.
   */
  async parkSpans(traceId: string, spans: readonly { readonly spanId: string; readonly resourceSpans: string }[]): Promise<ParkingAnswer> {
    const lines = spans.map(({ spanId, resourceSpans }) => `${spanId} ${resourceSpans}`).join('\n');
    return this.park(traceId, 'spans', Buffer.from(lines), spans.length);
  }

  /** Settles a control-plane span text's reason, for spans of a pipeline decided kept. */
  settledSpans(resourceSpans: string, reason: KeepReason): string {
    return settleSamplingReason('json', Buffer.from(resourceSpans), reason).toString();
  }

  private async park(traceId: string, kind: ParkedEntry['kind'], body: Buffer, spans: number): Promise<ParkingAnswer> {
    const outcome = await this.parking.park(traceId, { kind, body, spans }, this.limits);
    switch (outcome.kind) {
      case 'parked':
        this.metrics.parked(spans);
        return { kind: 'parked' };
      case 'decided':
        this.metrics.lateSpans(outcome.decision, spans);
        return outcome.decision.keep ? { kind: 'forward', reason: outcome.decision.reason } : { kind: 'dropped' };
      case 'full':
        // The head decision left the pipeline out: falling back to it drops these spans, as sampling would have.
        this.metrics.fellBack(outcome.limit, spans);
        if (outcome.limit === 'total_bytes') this.totalFullAt = performance.now();
        this.logger.warn(`trace ${traceId}: outcome sampling budget full (${outcome.limit}); ${spans} span(s) fall back to the head decision (dropped)`);
        return { kind: 'dropped' };
      default: {
        const unreachable: never = outcome;
        throw new Error(`unhandled parking outcome ${JSON.stringify(unreachable)}`);
      }
    }
  }

  /** Provisional pickups: their queue waits, and what the time limit decides for their pipelines. */
  async notePickups(jobs: readonly TracedJob[]): Promise<void> {
    const byTrace = new Map<string, { longestQueueMs: number; whenNoOutcome: 'keep' | 'drop' }>();
    for (const job of jobs) {
      if (job.outcomePolicy === undefined) continue;
      const queueMs = job.queuedAt === undefined ? 0 : Math.max(0, job.pickedUpAt - job.queuedAt);
      const known = byTrace.get(job.traceId);
      byTrace.set(job.traceId, { longestQueueMs: Math.max(known?.longestQueueMs ?? 0, queueMs), whenNoOutcome: job.outcomePolicy.whenNoOutcome });
    }
    const ttlMs = this.limits.holdMs + this.limits.rememberMs;
    await Promise.all([...byTrace].map(([traceId, facts]) => this.parking.noteFacts(traceId, facts, ttlMs)));
  }

  /** Statuses GitLab reported for a provisional pipeline's jobs or child pipelines, before its root's outcome. */
  async noteStatuses(traceId: string, statuses: readonly string[]): Promise<void> {
    if (statuses.length > 0) await this.parking.noteFacts(traceId, { statuses }, this.limits.holdMs + this.limits.rememberMs);
  }

  /**
   * The root pipeline runs again after its decision (a retry, a manual job played: GitLab puts it back to running). A
   * kept pipeline stays kept; a dropped one is provisional again, so what comes now parks and its next outcome decides
   * (what was dropped before is gone: the trace then tells the story from the retry on, under its latest pipeline span).
   */
  async reopen(traceId: string): Promise<void> {
    if (await this.parking.reopen(traceId)) this.logger.log(`trace ${traceId}: its pipeline runs again after it was dropped; provisional again`);
  }

  /**
   * The root pipeline's terminal hook: decides on its outcome with what was gathered (SPEC §11 "Decision on
   * outcome"). Called after the hook's own spans were parked, so a kept pipeline's final spans go with it.
   */
  async decideOnRootOutcome(pipeline: TracedPipeline, root: RootOutcome, statuses: readonly string[]): Promise<TraceDecision | undefined> {
    if (pipeline.outcomePolicy === undefined) return undefined;
    const facts = await this.parking.readFacts(pipeline.traceId);
    const decision = decideOnOutcome(pipeline.outcomePolicy, root, { ...facts, statuses: [...facts.statuses, ...statuses] });
    return this.settle(pipeline.traceId, decision);
  }

  /**
   * Records the decision (the first stands; a keep replaces a drop) and acts on the one recorded: kept, a pointer
   * to the trace enters the outbox (enqueued again on a redelivered hook: the outbox keeps one), so a process that
   * dies after recording loses nothing; dropped, what is parked is deleted.
   */
  private async settle(traceId: string, decision: TraceDecision): Promise<TraceDecision> {
    const recorded = await this.parking.decide(traceId, decision, this.limits.rememberMs);
    if (recorded.changed) this.metrics.decided(recorded.decision);
    if (recorded.decision.keep) {
      await this.tracedWork.enqueueSpans([parkedTracePointer(traceId, recorded.decision.reason, Date.now())], this.outbox);
    } else {
      const parked = await this.parking.parked(traceId);
      await this.parking.release(
        traceId,
        parked.map((entry) => entry.id),
      );
    }
    await this.parking.settled(traceId);
    return recorded.decision;
  }

  /** Traces whose time limit ended without their root's terminal hook: `when_no_outcome` decides, counted as no_outcome. */
  private async sweep(): Promise<void> {
    try {
      const overdue = await this.parking.claimOverdue(SWEEP_BATCH, SWEEP_EVERY_MS * 6);
      for (const traceId of overdue) {
        const facts = await this.parking.readFacts(traceId);
        const decision = await this.settle(traceId, decideWithoutOutcome(facts.whenNoOutcome ?? 'keep'));
        this.logger.log(
          `trace ${traceId}: no pipeline outcome within ${this.config.OUTCOME_SAMPLING_MAX_WAIT_SECONDS} s; ${decision.keep ? 'kept' : 'dropped'}`,
        );
      }
      await this.readUsage();
    } catch (error) {
      this.logger.warn(`outcome sampling: overdue pipelines not decided: ${(error as Error).message}`);
    }
  }

  /** The parked usage for the metrics and readiness, read at most every few seconds. */
  async readUsage(): Promise<void> {
    if (performance.now() - this.usageReadAt < USAGE_EVERY_MS) return;
    this.usageReadAt = performance.now();
    this.metrics.observedUsage(await this.parking.usage());
  }

  /** The decorator's side says whether the outcome-sampling toggle is on (a gateway-only process loads no flags). */
  watchToggle(toggled: () => boolean): void {
    this.toggled = toggled;
    this.toggledWithoutWebhooks();
  }

  /**
   * The toggle is on but no webhook secret is set: no outcome would ever come, so nothing is traced provisionally
   * (the decorator checks) and this is said once in the log and in readiness (SPEC §11).
   */
  toggledWithoutWebhooks(): boolean {
    const missing = this.config.GITLAB_WEBHOOK_SECRET_FILE === undefined && this.toggled();
    if (missing && !this.warnedWithoutWebhooks) {
      this.warnedWithoutWebhooks = true;
      this.logger.warn(
        "ci_job_telemetry_outcome_sampling is enabled but GITLAB_WEBHOOK_SECRET_FILE is not set: outcome sampling needs GitLab's Pipeline Hooks, so no pipeline is traced provisionally",
      );
    }
    return missing;
  }

  /**
   * Whether the total budget is full: nearly all used, or an entry found no room in the last minute. Readiness then
   * says degraded (SPEC §11 "Visible").
   */
  budgetFull(): boolean {
    return this.metrics.lastUsage().bytes >= this.limits.maxTotalBytes * 0.95 || performance.now() - this.totalFullAt < 60_000;
  }

  /**
   * Sends a kept trace's parked spans to the collector, settled with the reason (called by the outbox deliverer for
   * the trace's pointer). Protobuf exports go as one concatenated request (a bounded size each), the control plane's
   * spans as one JSON request, JSON exports one each. What the collector accepted leaves the store at once, so a
   * retry sends only the rest. Answers the first result that was not accepted, else accepted.
   */
  async deliverParked(traceId: string, reason: KeepReason, decidedAt: number): Promise<ExportResult> {
    const entries = await this.parking.parked(traceId);
    for (const batch of deliveryBatches(entries)) {
      const result = await this.collector.export('traces', batch.encoding, batch.body(reason));
      if (result.kind === 'retry') return result;
      // Refused: the collector will refuse the same bytes again; holding them would block the rest forever.
      if (result.kind === 'refused')
        this.logger.error(`trace ${traceId}: the collector refused ${batch.entries.length} parked export(s) with ${result.status}; dropped`);
      await this.parking.release(
        traceId,
        batch.entries.map((entry) => entry.id),
      );
    }
    if (entries.length > 0) this.metrics.delivered(decidedAt);
    return { kind: 'accepted', status: 200, partialSuccess: undefined };
  }
}

interface DeliveryBatch {
  readonly encoding: OtlpEncoding;
  readonly entries: readonly ParkedEntry[];
  body(reason: KeepReason): Buffer;
}

/** Parked entries as upstream requests: protobuf concatenated up to MAX_DELIVERY_BYTES, control-plane spans joined, JSON alone. */
export function deliveryBatches(entries: readonly ParkedEntry[]): DeliveryBatch[] {
  const batches: DeliveryBatch[] = [];
  let protobuf: ParkedEntry[] = [];
  let protobufBytes = 0;
  const flushProtobuf = () => {
    if (protobuf.length === 0) return;
    const taken = protobuf;
    batches.push({
      encoding: 'protobuf',
      entries: taken,
      // ExportTraceServiceRequest's one field is repeated: concatenated requests are one request.
      body: (reason) => Buffer.concat(taken.map((entry) => settleSamplingReason('protobuf', entry.body, reason))),
    });
    protobuf = [];
    protobufBytes = 0;
  };
  const spans = entries.filter((entry) => entry.kind === 'spans');
  // Each control-plane span once, the first parked of its key, as the outbox keeps the first (SPEC §10).
  const spanTexts = new Map<string, string>();
  for (const entry of spans) {
    for (const line of entry.body.toString().split('\n')) {
      const space = line.indexOf(' ');
      if (space > 0 && !spanTexts.has(line.slice(0, space))) spanTexts.set(line.slice(0, space), line.slice(space + 1));
    }
  }
  for (const entry of entries) {
    if (entry.kind === 'protobuf') {
      if (protobufBytes + entry.body.length > MAX_DELIVERY_BYTES) flushProtobuf();
      protobuf.push(entry);
      protobufBytes += entry.body.length;
    } else if (entry.kind === 'json') {
      batches.push({ encoding: 'json', entries: [entry], body: (reason) => settleSamplingReason('json', entry.body, reason) });
    }
  }
  flushProtobuf();
  if (spans.length > 0) {
    batches.push({
      encoding: 'json',
      entries: spans,
      body: (reason) => settleSamplingReason('json', Buffer.from(`{"resourceSpans":[${[...spanTexts.values()].join(',')}]}`), reason),
    });
  }
  return batches;
}
