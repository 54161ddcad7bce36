import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { join } from 'node:path';
import { ProcessConfig } from '../config/sections/process';
import { WebhooksConfig } from '../config/sections/webhooks';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { TimeoutError, withTimeout } from '../observability/with-timeout';
import { parseJobHook, parsePipelineHook, WebhookPayloadError } from './gitlab-webhook';
import type { WebhookEvent } from '../pipeline-spans/pipeline-events';
import { PipelineSpansService, WebhookOutcome } from '../pipeline-spans/pipeline-spans.service';
import { ReceivedHook, SpoolEntry, WebhookSpool } from './webhook-spool';
import { SpoolDrop, SpoolReason, SpoolRefusal, WebhookSpoolMetrics } from './webhook-spool.metrics';

/** The event kinds SPEC §10 reads, by GitLab's `X-Gitlab-Event` header. */
const PARSERS: Record<string, (body: unknown, receivedAt: number) => WebhookEvent> = {
  'Pipeline Hook': parsePipelineHook,
  'Job Hook': parseJobHook,
};

export const isReadEvent = (event: string): boolean => Object.hasOwn(PARSERS, event);

/** What became of a webhook: the route answers each one its own way. */
export type Intake =
  | { readonly kind: 'recorded'; readonly outcome: WebhookOutcome }
  | { readonly kind: 'ignored' }
  | { readonly kind: 'invalid'; readonly problem: string }
  | { readonly kind: 'spooled'; readonly reason: SpoolReason }
  | { readonly kind: 'refused'; readonly reason: SpoolRefusal };

/**
 * A spooled hook whose handling fails for another reason than the store (a bug, a payload a new parser
 * rejects) is tried this many times, a backoff apart, then dropped and logged: it must not hold its
 * pipeline's later hooks back for ever.
 */
const MAX_REPLAY_ATTEMPTS = 5;
const FIRST_REPLAY_BACKOFF_MS = 1000;

/** The pipeline a hook's order is kept within: a Pipeline Hook's own id, a Job Hook's `pipeline_id`. */
function pipelineIdOf(event: string, body: unknown): number {
  const object = (value: unknown) => (typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {});
  const id = event === 'Pipeline Hook' ? object(object(body).object_attributes).id : object(body).pipeline_id;
  const number = typeof id === 'string' ? Number(id) : id;
  return typeof number === 'number' && Number.isSafeInteger(number) && number > 0 ? number : 0;
}

const isStoreOutage = (error: unknown) => error instanceof StoreUnavailableError || error instanceof TimeoutError;

/**
 * SPEC §10 delivery, GitLab's side of it: GitLab never sends a failed hook again by itself, and disables a
 * webhook after four failures in a row (for a minute, doubling up to a day; for good after 40), so every
 * well-formed, authenticated hook is answered 2xx unless it truly cannot be kept. It is handled at once
 * when the store answers within WEBHOOK_STORE_TIMEOUT_MS (well inside GitLab's own 10 s webhook timeout);
 * otherwise, or when handling fails unexpectedly, it goes to this replica's {@link WebhookSpool} and is
 * replayed through the same handling once the store is back, so the store's deduplication (span ids)
 * makes a replay of a hook whose first attempt got through after all emit nothing twice. Only a full or
 * unwritable spool gets a 503.
 */
