import { Inject, Injectable, Logger } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { SECRETS } from '../config/config.constants';
import { JobPayloadConfig } from '../config/sections/job-payload';
import { OutboxConfig } from '../config/sections/outbox';
import { Secrets } from '../config/secrets';
import { FlagsService } from '../flags/flags.service';
import { Grant, grantEndsAt, GrantStore, SaveGrantOptions } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { HeadDecision, TracedJob, TracedWorkStore } from '../traced-work/traced-work';
import { PICKUP_TRACED_WORK_STORE } from '../traced-work/traced-work.constants';
import { withTimeout } from '../observability/with-timeout';
import { startDecisionSpan } from '../observability/tracing';
import { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';
import { capabilityPath, mintCapability } from '../runner-auth/job-capability';
import { gitlabTraceContextOf, provisionalContextOf, spanIdFor, TraceContext, traceContextOf, traceIdFor } from '../trace-context/trace-context';
import { OutcomePolicy } from '../outcome-sampling/outcome-policy';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { FlagContext } from '../flags/flags.service';
import {
  Decoration,
  enabledTelemetry,
  flagContextOf,
  GATEWAY_AUTH_TYPE,
  HOSTED_AUTH_TYPE,
  OtelEndpoint,
  payloadChanges,
  pickupRecords,
  TelemetryReason,
  tracesUrl,
  withoutTrailingSlash,
} from './job-payload-decoration';
import { JobPayloadRequest } from './job-payload-request';
import { JobPayloadMetrics } from './job-payload.metrics';
import { HeadDecisions } from './head-decisions';

/** Root pipelines whose trace id is kept: every job of a pipeline asks for the same one (~100 bytes each). */
const TRACE_ID_CACHE_SIZE = 10_000;

@Injectable()
export class JobPayloadService {
  private readonly logger = new Logger(JobPayloadService.name);
  private readonly hostedRunnerTypes: ReadonlySet<string>;
  private readonly hostedRunnerIds: ReadonlySet<number>;
  /** Where runners export to: fixed by configuration, so built once rather than on every pickup. */
  private readonly headerEndpoint: OtelEndpoint;
  private readonly hostedEndpoint: OtelEndpoint;
  /** GATEWAY_PUBLIC_URL without a trailing slash: capability URLs are built on it. */
  private readonly gatewayBase: string;
  /** Trace id by root pipeline id: a pure function of the two, so a kept one is always the right one. */
  private readonly traceIds = new LRUCache<number, string>({ max: TRACE_ID_CACHE_SIZE });
  /** Head decisions by root pipeline id, as the store keeps them (they never change while remembered). */
  private readonly headDecisions: HeadDecisions;

  constructor(
    private readonly config: JobPayloadConfig,
    outbox: OutboxConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    private readonly flags: FlagsService,
    private readonly metrics: JobPayloadMetrics,
    private readonly pipelineSpans: PipelineSpansService,
    private readonly outcomeSampling: OutcomeSamplingService,
    @Inject(PICKUP_TRACED_WORK_STORE) tracedWork: TracedWorkStore,
  ) {
    // As long as the pipeline's record and its spans' versions are remembered (a pipeline retried days later).
    this.headDecisions = new HeadDecisions(tracedWork, outbox.dedupSeconds * 1000);
    this.hostedRunnerTypes = new Set(config.hostedRunnerTypes);
    this.hostedRunnerIds = new Set(config.hostedRunnerIds);
    this.gatewayBase = withoutTrailingSlash(config.gatewayPublicUrl);
    this.headerEndpoint = { url: tracesUrl(this.gatewayBase), auth: { type: GATEWAY_AUTH_TYPE } };
    this.hostedEndpoint = {
      url: tracesUrl(withoutTrailingSlash(config.collectorPublicUrl)),
      auth: { type: HOSTED_AUTH_TYPE, http_bearer_gcp_oidc: { audience: config.hostedOidcAudience } },
    };
  }

  /**
   * What a pickup's payload gets, from its runner and job alone (the payload itself decides nothing). Never throws
   * for the store or Unleash: job pickup must not fail because of telemetry (SPEC §4).
   */
  async decorate(request: Pick<JobPayloadRequest, 'runner' | 'job'>): Promise<Decoration> {
    const started = process.hrtime.bigint();
    const span = startDecisionSpan('ci_job_telemetry.job_payload');
    const result = await this.decide(request);
    span.end(
      result.telemetry.reason,
      () => ({ 'ci.job.id': request.job.id, 'ci.project.id': request.job.project_id, 'ci.runner.id': request.runner.id }),
      result.telemetry.reason === 'degraded',
    );
    this.metrics.decided(result.telemetry.reason, Number(process.hrtime.bigint() - started) / 1e9);
    return result;
  }

  private async decide({ runner, job }: Pick<JobPayloadRequest, 'runner' | 'job'>): Promise<Decoration> {
    const off = (reason: Exclude<TelemetryReason, 'enabled'>): Decoration => ({ telemetry: { enabled: false, reason } });

    if (!this.runnerSupportsTracing(runner.features)) return off('runner_unsupported');

    const flagContext = flagContextOf(runner, job);
    if (!this.flags.isTelemetryEnabled(flagContext)) return off('flag_disabled');

    const hosted = this.hostedRunnerTypes.has(runner.runner_type) || this.hostedRunnerIds.has(runner.id);
    // A pipeline's later jobs find its decision here: no store call, and no promise to wait on.
    const head = this.headDecisions.remembered(job.root_pipeline_id) ?? (await this.headDecisionFor(job.root_pipeline_id, flagContext));
    let context = this.traceContextFor(job.root_pipeline_id, job.id, head.samplingPercent);
    // Left out by the head decision: traced provisionally where its outcome can still keep it (SPEC §11), except on a
    // hosted runner, which exports straight to the collector and so could not be parked.
    const outcomePolicy = context.sampled || hosted ? undefined : head.outcomePolicy;
    if (!context.sampled) {
      if (outcomePolicy === undefined) return off('not_sampled');
      context = provisionalContextOf(context);
    }

    // Never enable a job with an endpoint it cannot use: header credentials need the runner token's
    // digest in the grant (SPEC §4).
    if (!hosted && this.config.runnerEndpointForm === 'headers' && runner.token === undefined) return off('runner_unsupported');
    const { grant, tracedJob, saveOptions } = pickupRecords(
      runner,
      job,
      context,
      this.secrets.tokenDigestKey,
      this.config.grantGraceSeconds,
      Date.now(),
      outcomePolicy,
    );
    // Hosted runners authenticate to the collector with OIDC and never need the grant; a job bound
    // for the gateway without a stored grant would only collect 403s, so it is not enabled at all.
    const stored = await this.saveGrant(grant, tracedJob, saveOptions);
    if (stored === undefined && !hosted) return off('degraded');
    // Its pipelines and queue wait are written with other pickups', after the answer: they never delay a pickup.
    this.pipelineSpans.recordPickup(tracedJob, (stored ?? grant).expiresAt, context.spanParentId);

    // The capability base URL goes to programs inside the job whenever the gateway can honour it.
    const capabilityBase =
      stored !== undefined ? `${this.gatewayBase}${capabilityPath(job.id, mintCapability(this.secrets.capabilityKeys[0], job.id))}` : undefined;
    const endpoint = hosted ? this.hostedEndpoint : this.config.runnerEndpointForm === 'headers' ? this.headerEndpoint : { url: tracesUrl(capabilityBase!) };
    return {
      changes: payloadChanges(context, endpoint, capabilityBase),
      // A job decorated again keeps its first expiry and any revocation: the store says which.
      telemetry: enabledTelemetry(context, endpoint, grantEndsAt(stored ?? grant), outcomePolicy !== undefined),
    };
  }

  /**
   * The root pipeline's head decision: the sampling percentage and the outcome-sampling policy in force at its first
   * pickup, kept in the store for the pipeline's life (issue 35: a rate change in the middle of a pipeline must not
   * trace job 1 and leave out job 2, or park the root span of a pipeline whose first job was forwarded). Kept here
   * too, so a pipeline's later jobs on this replica cost no store call. `gitlab` ids follow Rails, which decides at
   * each job with the rate then in force. Bounded by STORE_TIMEOUT_MS: a slow store only means the decision is taken
   * here, as before.
   */
  private async headDecisionFor(rootPipelineId: number, flagContext: FlagContext): Promise<HeadDecision> {
    const proposed: HeadDecision = { samplingPercent: this.flags.samplingPercent(), ...this.provisionalPolicy(flagContext) };
    if (this.config.traceIdScheme !== 'keyed') return proposed;
    try {
      return await withTimeout(() => this.headDecisions.pin(rootPipelineId, proposed), this.config.storeTimeoutMs);
    } catch (error) {
      this.logger.warn(`pipeline ${rootPipelineId}: head decision not kept in the store, taken here: ${(error as Error).message}`);
      return proposed;
    }
  }

  /**
   * The outcome-sampling policy a pipeline the head decision leaves out is traced under, or none: the toggle off for
   * it, no webhooks to tell its outcome, or GitLab's ids (Rails emits and samples its own spans).
   */
  private provisionalPolicy(flagContext: FlagContext): { outcomePolicy?: OutcomePolicy } {
    if (this.config.traceIdScheme !== 'keyed' || !this.pipelineSpans.webhooksConfigured) return {};
    const payload = this.flags.outcomeSamplingPayload(flagContext);
    return payload === undefined ? {} : { outcomePolicy: this.outcomeSampling.policyOf(payload) };
  }

  private traceContextFor(rootPipelineId: number, jobId: number, samplingPercent: number): TraceContext {
    if (this.config.traceIdScheme === 'gitlab') return gitlabTraceContextOf(rootPipelineId, jobId, samplingPercent);
    return traceContextOf(this.traceIdFor(rootPipelineId), spanIdFor(this.secrets.traceKey, jobId), samplingPercent);
  }

  private traceIdFor(rootPipelineId: number): string {
    let traceId = this.traceIds.get(rootPipelineId);
    if (traceId === undefined) {
      traceId = traceIdFor(this.secrets.traceKey, rootPipelineId);
      this.traceIds.set(rootPipelineId, traceId);
    }
    return traceId;
  }

  private runnerSupportsTracing(features: Record<string, unknown> | undefined): boolean {
    const advertised = features?.tracing ?? features?.job_telemetry;
    if (advertised === undefined) return this.config.unadvertisedRunnersEligible;
    return advertised !== false;
  }

  /** Never throws: a grant that cannot be taken back is the store's to expire. */
  private async takeBack(grant: Grant, tracedJob: TracedJob): Promise<void> {
    try {
      if (await this.store.withdrawGrant(grant, tracedJob)) this.logger.log(`grant for job ${grant.jobId}: stored after all, and taken back`);
    } catch (error) {
      this.logger.debug(`grant for job ${grant.jobId}: not taken back: ${(error as Error).message}`);
    }
  }

  /** Bounded by STORE_TIMEOUT_MS whatever the store does, so a hung Redis cannot delay job pickup. */
  private async saveGrant(grant: Grant, tracedJob: TracedJob, options: SaveGrantOptions): Promise<Grant | undefined> {
    try {
      return await withTimeout(() => this.store.saveGrant(grant, tracedJob, options), this.config.storeTimeoutMs);
    } catch (error) {
      this.metrics.grantNotSaved();
      this.logger.warn(`grant for job ${grant.jobId} not stored: ${(error as Error).message}`);
      // The write may still land when the store answers again; the job is answered as not traced, so it is taken
      // back behind it (not awaited: the pickup's answer never waits for it).
      void this.takeBack(grant, tracedJob);
      return undefined;
    }
  }
}
