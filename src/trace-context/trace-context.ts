import { createHash, createHmac } from 'node:crypto';
import { OUTCOME_TRACE_STATE } from '../otlp/sampling-reason';

/**
 * W3C trace context of a CI job (SPEC §4 "Trace context"). Pure functions: ids are HMACs of the
 * pipeline and job ids under the trace key, so any holder of the key derives the same context
 * without coordination and nobody else can guess it.
 */
export interface TraceContext {
  readonly traceId: string;
  readonly spanParentId: string;
  readonly traceparent: string;
  /** Absent when the pipeline sampling percentage is 100 %. */
  readonly tracestate?: string;
  /** Whether the trace id falls inside the sampling threshold (consistent probability sampling). */
  readonly sampled: boolean;
}

/** Rightmost 56 bits of the trace id are the randomness value R of OpenTelemetry's consistent sampling. */
const RANDOMNESS_BITS = 56n;
const MAX_THRESHOLD = 1n << RANDOMNESS_BITS;
/** Percentages are honoured to 1/10,000 of a percent; Unleash itself only stores whole percentages. */
const PERCENT_SCALE = 1_000_000n;

const ALL_ZERO_HEX = /^0+$/;

function nonZeroDigest(key: Buffer, message: string, bytes: number): string {
  // An all-zero id is invalid in W3C Trace Context. A 2^-64 event, but deterministic all the same:
  // rehash with a counter so every holder of the key picks the same replacement. The digest is taken as hex
  // and cut, rather than as a Buffer cut and then written as hex: a Buffer fewer per id, about 1 µs of a 2.5 µs
  // HMAC (measured). Caching the key's HMAC state and copying it per id measured slower than createHmac.
  for (let attempt = 0; ; attempt++) {
    const input = attempt === 0 ? message : `${message}#${attempt}`;
    const id = createHmac('sha256', key)
      .update(input)
      .digest('hex')
      .slice(0, bytes * 2);
    if (!ALL_ZERO_HEX.test(id)) return id;
  }
}

/** One trace per root pipeline: every job of a pipeline, child pipelines included, shares it. */
export function traceIdFor(traceKey: Buffer, rootPipelineId: number): string {
  return nonZeroDigest(traceKey, `pipeline:${rootPipelineId}`, 16);
}

/** The job's own span id, so another holder of the key can emit the job span later with this id. */
export function spanIdFor(traceKey: Buffer, jobId: number): string {
  return nonZeroDigest(traceKey, `job:${jobId}`, 8);
}

/**
 * Flags 03 = sampled | random (W3C Trace Context Level 2) for keyed ids, which are uniformly random;
 * 01 = sampled only for GitLab's ids, which are not.
 */
export function traceparentFor(traceId: string, spanId: string, flags: '01' | '03' = '03'): string {
  return `00-${traceId}-${spanId}-${flags}`;
}

/**
 * Rejection threshold T for a sampling percentage: a trace is kept iff R ≥ T.
 * Returns `null` for 0 %, which no threshold below 2^56 expresses: nothing is sampled.
 */
export function samplingThreshold(percent: number): bigint | null {
  if (!Number.isFinite(percent) || percent <= 0) return null;
  if (percent >= 100) return 0n;
  const kept = BigInt(Math.round((percent / 100) * Number(PERCENT_SCALE)));
  const rejected = PERCENT_SCALE - kept;
  // round(2^56 * rejected / scale) in integer arithmetic
  return (MAX_THRESHOLD * rejected * 2n + PERCENT_SCALE) / (PERCENT_SCALE * 2n);
}

/** `th` value: 14 hex digits with trailing zeros removed, "0" for the zero threshold. */
export function encodeThreshold(threshold: bigint): string {
  const digits = threshold.toString(16).padStart(14, '0').replace(/0+$/, '');
  return digits === '' ? '0' : digits;
}

export function randomnessOf(traceId: string): bigint {
  return BigInt(`0x${traceId.slice(-14)}`);
}

/** `ot=th:…` below 100 %, absent at 100 % (nothing to say) and at 0 % (nothing is sampled). */
export function tracestateFor(percent: number): string | undefined {
  const threshold = samplingThreshold(percent);
  if (threshold === null || threshold === 0n) return undefined;
  return `ot=th:${encodeThreshold(threshold)}`;
}

export function isSampled(traceId: string, percent: number): boolean {
  const threshold = samplingThreshold(percent);
  // At 100 % every trace is in: no BigInt of the trace id to compare with a zero threshold (every pickup asks).
  return threshold === 0n || (threshold !== null && randomnessOf(traceId) >= threshold);
}

/** The context for ids already derived (`traceIdFor`, `spanIdFor`), for callers that keep trace ids per pipeline. */
export function traceContextOf(traceId: string, spanParentId: string, samplingPercent: number): TraceContext {
  const tracestate = tracestateFor(samplingPercent);
  return {
    traceId,
    spanParentId,
    traceparent: traceparentFor(traceId, spanParentId),
    ...(tracestate === undefined ? {} : { tracestate }),
    sampled: isSampled(traceId, samplingPercent),
  };
}

