import type { OtlpEncoding, OtlpSignal } from '../../otlp/otlp-encoding';
import { EnforcedExport, GatewayGrant, NO_SPAN_LIMITS, SpanBudget, SpanLimits } from './otlp-types';
import { enforceJsonExport } from './json-walker';
import { enforceProtobufExport } from './protobuf-walker';

/**
 * Applies SPEC §6 to one OTLP/HTTP export body: drops spans outside the grant's trace, the control plane's (one of
 * its span ids for the job, or a key only it writes: SPEC §12 "Trust"), over the per-span limits or beyond the job's
 * remaining budget; overwrites the CI identity attributes and `ci.sampling.reason` on every
 * resource, and the identity wherever a span, data point or log record carries it. For a provisional grant (SPEC
 * §11) the reason is a slot, and every admitted span says trace_state `ot=th:0` once settleProvisionalTraces
 * (sampling-reason.ts) settles the export for the collector: in JSON already here, in protobuf only then; otherwise
 * the reason is `head`. Enforcement is an allow-list: every member that can hold spans,
 * metrics or logs is enforced (deprecated containers the Collector still reads are migrated into the current
 * ones) or dropped, never forwarded unchecked. Inside items, nothing else changes. Notes how the runner's
 * `job_execution` spans forwarded ended (SPEC §10). One policy (export-policy.ts) decides for both encodings.
 *
 * @param spanBudget spans this job may still send; kept spans are counted in body order. A number is a quota
 *   with no rate. Ignored for metrics and logs.
 * @throws OtlpPayloadError when the body is not a well-formed export request of that signal and encoding.
 */
export function enforceExport(
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  grant: GatewayGrant,
  spanBudget: number | SpanBudget,
  spanLimits: SpanLimits = NO_SPAN_LIMITS,
): EnforcedExport {
  switch (encoding) {
    case 'protobuf':
      return enforceProtobufExport(signal, body, grant, spanBudget, spanLimits);
    case 'json':
      return enforceJsonExport(signal, body, grant, spanBudget, spanLimits);
    default: {
      const unknownEncoding: never = encoding;
      throw new TypeError(`unknown OTLP encoding ${String(unknownEncoding)}`);
    }
  }
}
