/** The export policy's shared types, in one place so the enforcement files and the dispatcher import no one another. */
import type { OtlpSignal } from '../../otlp/otlp-encoding';
import type { WireBody } from '../../otlp/otlp-wire';

/** What the auth decision says the exporting job may write (SPEC §5, §6). */
export interface GatewayGrant {
  jobId: number;
  projectId: number;
  pipelineId: number;
  runnerId: number;
  /** 32 lowercase or uppercase hex digits. */
  traceId: string;
  /**
   * The pipeline is traced provisionally (SPEC §11): the head decision left it out, its outcome decides. Its
   * resources carry a `ci.sampling.reason` slot, and once settleProvisionalTraces settles it its admitted spans say
   * `ot=th:0`.
   */
  provisional?: boolean;
  /**
   * The span ids the control plane writes GitLab's account of this job on (SPEC §10, §12 "Trust"): its job span (the
   * `span_parent_id` it was handed, public in TRACEPARENT), its queue wait, its pipeline's span and its root
   * pipeline's; 16 hex digits each. A span of the job's export with one of these ids is refused. Absent: none known.
   */
  controlPlaneSpanIds?: readonly string[];
}

/**
 * Bounds on one span (SPEC §6, GitLab's design: 4 KB a span). Sizes are measured in the encoding the export
 * came in: the span's protobuf bytes, or its JSON text; an attribute value's size is its UTF-8 (or raw bytes)
 * length for a string or bytes value, its encoded size otherwise.
 */
export interface SpanLimits {
  maxBytes: number;
  maxAttributes: number;
  maxAttributeValueBytes: number;
}

/** Spans the job may still send in this export under each shared limit (store: quota per job, rate per second). */
export interface SpanBudget {
  quota: number;
  rate: number;
}

/** Why spans were dropped, one count per reason (traces only). */
export interface SpanRejections {
  foreignTrace: number;
  /** Spans the collector could not decode (ids of the wrong length, wrong wire types, invalid UTF-8...). */
  undecodable: number;
  overLimits: number;
  overQuota: number;
  overRate: number;
  /** Spans whose span_id is one of the control plane's for the job (GatewayGrant.controlPlaneSpanIds). */
  controlPlaneSpanId: number;
  /** Spans carrying, or under a resource carrying, an attribute only the control plane writes (control-plane-mark.ts). */
  reservedAttribute: number;
}

export interface EnforcedExport {
  /** The request to forward, in the encoding it arrived in, as the pieces the walker wrote it in (forwarded without a copy of its own). */
  readonly wire: WireBody;
  /** The same request as one Buffer, joined on first use. */
  readonly body: Buffer;
  /** Spans, metric data points or log records left in `body`. */
  forwardedItems: number;
  /**
   * Spans the gateway dropped (foreign trace, undecodable, the control plane's, over the per-span limits, quota or
   * rate); always 0 for metrics and logs.
   */
  rejectedItems: number;
  rejections?: SpanRejections;
  /** Why items were rejected, for the OTLP partial success `error_message`. */
  errorMessage?: string;
  /**
   * No item is left: the HTTP layer answers (with partial success when `rejectedItems > 0`) without calling
   * the collector. Also true for an export that carried no items at all.
   */
  nothingToForward: boolean;
  /** How the `job_execution` spans forwarded ended; absent when there were none (almost every export). */
  jobExecutionEnds?: readonly RunnerJobEnd[];
}

/**
 * How a job ended, as its runner's `job_execution` span says: the span's end and its `ci.job.status` attribute
 * (GitLab Runner writes it there), else failed for an Error status. SPEC §10 closes the job span whose id is
 * `parentSpanId` from this when no GitLab webhook will.
 */
export interface RunnerJobEnd {
  /** Lowercase hex. */
  readonly parentSpanId: string;
  readonly endMs: number;
  readonly status?: string;
}

/** What each walker does to a body of its encoding; enforceExport (enforce-export.ts) documents it. */
export type EncodingEnforcement = (
  signal: OtlpSignal,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number | SpanBudget,
  spanLimits: SpanLimits,
) => EnforcedExport;

export const NO_SPAN_LIMITS: SpanLimits = { maxBytes: Infinity, maxAttributes: Infinity, maxAttributeValueBytes: Infinity };
