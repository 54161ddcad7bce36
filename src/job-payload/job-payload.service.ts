import { Inject, Injectable, Logger } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { FlagContext, FlagsService } from '../flags/flags.service';
import { Grant, grantEndsAt, GrantStore, SaveGrantOptions } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { TracedJob } from '../traced-work/traced-work';
import { tokenDigest } from '../grants/token-digest';
import { MetricsService } from '../observability/metrics.service';
import { withTimeout } from '../observability/with-timeout';
import { startDecisionSpan } from '../observability/tracing';
import { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';
import { capabilityPath, mintCapability } from '../runner-auth/job-capability';
import { isJwtJobToken } from '../runner-auth/job-token-verifier';
import { gitlabTraceContextOf, spanIdFor, TraceContext, traceContextOf, traceIdFor } from '../trace-context/trace-context';
import { Job, JobPayload, JobPayloadRequest, Runner } from './job-payload-request';

export type TelemetryReason = 'enabled' | 'flag_disabled' | 'not_sampled' | 'runner_unsupported' | 'degraded';

/**
 * Header credentials (`Authorization: Bearer <job token>` plus `Runner-Token`), handed out only when
 * RUNNER_ENDPOINT_FORM=headers: a stock GitLab Runner skips an endpoint whose auth type it does not know.
 */
export const GATEWAY_AUTH_TYPE = 'ci_job_telemetry_tokens';
/** Hosted runners export straight to the collector with a Google-signed OIDC token. */
export const HOSTED_AUTH_TYPE = 'http_bearer_gcp_oidc';
/** The masked variable with the job's capability base URL, for programs inside the job (SPEC §4). */
export const OTLP_ENDPOINT_VARIABLE = 'CI_JOB_TELEMETRY_OTLP_ENDPOINT';

/**
 * One entry of `features.tracing.otel_endpoints`, in the shape GitLab Runner reads (`common/spec/spec.go`):
 * no `auth` means no credentials at all; `http_bearer_gcp_oidc` needs its nested object.
 */
export interface OtelEndpoint {
  readonly url: string;
  readonly auth?:
    { readonly type: typeof HOSTED_AUTH_TYPE; readonly http_bearer_gcp_oidc: { readonly audience: string } } | { readonly type: typeof GATEWAY_AUTH_TYPE };
}

export type Telemetry =
  | { readonly enabled: false; readonly reason: Exclude<TelemetryReason, 'enabled'> }
  | {
      readonly enabled: true;
      readonly reason: 'enabled';
      readonly trace_id: string;
      readonly span_parent_id: string;
      readonly traceparent: string;
      readonly tracestate?: string;
      readonly otel_endpoints: OtelEndpoint[];
      readonly expires_at: string;
    };

export interface DecoratedJobPayload {
  readonly payload: JobPayload;
  readonly telemetry: Telemetry;
}

/** Variables the decorator owns: an existing entry of the same key is replaced, never duplicated. */
const DECORATOR_VARIABLES = new Set(['TRACEPARENT', 'TRACESTATE', OTLP_ENDPOINT_VARIABLE]);
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

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    private readonly flags: FlagsService,
    private readonly metrics: MetricsService,
    private readonly pipelineSpans: PipelineSpansService,
  ) {
    this.hostedRunnerTypes = new Set(config.HOSTED_RUNNER_TYPES);
    this.hostedRunnerIds = new Set(config.HOSTED_RUNNER_IDS);
    this.gatewayBase = withoutTrailingSlash(config.GATEWAY_PUBLIC_URL);
    this.headerEndpoint = { url: tracesUrl(this.gatewayBase), auth: { type: GATEWAY_AUTH_TYPE } };
    this.hostedEndpoint = {
      url: tracesUrl(withoutTrailingSlash(config.COLLECTOR_PUBLIC_URL)),
      auth: { type: HOSTED_AUTH_TYPE, http_bearer_gcp_oidc: { audience: config.HOSTED_OIDC_AUDIENCE } },
    };
  }

  /** Never throws for the store or Unleash: job pickup must not fail because of telemetry (SPEC §4). */
  async decorate(request: JobPayloadRequest): Promise<DecoratedJobPayload> {
    const started = process.hrtime.bigint();
    const span = startDecisionSpan('ci_job_telemetry.job_payload');
    const result = await this.decide(request);
    span.end(
      result.telemetry.reason,
      () => ({ 'ci.job.id': request.job.id, 'ci.project.id': request.job.project_id, 'ci.runner.id': request.runner.id }),
      result.telemetry.reason === 'degraded',
    );
    this.metrics.decisions.inc({ reason: result.telemetry.reason });
    this.metrics.decisionSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    return result;
  }

  private async decide({ runner, job, payload }: JobPayloadRequest): Promise<DecoratedJobPayload> {
    const off = (reason: Exclude<TelemetryReason, 'enabled'>): DecoratedJobPayload => ({
      payload,
      telemetry: { enabled: false, reason },
    });

    if (!this.runnerSupportsTracing(runner.features)) return off('runner_unsupported');

    if (!this.flags.isTelemetryEnabled(flagContextOf(runner, job))) return off('flag_disabled');

    const context = this.traceContextFor(job.root_pipeline_id, job.id);
    if (!context.sampled) return off('not_sampled');

    const hosted = this.hostedRunnerTypes.has(runner.runner_type) || this.hostedRunnerIds.has(runner.id);
    // Never enable a job with an endpoint it cannot use: header credentials need the runner token's
    // digest in the grant (SPEC §4).
    if (!hosted && this.config.RUNNER_ENDPOINT_FORM === 'headers' && runner.token === undefined) return off('runner_unsupported');
    const { grant, tracedJob, saveOptions } = pickupRecords(runner, job, context, this.secrets.tokenDigestKey, this.config.GRANT_GRACE_SECONDS);
    // Hosted runners authenticate to the collector with OIDC and never need the grant; a job bound
    // for the gateway without a stored grant would only collect 403s, so it is not enabled at all.
    const stored = await this.saveGrant(grant, tracedJob, saveOptions);
    if (stored === undefined && !hosted) return off('degraded');
    // Its pipelines and queue wait are written with other pickups', after the answer: they never delay a pickup.
    this.pipelineSpans.recordPickup(tracedJob, (stored ?? grant).expiresAt, context.spanParentId);

    // The capability base URL goes to programs inside the job whenever the gateway can honour it.
    const capabilityBase =
      stored !== undefined ? `${this.gatewayBase}${capabilityPath(job.id, mintCapability(this.secrets.capabilityKeys[0], job.id))}` : undefined;
    const endpoint = hosted ? this.hostedEndpoint : this.config.RUNNER_ENDPOINT_FORM === 'headers' ? this.headerEndpoint : { url: tracesUrl(capabilityBase!) };
    return {
      payload: decoratePayload(payload, context, endpoint, capabilityBase),
      // A job decorated again keeps its first expiry and any revocation: the store says which.
      telemetry: enabledTelemetry(context, endpoint, grantEndsAt(stored ?? grant)),
    };
  }

  private traceContextFor(rootPipelineId: number, jobId: number): TraceContext {
    if (this.config.TRACE_ID_SCHEME === 'gitlab') return gitlabTraceContextOf(rootPipelineId, jobId, this.flags.samplingPercent());
    return traceContextOf(this.traceIdFor(rootPipelineId), spanIdFor(this.secrets.traceKey, jobId), this.flags.samplingPercent());
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
    if (advertised === undefined) return this.config.UNADVERTISED_RUNNERS_ELIGIBLE;
    return advertised !== false;
  }

  /** Bounded by STORE_TIMEOUT_MS whatever the store does, so a hung Redis cannot delay job pickup. */
  private async saveGrant(grant: Grant, tracedJob: TracedJob, options: SaveGrantOptions): Promise<Grant | undefined> {
    try {
      return await withTimeout(() => this.store.saveGrant(grant, tracedJob, options), this.config.STORE_TIMEOUT_MS);
    } catch (error) {
      this.metrics.storeErrors.inc({ operation: 'save_grant' });
      this.logger.warn(`grant for job ${grant.jobId} not stored: ${(error as Error).message}`);
      return undefined;
    }
  }
}

