import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import type { CollectorClient } from '../collector/collector-client';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import { OutboxConfig } from '../config/sections/outbox';
import { OutcomeSamplingConfig } from '../config/sections/outcome-sampling';
import { WebhooksConfig } from '../config/sections/webhooks';
import type { OtlpEncoding } from '../otlp/otlp-encoding';
import { OutcomeSamplingReason, settleSamplingReason } from '../otlp/sampling-reason';
import { ADMIT_ALWAYS, ClaimedEntry, KindDelivery, kindKey, OutboxLimits, OutboxStore } from '../outbox/outbox';
import { OUTBOX_STORE } from '../outbox/outbox.constants';
import { OutboxDeliverer } from '../outbox/outbox-deliverer';
import { decideOnOutcome, decideWithoutOutcome, queuedTooLong, runsAgain } from './outcome-decision';
import { DEFAULT_OUTCOME_POLICY, OutcomePolicy, parseOutcomePolicy } from './outcome-policy';
import { OutcomeSamplingMetrics } from './outcome-sampling.metrics';
import { nextPage, PARKED_KIND, parkedSpansAsEntries, sendPage } from './parked-delivery';
import { ParkedKind, ParkingLimits, ParkingStore, RootOutcome, TraceDecision } from './parking/parking';
import { PARKING_STORE } from './parking/parking.constants';

/** What becomes of spans of a provisional pipeline offered for parking. */
export type ParkingAnswer =
  /** Kept in the store: acknowledged, delivered if the outcome keeps the pipeline. */
  | { readonly kind: 'parked' }
  /** Decided kept already: forward them now, settled with this reason. */
  | { readonly kind: 'forward'; readonly reason: OutcomeSamplingReason }
  /** Decided dropped, or a budget is full and the head decision (not sampled) stands: drop them, answered as accepted. */
  | { readonly kind: 'dropped' };

/** What a provisional pickup tells: its trace, its queue wait, the policy it was picked up under. */
export interface ProvisionalPickup {
  readonly traceId: string;
  readonly queuedAt?: number;
  readonly pickedUpAt: number;
  readonly outcomePolicy?: OutcomePolicy;
}

/** A pipeline of a provisional trace, as its record says. */
export interface ProvisionalPipeline {
  readonly traceId: string;
  readonly rootPipelineId: number;
  readonly outcomePolicy?: OutcomePolicy;
}

/**
 * What becomes of the control plane's own spans of a provisional pipeline offered (SPEC §11 "Parking"): parked, or
 * forwarded now (decided kept already: these are the spans settled with the reason), or dropped (decided dropped, or
 * the budget's head decision).
 */
export type OfferAnswer =
  { readonly kind: 'parked' } | { readonly kind: 'forward'; readonly spans: readonly ControlPlaneSpanText[] } | { readonly kind: 'dropped' };

/** A control-plane span as text: its outbox key and its OTLP/JSON `ResourceSpans`. */
export interface ControlPlaneSpanText {
  readonly key: string;
  readonly body: string;
}

/**
 * A fact the decision reads (SPEC §11 "Decision on outcome"), as the control plane learns it: the one way facts come
 * in, as the Collector's tail-sampling processor takes spans through one entry point and decides on its own.
 */
export type OutcomeFact =
  /** Provisional pickups: their queue waits, and what the time limit decides for their pipelines. */
  | { readonly kind: 'pickups'; readonly jobs: readonly ProvisionalPickup[] }
  /** Statuses a Job Hook told of a provisional pipeline's traced job (an allowed-to-fail job that failed keeps it). */
  | { readonly kind: 'job_statuses'; readonly pipeline: Pick<ProvisionalPipeline, 'traceId' | 'outcomePolicy'>; readonly statuses: readonly string[] }
  /**
   * Statuses a Job Hook told of jobs of `pipelineId` the decorator did not trace; `pipelineOf` looks its pipeline up,
   * asked only once they are kept under its id (see notePipelineJobStatuses).
   */
  | {
      readonly kind: 'untraced_job_statuses';
      readonly pipelineId: number;
      readonly statuses: readonly string[];
      readonly pipelineOf: () => Promise<Pick<ProvisionalPipeline, 'traceId' | 'outcomePolicy'> | null>;
    }
  /** A provisional pipeline's Pipeline Hook, once its own spans were offered. */
  | { readonly kind: 'pipeline_hook'; readonly pipeline: ProvisionalPipeline; readonly hook: PipelineHookFacts };