@Injectable()
export class WebhookSpoolService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger(WebhookSpoolService.name);
  private spool: WebhookSpool | undefined;
  private readonly attempts = new WeakMap<SpoolEntry, number>();
  private backoffMs = FIRST_REPLAY_BACKOFF_MS;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopped = false;
  /** Since when hooks have waited, and how many were replayed since: the one line an outage ends with. */
  private outage: { since: number; replayed: number } | undefined;

  constructor(
    private readonly config: WebhooksConfig,
    private readonly processConfig: ProcessConfig,
    private readonly pipelineSpans: PipelineSpansService,
    private readonly metrics: WebhookSpoolMetrics,
  ) {}

  get directory(): string {
    return this.config.spoolDir ?? join(this.processConfig.dataDir, 'webhook-spool');
  }

  /** Opens the spool (only where webhooks are accepted) and replays what a previous process left in it. */
  async onModuleInit(): Promise<void> {
    if (this.config.secretFile === undefined) return;
    this.spool = await WebhookSpool.open(this.directory, { maxHooks: this.config.spoolMaxHooks, maxBytes: this.config.spoolMaxBytes });
    this.publishDepth();
    const left = this.spool.depth().hooks;
    if (left === 0) return;
    this.outage = { since: this.spool.depth().oldestSpooledAt ?? Date.now(), replayed: 0 };
    this.logger.warn(`${left} GitLab webhook(s) left in the spool (${this.directory}) by a previous process: replaying them`);
    this.scheduleReplay(0);
  }

  /** A replay under way finishes the hook it is on; the rest stay on disk for the next start. */
  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round;
  }

  /** An authenticated webhook: read, then recorded in the store, or spooled, or refused. Never throws. */
  async take(hook: Omit<ReceivedHook, 'pipelineId'>): Promise<Intake> {
    const parse = isReadEvent(hook.event) ? PARSERS[hook.event] : undefined;
    if (parse === undefined) return { kind: 'ignored' };
    const received: ReceivedHook = { ...hook, pipelineId: pipelineIdOf(hook.event, hook.body) };
    let event: WebhookEvent;
    try {
      event = parse(hook.body, hook.receivedAt);
    } catch (error) {
      if (error instanceof WebhookPayloadError) return { kind: 'invalid', problem: error.message };
      return this.keep(received, 'error', error);
    }
    const spool = this.spool!;
    // Its pipeline's earlier hooks wait in the spool: this one waits behind them, so they are told in order.
    if (spool.holds(received.pipelineId)) return this.keep(received, 'behind_spooled');
    try {
      return { kind: 'recorded', outcome: await this.handle(event) };
    } catch (error) {
      return this.keep(received, error instanceof TimeoutError ? 'store_timeout' : isStoreOutage(error) ? 'store_unavailable' : 'error', error);
    }
  }

  private handle(event: WebhookEvent): Promise<WebhookOutcome> {
    return withTimeout(() => this.pipelineSpans.handleWebhook(event), this.config.storeTimeoutMs);
  }

  private async keep(hook: ReceivedHook, reason: SpoolReason, cause?: unknown): Promise<Intake> {
    const spool = this.spool!;
    const named = `${hook.event} ${hook.uuid ?? ''}`.trim();
    const wasEmpty = spool.depth().hooks === 0;
    let answer;
    try {
      answer = await spool.add(hook);
    } catch (error) {
      this.metrics.hookRefused('unwritable');
      this.logger.error(`${named} refused with 503, the webhook spool ${this.directory} cannot be written: ${(error as Error).message}`);
      return { kind: 'refused', reason: 'unwritable' };
    }
    this.publishDepth();
    if (answer === 'full') {
      this.metrics.hookRefused('full');
      this.logger.error(
        `${named} refused with 503, the webhook spool is full (WEBHOOK_SPOOL_MAX_HOOKS=${this.config.spoolMaxHooks}, WEBHOOK_SPOOL_MAX_BYTES=${this.config.spoolMaxBytes}); GitLab will not send it again`,
      );
      return { kind: 'refused', reason: 'full' };
    }
    this.metrics.hookSpooled(reason);
    const why = cause === undefined ? 'earlier hooks of its pipeline wait' : (cause as Error).message;
    if (reason === 'error') this.logger.error(`${named} spooled, its handling failed unexpectedly: ${(cause as Error).stack ?? why}`);
    else this.logger.warn(`${named} spooled (${reason}: ${why}); ${spool.depth().hooks} waiting`);
    if (wasEmpty && this.outage === undefined) {
      this.outage = { since: Date.now(), replayed: 0 };
      this.logger.warn(`webhooks are being spooled to ${this.directory} until the store takes them again; readiness says webhook_spool: degraded`);
    }
    this.scheduleReplay();
    return { kind: 'spooled', reason };
  }

  private scheduleReplay(delayMs = this.backoffMs): void {
    if (this.stopped || this.timer !== undefined || this.round !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.round = this.replayRound().then((result) => {
        this.round = undefined;
        this.afterRound(result);
      });
    }, delayMs);
  }

  /**
   * Replays waiting hooks oldest first. A store outage ends the round (all later ones would meet it too);
   * a hook that fails otherwise holds back only its own pipeline's later hooks until the next round.
   */
  private async replayRound(): Promise<{ replayed: number; storeDown: boolean }> {
    const spool = this.spool!;
    const heldBack = new Set<number>();
    let replayed = 0;
    let storeDown = false;
    try {
      for (const entry of spool.entries()) {
        if (this.stopped) break;
        if (heldBack.has(entry.pipelineId)) continue;
        if (!entry.written) {
          heldBack.add(entry.pipelineId);
          continue;
        }
        let hook: ReceivedHook;
        let event: WebhookEvent;
        try {
          hook = await spool.read(entry);
          event = PARSERS[hook.event](hook.body, hook.receivedAt);
        } catch (error) {
          await this.drop(entry, 'unreadable', `spooled webhook #${entry.sequence}`, error);
          continue;
        }
        try {
          await this.handle(event);
        } catch (error) {
          if (isStoreOutage(error)) {
            storeDown = true;
            this.logger.debug(`webhook replay paused, the store is still unavailable: ${(error as Error).message}`);
            break;
          }
          const attempts = (this.attempts.get(entry) ?? 0) + 1;
          this.attempts.set(entry, attempts);
          if (attempts >= MAX_REPLAY_ATTEMPTS) await this.drop(entry, 'failed_repeatedly', `${hook.event} ${hook.uuid ?? ''}`, error);
          else {
            heldBack.add(entry.pipelineId);
            this.logger.warn(`${hook.event} ${hook.uuid ?? ''} replay failed (attempt ${attempts} of ${MAX_REPLAY_ATTEMPTS}): ${(error as Error).message}`);
          }
          continue;
        }
        await spool.remove(entry);
        replayed++;
        this.metrics.hookReplayed();
        this.publishDepth();
      }
    } catch (error) {
      this.logger.error(`webhook replay failed: ${(error as Error).message}`);
    }
    return { replayed, storeDown };
  }

  private afterRound({ replayed, storeDown }: { replayed: number; storeDown: boolean }): void {
    const spool = this.spool!;
    if (this.outage !== undefined) this.outage.replayed += replayed;
    if (spool.depth().hooks === 0) {
      this.backoffMs = FIRST_REPLAY_BACKOFF_MS;
      if (this.outage !== undefined) {
        const seconds = Math.round((Date.now() - this.outage.since) / 1000);
        this.logger.log(`webhook spool empty: ${this.outage.replayed} spooled webhook(s) recorded in the store, ${seconds} s after the first was spooled`);
        this.outage = undefined;
      }
      return;
    }
    // Progress means the store is back: go on at once with what arrived meanwhile; otherwise back off.
    if (replayed > 0 && !storeDown) {
      this.backoffMs = FIRST_REPLAY_BACKOFF_MS;
      this.scheduleReplay(0);
      return;
    }
    const delay = Math.min(this.backoffMs, this.config.replayMaxBackoffSeconds * 1000);
    this.backoffMs = Math.min(this.backoffMs * 2, this.config.replayMaxBackoffSeconds * 1000);
    this.scheduleReplay(delay);
  }

  private async drop(entry: SpoolEntry, reason: SpoolDrop, named: string, error: unknown): Promise<void> {
    await this.spool!.remove(entry);
    this.metrics.hookDropped(reason);
    this.publishDepth();
    this.logger.error(`${named.trim()} dropped from the webhook spool (${reason}), its spans are lost: ${(error as Error).message}`);
  }

  private publishDepth(): void {
    this.metrics.spoolDepth(this.spool!.depth());
  }
}