/** Who the `ci_job_telemetry` flag is asked about (SPEC §4 "Flags"). */
export function flagContextOf(runner: Runner, job: Job): FlagContext {
  return {
    projectId: job.project_id,
    namespaceId: job.namespace_id,
    rootNamespaceId: job.root_namespace_id,
    runnerId: runner.id,
    runnerType: runner.runner_type,
  };
}

/** The answer's `telemetry` for an enabled job, whose grant ends at `endsAt` (epoch ms). */
export function enabledTelemetry(context: TraceContext, endpoint: OtelEndpoint, endsAt: number): Telemetry {
  return {
    enabled: true,
    reason: 'enabled',
    trace_id: context.traceId,
    span_parent_id: context.spanParentId,
    traceparent: context.traceparent,
    ...(context.tracestate === undefined ? {} : { tracestate: context.tracestate }),
    otel_endpoints: [endpoint],
    expires_at: new Date(endsAt).toISOString(),
  };
}

/**
 * What a pickup stores, in one step: the grant the gateway and the auth endpoint check (SPEC §4), and the traced
 * job, whose spans are then the control plane's to emit (SPEC §10). The grant is found by its job token's digest
 * only when that token is opaque: a JWT job token names its job (SPEC §5), so its index entry would never be read.
 */
export function pickupRecords(
  runner: Runner,
  job: Job,
  context: TraceContext,
  tokenDigestKey: Buffer,
  graceSeconds: number,
  now = Date.now(),
): { readonly grant: Grant; readonly tracedJob: TracedJob; readonly saveOptions: SaveGrantOptions } {
  const grant: Grant = {
    jobId: job.id,
    projectId: job.project_id,
    pipelineId: job.pipeline_id,
    rootPipelineId: job.root_pipeline_id,
    runnerId: runner.id,
    traceId: context.traceId,
    spanParentId: context.spanParentId,
    runnerTokenDigest: runner.token === undefined ? undefined : tokenDigest(tokenDigestKey, runner.token),
    jobTokenDigest: job.token === undefined ? undefined : tokenDigest(tokenDigestKey, job.token),
    expiresAt: now + (job.timeout + graceSeconds) * 1000,
  };
  const tracedJob: TracedJob = {
    jobId: job.id,
    pipelineId: job.pipeline_id,
    rootPipelineId: job.root_pipeline_id,
    projectId: job.project_id,
    runnerId: runner.id,
    runnerType: runner.runner_type,
    traceId: context.traceId,
    ...(context.tracestate === undefined ? {} : { tracestate: context.tracestate }),
    ...queuedAtOf(job.queued_at),
    pickedUpAt: now,
  };
  return { grant, tracedJob, saveOptions: { indexJobToken: job.token !== undefined && !isJwtJobToken(job.token) } };
}