/** What a Pipeline Hook tells outcome sampling (the parsed hook, SPEC §10 "Sources"). */
export interface PipelineHookFacts {
  readonly pipelineId: number;
  readonly rootPipelineId?: number;
  readonly end?: RootOutcome;
  readonly finishedJobs: readonly { readonly jobId: number; readonly status: string }[];
  readonly activeJobIds: readonly number[];
}

/** Traces looked at per sweep, and how often a replica sweeps. */
const SWEEP_BATCH = 100;
const SWEEP_EVERY_MS = 5000;
/** How often the usage read for the metrics and readiness is refreshed. */
const USAGE_EVERY_MS = 5000;
/** Distinct policy payloads kept parsed. */
const POLICIES_MAX = 64;

/**
 * Outcome-based sampling (SPEC §11). Provisional pipelines' spans are parked (the gateway's exports, the control
 * plane's own spans); GitLab's hooks gather what the decision reads; the root pipeline's terminal hook decides. A
 * keep is immediate: one pointer to the trace enters the outbox, whose deliverer hands it back here a page at a
 * time. A drop waits a little (OUTCOME_SAMPLING_LATE_CHILD_SECONDS, or while a child pipeline runs) for a child
 * pipeline that fails after its root; the sweep then takes it, and takes what the time limit ends.
 *
 * Every trace with something parked stays in the time-limit index until it has ended (delivered, or dropped), so a
 * step whose answer was lost (a crash, a refusal, a timeout) is taken again by the sweep, which acts on the decision
 * recorded and never takes a second one.
 */