/**
 * A pipeline the head decision left out, traced provisionally (SPEC §11): the same ids, recorded (the traceparent
 * says sampled), and `ot=th:0`, so no consistent sampler downstream drops what its outcome may keep; if it is kept,
 * it is kept with probability 1, which is what th:0 says.
 */
export function provisionalContextOf(context: TraceContext): TraceContext {
  return { ...context, tracestate: PROVISIONAL_TRACESTATE, sampled: true };
}

/** The tracestate of a provisional pipeline, and only of one: head sampling at 100 % writes none (SPEC §4). */
export const PROVISIONAL_TRACESTATE = OUTCOME_TRACE_STATE;

/**
 * The `gitlab` scheme (SPEC §4): the ids GitLab Rails gives its own CI spans (`job_lifecycle`,
 * `job_pending`, `job_running`), so they and the runner's spans land in one trace. The trace id is
 * the root pipeline id as 32 hex digits; the job's parent span is Rails' `job_running` span.
 */
export function gitlabTraceIdFor(rootPipelineId: number): string {
  return rootPipelineId.toString(16).padStart(32, '0');
}

export function gitlabJobRunningSpanIdFor(rootPipelineId: number, jobId: number): string {
  return createHash('sha256').update(`${rootPipelineId}:${jobId}:running`).digest('hex').slice(0, 16);
}

/**
 * Pipeline sampling on GitLab's ids. They are not random, so OpenTelemetry's consistent sampling on
 * the trace id does not apply; the decision is taken from the root pipeline id, in steps of 1/100 of
 * a percent, the same for every job of the pipeline and monotone in the percentage.
 */
export function isGitlabPipelineSampled(rootPipelineId: number, percent: number): boolean {
  if (!Number.isFinite(percent) || percent <= 0) return false;
  if (percent >= 100) return true;
  return rootPipelineId % 10_000 < Math.round(percent * 100);
}

/** Flags 01 and never `ot=th`: no threshold describes a sampling decision that is not on R. */
export function gitlabTraceContextOf(rootPipelineId: number, jobId: number, samplingPercent: number): TraceContext {
  const traceId = gitlabTraceIdFor(rootPipelineId);
  const spanParentId = gitlabJobRunningSpanIdFor(rootPipelineId, jobId);
  return {
    traceId,
    spanParentId,
    traceparent: traceparentFor(traceId, spanParentId, '01'),
    sampled: isGitlabPipelineSampled(rootPipelineId, samplingPercent),
  };
}

/**
 * The span id of a pipeline's own span (SPEC §10): a keyed MAC of the pipeline id under a derivation of
 * its own, so it never equals a trace id or a job's span id and any holder of the key recomputes it.
 */
export function pipelineSpanIdFor(traceKey: Buffer, pipelineId: number): string {
  return nonZeroDigest(traceKey, `pipeline-span:${pipelineId}`, 8);
}

/** The span id of a job's queue wait, a child of the job span. */
export function queueSpanIdFor(traceKey: Buffer, jobId: number): string {
  return nonZeroDigest(traceKey, `queue:${jobId}`, 8);
}

/**
 * The parent GitLab Rails names for its own job spans in the `gitlab` scheme and never emits itself
 * (`Gitlab::Ci::TraceContext`): the first 16 hex digits of SHA-256 of `pipeline:<root pipeline id>`.
 */
export function gitlabPipelineSpanIdFor(rootPipelineId: number): string {
  return createHash('sha256').update(`pipeline:${rootPipelineId}`).digest('hex').slice(0, 16);
}

/** What the control plane knows of a job to name the spans it writes GitLab's account of the job on. */
export interface ControlPlaneJob {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  /** The job span's id, handed to the job in TRACEPARENT. */
  readonly spanParentId: string;
}

/**
 * The span ids of the control plane's spans a job's export must never carry (SPEC §10, §12 "Trust"): in the `keyed`
 * scheme its job span, its queue wait, its pipeline's span and its root pipeline's; in the `gitlab` scheme the
 * `job_running` span its runner's spans hang on (Rails' own) and the root pipeline span the service emits. Lowercase
 * hex, each once.
 */
export function controlPlaneSpanIdsOf(traceKey: Buffer, scheme: 'keyed' | 'gitlab', job: ControlPlaneJob): string[] {
  const ids =
    scheme === 'gitlab'
      ? [job.spanParentId, gitlabPipelineSpanIdFor(job.rootPipelineId)]
      : [job.spanParentId, queueSpanIdFor(traceKey, job.jobId), pipelineSpanIdFor(traceKey, job.pipelineId), pipelineSpanIdFor(traceKey, job.rootPipelineId)];
  return [...new Set(ids.map((id) => id.toLowerCase()))];
}