/** `queued_at` as epoch milliseconds, when the pickup gave a readable one. */
function queuedAtOf(queuedAt: string | undefined): { queuedAt?: number } {
  const epoch = queuedAt === undefined ? NaN : Date.parse(queuedAt);
  return Number.isNaN(epoch) ? {} : { queuedAt: epoch };
}

export function withoutTrailingSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

/** GitLab Runner POSTs to the URL's path verbatim, so every URL handed out names the traces path. */
export function tracesUrl(base: string): string {
  return `${base}/v1/traces`;
}

/**
 * The payload with `features.tracing` and the decorator's variables set. Copies only what it changes,
 * so the caller's object (and its megabytes of scripts) is never touched.
 */
export function decoratePayload(payload: JobPayload, context: TraceContext, endpoint: OtelEndpoint, capabilityBase: string | undefined): JobPayload {
  const traceVariables = [
    { key: 'TRACEPARENT', value: context.traceparent, public: true, masked: false },
    ...(context.tracestate === undefined ? [] : [{ key: 'TRACESTATE', value: context.tracestate, public: true, masked: false }]),
    // A credential: masked in job logs, and not public (not shown in the UI, not passed to services).
    // No OTEL_EXPORTER_* variable is set: that would make instrumented programs export unasked.
    ...(capabilityBase === undefined ? [] : [{ key: OTLP_ENDPOINT_VARIABLE, value: capabilityBase, public: false, masked: true }]),
  ];
  // A TRACESTATE left from elsewhere describes another trace; it goes with the TRACEPARENT it belonged to.
  const variables = (payload.variables ?? []).filter((variable) => !DECORATOR_VARIABLES.has((variable as { key?: unknown } | null)?.key as string));
  return {
    ...payload,
    variables: [...variables, ...traceVariables],
    features: {
      ...payload.features,
      tracing: {
        trace_id: context.traceId,
        span_parent_id: context.spanParentId,
        traceparent: context.traceparent,
        ...(context.tracestate === undefined ? {} : { tracestate: context.tracestate }),
        otel_endpoints: [endpoint],
      },
    },
  };
}