@Injectable()
export class OutcomeSamplingService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(OutcomeSamplingService.name);
  readonly limits: ParkingLimits;
  private readonly lateChildMs: number;
  private readonly outboxLimits: OutboxLimits;
  private readonly policies = new Map<string, OutcomePolicy>();
  private sweeping: NodeJS.Timeout | undefined;
  private usageReadAt = -Infinity;
  private toggled: () => boolean = () => false;
  private warnedWithoutWebhooks = false;
  /** When an entry last found the total budget full (performance.now()). */
  private totalFullAt = -Infinity;

  constructor(
    private readonly config: OutcomeSamplingConfig,
    outboxConfig: OutboxConfig,
    private readonly webhooks: WebhooksConfig,
    @Inject(PARKING_STORE) private readonly parking: ParkingStore,
    @Inject(OUTBOX_STORE) private readonly outbox: OutboxStore,
    @Inject(COLLECTOR_CLIENT) private readonly collector: Pick<CollectorClient, 'export'>,
    private readonly deliverer: OutboxDeliverer,
    private readonly metrics: OutcomeSamplingMetrics,
  ) {
    this.limits = {
      maxTraceSpans: config.maxPipelineSpans,
      maxTraceBytes: config.maxPipelineBytes,
      maxTotalBytes: config.maxTotalBytes,
      holdMs: config.maxWaitSeconds * 1000,
      rememberMs: config.decisionMemorySeconds * 1000,
    };
    this.lateChildMs = config.lateChildSeconds * 1000;
    // A kept pipeline's pointer and its control-plane spans are bounded by the parking budget already: never refused.
    this.outboxLimits = { maxSpans: ADMIT_ALWAYS, rememberMs: outboxConfig.dedupSeconds * 1000 };
    deliverer.register({ name: PARKED_KIND, deliver: (entry, deadline) => this.deliverParked(entry, deadline) });
  }

  onApplicationBootstrap(): void {
    this.sweeping = setInterval(() => void this.sweep(), SWEEP_EVERY_MS).unref();
  }

  onModuleDestroy(): void {
    clearInterval(this.sweeping);
  }

  /**
   * The policy a variant payload states ('' or undefined: the defaults), parsed once per distinct payload. One that
   * does not parse keeps the defaults and is said once: a typo in Unleash must not silently keep nothing.
   */
  policyOf(payload: string | undefined): OutcomePolicy {
    let policy = this.policies.get(payload ?? '');
    if (policy === undefined) {
      try {
        policy = parseOutcomePolicy(payload);
      } catch (error) {
        this.logger.warn(`ci_job_telemetry_outcome_sampling: ${(error as Error).message}; keeping the defaults (failed pipelines kept)`);
        policy = DEFAULT_OUTCOME_POLICY;
      }
      if (this.policies.size >= POLICIES_MAX) this.policies.clear();
      this.policies.set(payload ?? '', policy);
    }
    return policy;
  }

  /**
   * An enforced traces export of a provisional job, as it would be forwarded (SPEC §11 "Parking"). Throws
   * StoreUnavailableError when the store cannot keep it: the runner is answered retryable, nothing acknowledged.
   */
  async parkExport(traceId: string, encoding: OtlpEncoding, body: Buffer, spans: number): Promise<ParkingAnswer> {
    return this.park(traceId, encoding, body, spans, false);
  }

  /**
   * The control plane's own spans of a provisional pipeline (SPEC §10) offered: parked until the outcome, or, once it
   * is decided, forwarded settled with the reason or dropped. Parked one per line (JSON text holds no raw newline).
   * Never refused for a bound: a kept pipeline without its root or job spans is not whole.
   */
  async offer(traceId: string, spans: readonly ControlPlaneSpanText[]): Promise<OfferAnswer> {
    const lines = spans.map(({ key, body }) => `${key} ${body}`).join('\n');
    const answer = await this.park(traceId, 'spans', Buffer.from(lines), spans.length, true);
    if (answer.kind !== 'forward') return answer;
    const settled = spans.map(({ key, body }) => ({ key, body: settleSamplingReason('json', Buffer.from(body), answer.reason).toString() }));
    return { kind: 'forward', spans: settled };
  }

  /** A fact the decision reads: the one way in (see OutcomeFact). Throws when the store fails: the hook is spooled. */
  async note(fact: OutcomeFact): Promise<void> {
    switch (fact.kind) {
      case 'pickups':
        return this.notePickups(fact.jobs);
      case 'job_statuses':
        return this.noteJobStatuses(fact.pipeline, fact.statuses);
      case 'untraced_job_statuses': {
        // Kept under the pipeline's id first, then noted on its trace if it is known: one of the two meets its end.
        await this.notePipelineJobStatuses(fact.pipelineId, fact.statuses);
        const pipeline = await fact.pipelineOf();
        if (pipeline !== null) await this.noteJobStatuses(pipeline, fact.statuses);
        return;
      }
      case 'pipeline_hook':
        return this.onPipelineHook(fact.pipeline, fact.hook);
      default: {
        const unreachable: never = fact;
        throw new Error(`unhandled outcome fact ${JSON.stringify(unreachable)}`);
      }
    }
  }

  private async park(traceId: string, kind: ParkedKind, body: Buffer, spans: number, exempt: boolean): Promise<ParkingAnswer> {
    const outcome = await this.parking.park(traceId, { kind, body, spans, exempt }, this.limits);
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

  private get factsTtlMs(): number {
    return this.limits.holdMs + this.limits.rememberMs;
  }

  /**
   * The queue waits of a pickup batch, decided on as they come: a batch is recorded after the pickups were answered, so
   * on another replica the job may have run and the root's terminal hook come first (its drop then waits for late facts,
   * decideIfEnded), and a long wait that comes late still keeps the pipeline.
   */
  private async notePickups(jobs: readonly ProvisionalPickup[]): Promise<void> {
    const byTrace = new Map<string, { longestQueueMs: number; policy: OutcomePolicy }>();
    for (const job of jobs) {
      if (job.outcomePolicy === undefined) continue;
      const queueMs = job.queuedAt === undefined ? 0 : Math.max(0, job.pickedUpAt - job.queuedAt);
      const known = byTrace.get(job.traceId);
      byTrace.set(job.traceId, { longestQueueMs: Math.max(known?.longestQueueMs ?? 0, queueMs), policy: job.outcomePolicy });
    }
    await Promise.all(
      [...byTrace].map(async ([traceId, { longestQueueMs, policy }]) => {
        await this.parking.noteFacts(traceId, { longestQueueMs, whenNoOutcome: policy.whenNoOutcome }, this.factsTtlMs);
        // Only a wait the policy keeps for can change a decision: the others cost no read.
        if (queuedTooLong(policy, longestQueueMs)) await this.decideIfEnded(traceId, policy);
      }),
    );
  }

  private async noteJobStatuses(pipeline: Pick<ProvisionalPipeline, 'traceId' | 'outcomePolicy'>, statuses: readonly string[]): Promise<void> {
    if (statuses.length === 0 || pipeline.outcomePolicy === undefined) return;
    await this.parking.noteFacts(pipeline.traceId, { statuses }, this.factsTtlMs);
    await this.decideIfEnded(pipeline.traceId, pipeline.outcomePolicy);
  }

  /**
   * Statuses a Job Hook told of jobs of `pipelineId` that the decorator did not trace (their pickup found the store
   * away): still its jobs' outcomes (SPEC §11 "any of its jobs failed"). Kept under the pipeline's id, for its
   * terminal Pipeline Hook to read whenever that comes; then also noted on the pipeline's trace if it is known
   * already, so one of the two always sees them, in whichever order, and on whichever replica, both come.
   */
  private async notePipelineJobStatuses(pipelineId: number, statuses: readonly string[]): Promise<void> {
    await this.parking.notePipelineJobStatuses(pipelineId, statuses, this.factsTtlMs);
  }

  /**
   * A provisional pipeline's Pipeline Hook, once its own spans were offered (SPEC §11 "Decision on outcome"): the
   * statuses of its finished jobs are gathered, a child pipeline's too (and decide at once if its root has ended);
   * the root's terminal hook decides; the root running again after its end reopens it, unless the hook is an old one.
   * Each branch reaches the decision once.
   */
  private async onPipelineHook(pipeline: ProvisionalPipeline, event: PipelineHookFacts): Promise<void> {
    const policy = pipeline.outcomePolicy;
    if (policy === undefined) return;
    const traceId = pipeline.traceId;
    // At its end, with what Job Hooks told of its jobs that were not traced (read before the end is noted).
    const untraced = event.end === undefined ? [] : await this.parking.jobStatusesOf(event.pipelineId);
    const statuses = [...(event.end === undefined ? [] : [event.end.status]), ...event.finishedJobs.map((job) => job.status), ...untraced];
    const root = event.rootPipelineId ?? pipeline.rootPipelineId;
    if (event.pipelineId !== root) {
      const child = event.end === undefined ? { childRunning: event.pipelineId } : { childEnded: event.pipelineId };
      await this.parking.noteFacts(traceId, { statuses, ...child }, this.factsTtlMs);
      await this.decideIfEnded(traceId, policy);
      return;
    }
    if (event.end === undefined) {
      // The root runs: its jobs that finished meanwhile (an allowed-to-fail job that failed keeps it) decide if it had ended.
      if (statuses.length > 0) {
        await this.parking.noteFacts(traceId, { statuses }, this.factsTtlMs);
        await this.decideIfEnded(traceId, policy);
      }
      const facts = await this.parking.readFacts(traceId);
      if (facts.rootEnd === undefined && (await this.parking.findDecision(traceId)) === null) return;
      if (!runsAgain(event.activeJobIds, facts.finishedRootJobs)) return;
      if (await this.parking.reopen(traceId, this.limits.holdMs))
        this.logger.log(`trace ${traceId}: its pipeline runs again after it was dropped; provisional again`);
      return;
    }
    const { status, createdAt, finishedAt } = event.end;
    const rootEnd: RootOutcome = { status, createdAt, finishedAt };
    await this.parking.noteFacts(traceId, { statuses, rootEnd, finishedRootJobs: event.finishedJobs.map((job) => job.jobId) }, this.factsTtlMs);
    await this.decideIfEnded(traceId, policy);
  }

  /**
   * With the root ended: a keep is taken at once; a drop waits for late child pipelines (the sweep takes it when
   * they have ended, or OUTCOME_SAMPLING_LATE_CHILD_SECONDS after the root, whichever is later).
   */
  private async decideIfEnded(traceId: string, policy: OutcomePolicy): Promise<void> {
    const facts = await this.parking.readFacts(traceId);
    if (facts.rootEnd === undefined) return;
    const decision = decideOnOutcome(policy, facts.rootEnd, facts);
    if (decision.keep) await this.record(traceId, decision);
    else if ((await this.parking.findDecision(traceId)) === null) await this.parking.schedule(traceId, Date.now() + this.lateChildMs);
  }

  /**
   * Records the decision (the first stands) and acts on the one recorded: kept, a pointer to the trace enters the
   * outbox (never refused; a copy of it is dropped), and the outbox's deliverer is woken; dropped, what is parked is
   * deleted without being read and the trace ends. Throws when a step fails: the hook is spooled and replayed, or the
   * sweep takes the trace again.
   */
  private async record(traceId: string, decision: TraceDecision): Promise<TraceDecision> {
    const recorded = await this.parking.decide(traceId, decision, this.limits.rememberMs);
    if (recorded.changed) this.metrics.decided(recorded.decision);
    if (recorded.decision.keep) {
      // Its control-plane spans join the outbox now, before any later hook's newer version of a pipeline span can
      // (SPEC §10: never an older version after a newer one); the pointer then carries the runner's exports.
      await this.moveParkedSpans(traceId, recorded.decision.reason);
      await this.outbox.enqueue([{ key: kindKey(PARKED_KIND, traceId), body: recorded.decision.reason, enqueuedAt: Date.now() }], this.outboxLimits);
      // Until delivered the sweep looks again after a while, in case the pointer's delivery was given up.
      await this.parking.schedule(traceId, Date.now() + this.limits.holdMs);
      this.deliverer.kick();
    } else {
      await this.parking.drop(traceId);
      await this.parking.finish(traceId);
    }
    return recorded.decision;
  }

  /**
   * Traces that are due: a drop that waited for late child pipelines, a time limit that ended without the root's
   * terminal hook (`when_no_outcome` decides, counted as no_outcome), or a decided trace a step left unfinished.
   */
  private async sweep(): Promise<void> {
    try {
      const due = await this.parking.claimOverdue(SWEEP_BATCH, SWEEP_EVERY_MS * 6);
      for (const traceId of due) await this.sweepOne(traceId);
      await this.readUsage();
    } catch (error) {
      this.logger.warn(`outcome sampling: due pipelines not decided: ${(error as Error).message}`);
    }
  }

  private async sweepOne(traceId: string): Promise<void> {
    const recorded = await this.parking.findDecision(traceId);
    if (recorded !== null) {
      // Decided before: act on that decision again, never take another (a drop stays a drop).
      if (!recorded.keep || (await this.parking.parkedIds(traceId)).length === 0) {
        await this.parking.drop(traceId);
        await this.parking.finish(traceId);
      } else await this.record(traceId, recorded);
      return;
    }
    const facts = await this.parking.readFacts(traceId);
    if (facts.rootEnd !== undefined) {
      // The root ended and its outcome would drop: taken now unless a child pipeline still runs within the time limit.
      if (facts.runningChildren.length > 0) {
        await this.parking.schedule(traceId, Date.now() + this.lateChildMs);
        return;
      }
      // Every fact that came since was decided on with the pipeline's policy as it came (a keep is taken at once):
      // what is left is the drop its outcome took.
      await this.record(traceId, { keep: false, reason: 'outcome' });
      return;
    }
    const decision = await this.record(traceId, decideWithoutOutcome(facts.whenNoOutcome ?? 'keep'));
    this.logger.log(`trace ${traceId}: no pipeline outcome within ${this.config.maxWaitSeconds} s; ${decision.keep ? 'kept' : 'dropped'}`);
  }

  /**
   * One round of a kept trace's delivery, for the outbox's deliverer: its control-plane spans move into the outbox
   * (settled, each once: SPEC §10's dedup then also drops a later Job Hook's copy), else one page of exports goes to
   * the collector. What was delivered leaves the store at once, so a retry sends only the rest; when nothing is
   * left the trace ends and its budget comes back.
   */
  private async deliverParked(entry: ClaimedEntry, deadline: number): Promise<KindDelivery> {
    const traceId = entry.key.slice(PARKED_KIND.length + 1);
    const reason = entry.body.toString() as OutcomeSamplingReason;
    const ids = await this.parking.parkedIds(traceId);
    if (ids.length === 0) {
      await this.parking.finish(traceId);
      // Parked spans are held a fixed time from their last park, which is no later than the decision that enqueued
      // this pointer: one that waited longer finds them expired, not delivered (the collector was away that long).
      if (Date.now() - entry.enqueuedAt >= this.factsTtlMs) {
        this.metrics.expiredBeforeDelivery();
        this.logger.error(
          `trace ${traceId}: kept pipeline given up: its parked spans expired before the collector took them (unreachable for ${Math.round((Date.now() - entry.enqueuedAt) / 3_600_000)} h)`,
        );
      } else this.metrics.delivered(entry.enqueuedAt);
      return { result: { kind: 'accepted', status: 200, partialSuccess: undefined }, more: false };
    }
    const planned = nextPage(ids);
    const page = await this.parking.parkedEntries(traceId, planned);
    if (page.length === 0) {
      // Gone meanwhile (released by another round, or expired): nothing to send for them.
      await this.parking.release(
        traceId,
        planned.map((id) => id.id),
      );
      return { result: { kind: 'accepted', status: 200, partialSuccess: undefined }, more: true };
    }
    if (page[0].kind === 'spans') {
      await this.moveParkedSpans(traceId, reason);
      return { result: { kind: 'accepted', status: 200, partialSuccess: undefined }, more: true };
    }
    const encoding = page[0]?.kind === 'json' ? 'json' : 'protobuf';
    // What the collector refused alone comes back in `dropped`: the deliverer counts and logs it.
    const sent = await sendPage(this.collector, encoding, page, reason, deadline);
    await this.parking.release(
      traceId,
      sent.done.map((parked) => parked.id),
    );
    if (sent.keptBy !== undefined) return { result: sent.keptBy, more: false, dropped: sent.dropped };
    return { result: { kind: 'accepted', status: 200, partialSuccess: undefined }, more: true, dropped: sent.dropped };
  }

  /** A kept trace's parked control-plane spans, settled, into the outbox (each key once), and out of parking. */
  private async moveParkedSpans(traceId: string, reason: OutcomeSamplingReason): Promise<void> {
    const ids = (await this.parking.parkedIds(traceId)).filter((id) => id.kind === 'spans');
    if (ids.length === 0) return;
    const page = await this.parking.parkedEntries(traceId, ids);
    await this.outbox.enqueue(parkedSpansAsEntries(page, reason, Date.now()), this.outboxLimits);
    await this.parking.release(
      traceId,
      page.map((parked) => parked.id),
    );
    this.deliverer.kick();
  }

  /** The parked usage for the metrics and readiness, read at most every few seconds. */
  async readUsage(): Promise<void> {
    if (performance.now() - this.usageReadAt < USAGE_EVERY_MS) return;
    this.usageReadAt = performance.now();
    this.metrics.observedUsage(await this.parking.usage());
  }

  /** Whether the outcome-sampling toggle is on for anyone: told by the control process's flags (a gateway-only process loads none). */
  watchToggle(toggled: () => boolean): void {
    this.toggled = toggled;
    this.toggledWithoutWebhooks();
  }

  /**
   * The toggle is on but no webhook secret is set: no outcome would ever come, so nothing is traced provisionally
   * (the decorator checks) and this is said once in the log and in readiness (SPEC §11).
   */
  toggledWithoutWebhooks(): boolean {
    const missing = this.webhooks.secretFile === undefined && this.toggled();
    if (missing && !this.warnedWithoutWebhooks) {
      this.warnedWithoutWebhooks = true;
      this.logger.warn(
        "ci_job_telemetry_outcome_sampling is enabled but GITLAB_WEBHOOK_SECRET_FILE is not set: outcome sampling needs GitLab's Pipeline Hooks, so no pipeline is traced provisionally",
      );
    }
    return missing;
  }

  /** Whether the total budget is full: nearly all used, or an entry found no room in the last minute (readiness: degraded). */
  budgetFull(): boolean {
    return this.metrics.lastUsage().bytes >= this.limits.maxTotalBytes * 0.95 || performance.now() - this.totalFullAt < 60_000;
  }
}
