import type { FlagContext } from '../flags/flags.service';
import type { OutcomePolicy } from '../outcome-sampling/outcome-policy';
import { Grant, SaveGrantOptions } from '../grants/grant';
import { TracedJob } from '../traced-work/traced-work';
import { tokenDigest } from '../grants/token-digest';
import { isJwtJobToken } from '../runner-auth/job-token-verifier';
import { TraceContext } from '../trace-context/trace-context';
import { Job, JobPayload, Runner } from './job-payload-request';

/*
 * The decorator's steps that need no store, flag client or clock of their own (SPEC §4): JobPayloadService
 * calls them in order, and bench/job-payload.server.ts's floor calls the same ones, so the floor cannot
 * drift from what it bounds.
 */

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
      /** Traced provisionally (SPEC §11): kept or dropped on the pipeline's outcome. */
      readonly provisional?: true;
      readonly otel_endpoints: OtelEndpoint[];
      readonly expires_at: string;
    };

/** What the decorator decided for a pickup: its telemetry, and when enabled what it does to the payload. */
export interface Decoration {
  readonly telemetry: Telemetry;
  /** Absent when telemetry is not enabled: the payload stays as it came. */
  readonly changes?: PayloadChanges;
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
export function enabledTelemetry(context: TraceContext, endpoint: OtelEndpoint, endsAt: number, provisional = false): Telemetry {
  return {
    enabled: true,
    reason: 'enabled',
    trace_id: context.traceId,
    span_parent_id: context.spanParentId,
    traceparent: context.traceparent,
    ...(context.tracestate === undefined ? {} : { tracestate: context.tracestate }),
    ...(provisional ? { provisional: true as const } : {}),
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
  outcomePolicy?: OutcomePolicy,
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
    ...(outcomePolicy === undefined ? {} : { provisional: true as const }),
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
    ...(outcomePolicy === undefined ? {} : { outcomePolicy }),
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

/** A CI variable as GitLab's job payload carries it. */
export interface JobVariable {
  readonly key: string;
  readonly value: string;
  readonly public: boolean;
  readonly masked: boolean;
}

export interface TracingFeature {
  readonly trace_id: string;
  readonly span_parent_id: string;
  readonly traceparent: string;
  readonly tracestate?: string;
  readonly otel_endpoints: OtelEndpoint[];
}

/**
 * What decorating does to a job payload (SPEC §4), whatever the payload holds: every variable keyed in
 * `variables.remove` goes, `variables.append` is added at the end, and `features.tracing` is set. The service
 * applies it for a caller that sent the payload (applyPayloadChanges); a caller that asked for the changes
 * (`Prefer: return=minimal`) applies it to the payload it holds, which then never crosses the network twice.
 */
export interface PayloadChanges {
  readonly variables: { readonly remove: readonly string[]; readonly append: readonly JobVariable[] };
  readonly features: { readonly tracing: TracingFeature };
}

/**
 * The variables the decorator owns: any entry of these keys is replaced, never duplicated. A TRACESTATE left from
 * elsewhere describes another trace; it goes with the TRACEPARENT it belonged to, even when no new one is set.
 */
export const DECORATOR_VARIABLES: readonly string[] = ['TRACEPARENT', 'TRACESTATE', OTLP_ENDPOINT_VARIABLE];
const DECORATOR_VARIABLE_SET: ReadonlySet<string> = new Set(DECORATOR_VARIABLES);

/** The changes that give a job its trace context and its endpoint (`capabilityBase` when the gateway can honour it). */
export function payloadChanges(context: TraceContext, endpoint: OtelEndpoint, capabilityBase: string | undefined): PayloadChanges {
  const append: JobVariable[] = [{ key: 'TRACEPARENT', value: context.traceparent, public: true, masked: false }];
  if (context.tracestate !== undefined) append.push({ key: 'TRACESTATE', value: context.tracestate, public: true, masked: false });
  // A credential: masked in job logs, and not public (not shown in the UI, not passed to services).
  // No OTEL_EXPORTER_* variable is set: that would make instrumented programs export unasked.
  if (capabilityBase !== undefined) append.push({ key: OTLP_ENDPOINT_VARIABLE, value: capabilityBase, public: false, masked: true });
  return {
    variables: { remove: DECORATOR_VARIABLES, append },
    features: {
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

/**
 * The payload with `changes` applied. Copies only what it changes, so the caller's object (and its megabytes of
 * scripts) is never touched.
 */
export function applyPayloadChanges(payload: JobPayload, changes: PayloadChanges): JobPayload {
  const remove = changes.variables.remove === DECORATOR_VARIABLES ? DECORATOR_VARIABLE_SET : new Set(changes.variables.remove);
  const variables = (payload.variables ?? []).filter((variable) => !remove.has((variable as { key?: unknown } | null)?.key as string));
  return {
    ...payload,
    variables: [...variables, ...changes.variables.append],
    features: { ...payload.features, ...changes.features },
  };
}
