import type { Logger } from 'pino';
import { GatewayConfig } from '../config/sections/gateway';
import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow } from '../otlp/retry-after';
import { encodingOf, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { encodeExportResponse, mergePartialSuccess, OtlpPartialSuccess } from '../otlp/otlp-response';
import { OtlpPayloadError, WireBody } from '../otlp/otlp-wire';
import { settleProvisionalTraces } from '../otlp/sampling-reason';
import { RunnerCredential } from '../runner-auth/runner-credential';
import { AuthOutcome } from '../runner-auth/auth-outcome';
import { DecisionCache } from '../runner-auth/decision-cache';
import { Receipt } from '../limits/block-lease';
import { JobSpanLedger } from '../limits/job-span-ledger';
import { LimitStore } from '../limits/limit-store';
import { WindowLedger } from '../limits/window-ledger';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayError } from './otlp-errors';
import { enforceExport } from './export-policy/enforce-export';
import { EnforcedExport, GatewayGrant, SpanBudget, SpanLimits } from './export-policy/otlp-types';
import type { CollectorClient } from '../collector/collector-client';
import type { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';
import type { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';

/**
 * The gateway's core (SPEC §6): an export from the runner's credential to the collector's answer, credentials →
 * identity → policy → forward, with no HTTP server in it. The Fastify shell (otlp-gateway.server.ts) calls `admit`
 * when a request arrives and `exportItems` once its body is read, and answers every GatewayError in one place, as
 * Tempo's distributor keeps its receivers beside its core. Every export of every job passes here: nothing on this
 * path allocates, awaits or makes a closure that the straight line does not need.
 */

/** A span quota lives at least this long even for a grant about to end (clock skew between replicas). */
const MIN_QUOTA_TTL_MS = 60_000;

export type AllowedDecision = Extract<AuthOutcome, { kind: 'allowed' }>;

export interface GatewayDependencies {
  readonly config: GatewayConfig;
  readonly logger: Logger;
  readonly decisions: DecisionCache;
  /** The runner windows and span quotas are leased from it (issue 21): see ExportPath's ledgers. */
  readonly store: LimitStore;
  /** Only `export` is used here: the module owns the client's life, and tests pass a fake collector. */
  readonly collector: Pick<CollectorClient, 'export'>;
  readonly metrics: GatewayMetrics;
  /** Told of the runner's `job_execution` ends, which close job spans when no webhook will (SPEC §10). */
  readonly pipelineSpans?: Pick<PipelineSpansService, 'jobSpanToCloseFromRunner' | 'closeJobFromRunner'>;
  /** Where a provisional pipeline's traces are parked until its outcome decides (SPEC §11). */
  readonly outcomeSampling?: Pick<OutcomeSamplingService, 'parkExport'>;
}

export class ExportPath {
  /** What the gateway spends without a store round trip per export (issue 21): blocks of runner windows, leases of span quotas. */
  private readonly windows: WindowLedger;
  private readonly spans: JobSpanLedger;

  constructor(private readonly deps: GatewayDependencies) {
    this.windows = new WindowLedger(deps.store, { observer: deps.metrics });
    this.spans = new JobSpanLedger(deps.store, { observer: deps.metrics });
  }

  /**
   * Admission, before the body is read: the credential decides the job's identity, then the runner's export window
   * is charged. A client without a valid credential, or a runner over its rate, never makes the gateway buffer or
   * inflate anything.
   * @throws GatewayError with the refusal, answered as the auth endpoint answers it.
   */
  async admit(credential: RunnerCredential): Promise<AllowedDecision> {
    const { config, decisions, logger } = this.deps;
    const decision: AuthOutcome =
      credential.kind === 'missing'
        ? {
            kind: 'unauthenticated',
            reason: `${credential.reason}: export to the job's capability URL, or send the job token as Authorization: Bearer and the runner token as Runner-Token`,
          }
        : (await decisions.decide(credential)).decision;
    if (decision.kind !== 'allowed') {
      // Every refusal with its reason; the request id comes with every line, a token or capability never (SPEC §5).
      logger.info({ refusal: decision.kind, reason: decision.reason }, 'export refused');
      throw new GatewayError(decision);
    }
    const window = this.windows.charge(`gateway:runner:${decision.identity.runnerId}`, config.runnerRateLimit, config.runnerRateWindowSeconds * 1000);
    const charged = window instanceof Promise ? await orUnavailable(window) : window;
    if (!charged.allowed) {
      throw new GatewayError({ kind: 'rate_limited', reason: 'runner rate limit exceeded', retryAfterSeconds: retryAfterForWindow(charged.resetInMs) });
    }
    return decision;
  }

  /**
   * One admitted export, in a straight line as the Collector's otlphttp handler reads: enforce → charge →
   * forward → answer. The charge is a receipt from the job's span lease; what the collector did not accept
   * is refunded through it (SPEC §6: a retried export is never charged twice).
   * @returns the Export*ServiceResponse body, in the export's encoding.
   * @throws GatewayError for every answer that is not a success.
   */
  async exportItems(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer, decision: AllowedDecision): Promise<Buffer> {
    const { config, metrics } = this.deps;
    // Only traces wait for a provisional pipeline's outcome (SPEC §11): its metrics and logs are not trace-sampled
    // data and go on at once, saying `head` (forwarded without waiting), rather than being held a pipeline long.
    const grant: GatewayGrant =
      signal !== 'traces' && decision.identity.provisional === true ? { ...decision.identity, provisional: false } : decision.identity;
    const spanLimits = {
      maxBytes: config.spanMaxBytes,
      maxAttributes: config.spanMaxAttributes,
      maxAttributeValueBytes: config.spanMaxAttributeValueBytes,
    };
    let enforced = enforce(signal, encoding, body, grant, Number.MAX_SAFE_INTEGER, spanLimits);

    let receipt: Receipt | undefined;
    if (enforced.forwardedItems > 0 && signal === 'traces') {
      const wanted = enforced.forwardedItems;
      const quotaTtlMs = Math.max(MIN_QUOTA_TTL_MS, decision.identity.expiresAt - Date.now());
      const limits = { perJob: config.spansPerJob, perSecond: config.spansPerSecondPerJob };
      const pending = this.spans.charge(grant.jobId, wanted, limits, quotaTtlMs);
      const charge = pending instanceof Promise ? await orUnavailable(pending) : pending;
      receipt = charge.receipt;
      // Rarely (quota nearly used, the second's rate spent): enforced again with exactly the room each limit had.
      if (charge.granted < wanted) enforced = enforce(signal, encoding, body, grant, { quota: charge.quotaRoom, rate: charge.rateRoom }, spanLimits);
    }
    countItems(metrics, signal, enforced);
    const ours: OtlpPartialSuccess | undefined =
      enforced.rejectedItems > 0 ? { rejectedItems: enforced.rejectedItems, errorMessage: enforced.errorMessage ?? '' } : undefined;
    if (enforced.nothingToForward) return encodeExportResponse(signal, encoding, ours);

    let outgoing = enforced.wire;
    if (grant.provisional === true && this.deps.outcomeSampling !== undefined) {
      let parked;
      try {
        // Acknowledged only once kept: a store that cannot keep it answers retryable and charges nothing.
        parked = await orUnavailable(this.deps.outcomeSampling.parkExport(grant.traceId, encoding, outgoing.joined(), enforced.forwardedItems));
      } catch (error) {
        receipt?.refund();
        throw error;
      }
      // Parked, or dropped as the decision (or a full budget falling back to the head decision) says.
      if (parked.kind !== 'forward') return encodeExportResponse(signal, encoding, ours);
      // A late export of a pipeline kept already goes on, saying why.
      outgoing = WireBody.of(settleProvisionalTraces(encoding, outgoing.joined(), parked.reason));
    }

    let theirs: OtlpPartialSuccess | undefined;
    try {
      theirs = await forward(this.deps, signal, encoding, outgoing);
    } catch (error) {
      // Nothing was accepted: the client sends these spans again, and must not pay for them twice.
      receipt?.refund();
      throw error;
    }
    // Spans the collector itself rejected were not accepted either.
    receipt?.refund(theirs?.rejectedItems ?? 0);
    if (signal === 'traces') reportJobEnds(this.deps, enforced, grant.jobId);
    return encodeExportResponse(signal, encoding, mergePartialSuccess(ours, theirs));
  }

  /** Leases not spent go back to the store when the gateway stops, for the other replicas. */
  async close(): Promise<void> {
    await Promise.all([this.windows.close(), this.spans.close()]);
  }
}

function enforce(
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  grant: GatewayGrant,
  budget: number | SpanBudget,
  limits: SpanLimits,
): EnforcedExport {
  try {
    return enforceExport(signal, encoding, body, grant, budget, limits);
  } catch (error) {
    if (error instanceof OtlpPayloadError) throw new GatewayError({ kind: 'bad_request', message: error.message });
    throw error;
  }
}

function countItems(metrics: GatewayMetrics, signal: OtlpSignal, enforced: EnforcedExport): void {
  const rejected = enforced.rejections;
  if (rejected !== undefined) {
    metrics.itemsOf(signal, 'rejected_foreign_trace', rejected.foreignTrace);
    metrics.itemsOf(signal, 'rejected_undecodable', rejected.undecodable);
    metrics.itemsOf(signal, 'rejected_control_plane_span_id', rejected.controlPlaneSpanId);
    metrics.itemsOf(signal, 'rejected_reserved_attribute', rejected.reservedAttribute);
    metrics.itemsOf(signal, 'rejected_span_limits', rejected.overLimits);
    metrics.itemsOf(signal, 'rejected_quota', rejected.overQuota);
    metrics.itemsOf(signal, 'rejected_rate', rejected.overRate);
  }
  metrics.itemsOf(signal, 'accepted', enforced.forwardedItems);
}

/** The runner's `job_execution` ends in what was forwarded, when they are what closes the job span (not awaited). */
function reportJobEnds(deps: GatewayDependencies, enforced: EnforcedExport, jobId: number): void {
  // Enforcement noted the job_execution spans as it walked them; most exports have none.
  if (enforced.jobExecutionEnds === undefined) return;
  const jobSpanId = deps.pipelineSpans?.jobSpanToCloseFromRunner(jobId);
  if (jobSpanId === undefined) return;
  for (const end of enforced.jobExecutionEnds) {
    if (end.parentSpanId === jobSpanId) void deps.pipelineSpans!.closeJobFromRunner(jobId, end);
  }
}

/** 2xx only when the collector answered 2xx; its partial success is returned for merging. */
async function forward(deps: GatewayDependencies, signal: OtlpSignal, encoding: OtlpEncoding, body: WireBody): Promise<OtlpPartialSuccess | undefined> {
  const { collector, metrics } = deps;
  const started = performance.now();
  const result = await collector.export(signal, encoding, body);
  const happened = result.kind === 'retry' ? result.happened : result.status;
  metrics.upstreamAnswered(signal, String(happened), (performance.now() - started) / 1000);
  if (happened === 'timeout') throw new GatewayError({ kind: 'upstream_timeout' });
  if (happened === 'unreachable') throw new GatewayError({ kind: 'upstream_unreachable' });
  metrics.forwarded(signal, body.length);
  if (result.kind === 'accepted') return result.partialSuccess;
  const { retryAfterSeconds, contentType, body: answer } = result;
  if (happened >= 400 && happened < 500) {
    // The collector's own Status goes on as it came when the client can read it (same encoding).
    const statusBody = answer !== undefined && answer.length > 0 && encodingOf(contentType) === encoding ? answer : undefined;
    throw new GatewayError({ kind: 'upstream_refused', status: happened, retryAfterSeconds, statusBody });
  }
  throw new GatewayError({ kind: 'upstream_error', status: happened, retryAfterSeconds });
}

async function orUnavailable<T>(operation: Promise<T>): Promise<T> {
  try {
    return await operation;
  } catch (error) {
    if (error instanceof StoreUnavailableError) throw new GatewayError({ kind: 'store_unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS });
    throw error;
  }
}
