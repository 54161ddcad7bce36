import { Inject, Injectable, Logger } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { FlagsService } from '../flags/flags.service';
import { Grant, GrantStore } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { tokenDigest } from '../grants/token-digest';
import { MetricsService } from '../observability/metrics.service';
import { spanIdFor, TraceContext, traceContextOf, traceIdFor } from '../trace-context/trace-context';
import { JobPayload, JobPayloadRequest } from './job-payload-request';

export type TelemetryReason = 'enabled' | 'flag_disabled' | 'not_sampled' | 'runner_unsupported' | 'degraded';

/** Auth type runners present to this gateway: `Authorization: Bearer <job token>` plus `Runner-Token`. */
export const GATEWAY_AUTH_TYPE = 'ci_job_telemetry_tokens';
/** Hosted runners export straight to the collector with a Google-signed OIDC token. */
export const HOSTED_AUTH_TYPE = 'http_bearer_gcp_oidc';

export interface OtelEndpoint {
  readonly url: string;
  readonly auth: { readonly type: string; readonly audience?: string };
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

const TRACE_VARIABLES = new Set(['TRACEPARENT', 'TRACESTATE']);
/** Root pipelines whose trace id is kept: every job of a pipeline asks for the same one (~100 bytes each). */
const TRACE_ID_CACHE_SIZE = 10_000;

@Injectable()
export class JobPayloadService {
  private readonly logger = new Logger(JobPayloadService.name);
  private readonly hostedRunnerTypes: ReadonlySet<string>;
  private readonly hostedRunnerIds: ReadonlySet<number>;
  /** Where runners export to: fixed by configuration, so built once rather than on every pickup. */
  private readonly gatewayEndpoint: OtelEndpoint;
  private readonly hostedEndpoint: OtelEndpoint;
  /** Trace id by root pipeline id: a pure function of the two, so a kept one is always the right one. */
  private readonly traceIds = new LRUCache<number, string>({ max: TRACE_ID_CACHE_SIZE });

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(SECRETS) private readonly secrets: Secrets,
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    private readonly flags: FlagsService,
    private readonly metrics: MetricsService,
  ) {
    this.hostedRunnerTypes = new Set(config.HOSTED_RUNNER_TYPES);
    this.hostedRunnerIds = new Set(config.HOSTED_RUNNER_IDS);
    this.gatewayEndpoint = { url: config.GATEWAY_PUBLIC_URL, auth: { type: GATEWAY_AUTH_TYPE } };
    this.hostedEndpoint = { url: config.COLLECTOR_PUBLIC_URL, auth: { type: HOSTED_AUTH_TYPE, audience: config.HOSTED_OIDC_AUDIENCE } };
  }

  /** Never throws for the store or Unleash: job pickup must not fail because of telemetry (SPEC §4). */
  async decorate(request: JobPayloadRequest): Promise<DecoratedJobPayload> {
    const started = process.hrtime.bigint();
    const result = await this.decide(request);
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

    const flagged = this.flags.isTelemetryEnabled({
      projectId: job.project_id,
      namespaceId: job.namespace_id,
      rootNamespaceId: job.root_namespace_id,
      runnerId: runner.id,
      runnerType: runner.runner_type,
    });
    if (!flagged) return off('flag_disabled');

    const context = traceContextOf(this.traceIdFor(job.root_pipeline_id), spanIdFor(this.secrets.traceKey, job.id), this.flags.samplingPercent());
    if (!context.sampled) return off('not_sampled');

    const hosted = this.hostedRunnerTypes.has(runner.runner_type) || this.hostedRunnerIds.has(runner.id);
    const grant: Grant = {
      jobId: job.id,
      projectId: job.project_id,
      pipelineId: job.pipeline_id,
      rootPipelineId: job.root_pipeline_id,
      runnerId: runner.id,
      traceId: context.traceId,
      spanParentId: context.spanParentId,
      runnerTokenDigest: runner.token === undefined ? undefined : tokenDigest(this.secrets.tokenDigestKey, runner.token),
      jobTokenDigest: job.token === undefined ? undefined : tokenDigest(this.secrets.tokenDigestKey, job.token),
      expiresAt: Date.now() + (job.timeout + this.config.GRANT_GRACE_SECONDS) * 1000,
    };
    // Hosted runners authenticate to the collector with OIDC and never need the grant; a job bound
    // for the gateway without a stored grant would only collect 403s, so it is not enabled at all.
    if (!(await this.saveGrant(grant)) && !hosted) return off('degraded');

    const endpoint = hosted ? this.hostedEndpoint : this.gatewayEndpoint;
    return {
      payload: decoratePayload(payload, context, endpoint),
      telemetry: {
        enabled: true,
        reason: 'enabled',
        trace_id: context.traceId,
        span_parent_id: context.spanParentId,
        traceparent: context.traceparent,
        ...(context.tracestate === undefined ? {} : { tracestate: context.tracestate }),
        otel_endpoints: [endpoint],
        expires_at: new Date(grant.expiresAt).toISOString(),
      },
    };
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
  private async saveGrant(grant: Grant): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${this.config.STORE_TIMEOUT_MS} ms`)), this.config.STORE_TIMEOUT_MS);
    });
    try {
      await Promise.race([this.store.saveGrant(grant), timeout]);
      return true;
    } catch (error) {
      this.metrics.storeErrors.inc({ operation: 'save_grant' });
      this.logger.warn(`grant for job ${grant.jobId} not stored: ${(error as Error).message}`);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * The payload with `features.tracing` and the trace variables set. Copies only what it changes, so
 * the caller's object (and its megabytes of scripts) is never touched.
 */
export function decoratePayload(payload: JobPayload, context: TraceContext, endpoint: OtelEndpoint): JobPayload {
  const traceVariables = [
    { key: 'TRACEPARENT', value: context.traceparent, public: true, masked: false },
    ...(context.tracestate === undefined ? [] : [{ key: 'TRACESTATE', value: context.tracestate, public: true, masked: false }]),
  ];
  // A TRACESTATE left from elsewhere describes another trace; it goes with the TRACEPARENT it belonged to.
  const variables = (payload.variables ?? []).filter(
    (variable) => !TRACE_VARIABLES.has((variable as { key?: unknown } | null)?.key as string),
  );
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
