/**
 * How a stock GitLab Runner reads `features.tracing` of its job payload, written from gitlab-runner's
 * `common/spec/spec.go` (the JSON field names) and `commands/tracing.go` (the rules). Nothing here
 * comes from this project's code: a test that exports through this plan exports as the runner would.
 *
 * - `trace_id` (32 hex) and `span_parent_id` (16 hex) become the remote parent, always sampled;
 * - each `otel_endpoints[]` entry: the URL scheme picks the transport (`http`/`https`: OTLP/HTTP
 *   protobuf POSTed to the URL's path verbatim; `grpc`/`grpcs`: OTLP/gRPC; anything else: skipped);
 * - `auth` absent: no credentials at all; `auth.type` `http_bearer_gcp_oidc` needs the nested
 *   `http_bearer_gcp_oidc: { audience }` (absent: skipped) and sends a Google ID token as Bearer;
 *   any other `auth.type`: skipped with a warning.
 */
export interface RunnerExportPlan {
  readonly transport: 'otlp-http-protobuf' | 'otlp-grpc';
  /** For OTLP/HTTP: the full URL the runner POSTs to. For gRPC: host:port. */
  readonly target: string;
  /** `none`: the runner adds no header of its own. */
  readonly credentials: { readonly kind: 'none' } | { readonly kind: 'gcp_oidc'; readonly audience: string };
}

export interface RunnerTracingView {
  /** Undefined when either id does not parse: the runner then traces without a remote parent. */
  readonly parent?: { readonly traceId: string; readonly spanId: string };
  readonly plans: RunnerExportPlan[];
  readonly warnings: string[];
}

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;

function asObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** otel-go's otlptracehttp default path, used when the URL's path is empty. */
const DEFAULT_TRACES_PATH = '/v1/traces';

export function readTracingAsRunner(features: unknown): RunnerTracingView {
  const tracing = asObject(asObject(features)?.tracing);
  const warnings: string[] = [];
  if (tracing === undefined) return { plans: [], warnings };

  // oteltrace.TraceIDFromHex / SpanIDFromHex: exact length, lowercase hex, not all zero.
  const traceId = typeof tracing.trace_id === 'string' ? tracing.trace_id : '';
  const spanId = typeof tracing.span_parent_id === 'string' ? tracing.span_parent_id : '';
  const parent = HEX32.test(traceId) && !/^0+$/.test(traceId) && HEX16.test(spanId) && !/^0+$/.test(spanId) ? { traceId, spanId } : undefined;
  if (parent === undefined) warnings.push('Failed to parse trace ID or span ID');

  const endpoints = Array.isArray(tracing.otel_endpoints) ? tracing.otel_endpoints : [];
  const plans: RunnerExportPlan[] = [];
  for (const entry of endpoints) {
    const endpoint = asObject(entry) ?? {};
    let url: URL;
    try {
      url = new URL(String(endpoint.url ?? ''));
    } catch {
      warnings.push('Error parsing OTEL URL');
      continue;
    }
    const scheme = url.protocol.replace(/:$/, '');
    let transport: RunnerExportPlan['transport'];
    let target: string;
    if (scheme === 'http' || scheme === 'https') {
      transport = 'otlp-http-protobuf';
      // Go's url.Parse leaves Path empty for "http://host:4318" where WHATWG URL says "/".
      const rawPath = String(endpoint.url)
        .replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '')
        .replace(/[?#].*$/, '');
      target = `${scheme}://${url.host}${rawPath === '' ? DEFAULT_TRACES_PATH : url.pathname}`;
    } else if (scheme === 'grpc' || scheme === 'grpcs') {
      transport = 'otlp-grpc';
      target = url.host;
    } else {
      warnings.push(`Unsupported scheme in URL: ${scheme}`);
      continue;
    }

    const auth = asObject(endpoint.auth);
    let credentials: RunnerExportPlan['credentials'] = { kind: 'none' };
    if (endpoint.auth !== undefined && endpoint.auth !== null) {
      if (auth?.type === 'http_bearer_gcp_oidc') {
        const oidc = asObject(auth.http_bearer_gcp_oidc);
        if (oidc === undefined) {
          warnings.push(`Missing http_bearer_gcp_oidc field for tracing URL: ${String(endpoint.url)}`);
          continue;
        }
        credentials = { kind: 'gcp_oidc', audience: typeof oidc.audience === 'string' ? oidc.audience : '' };
      } else {
        warnings.push(`Unsupported authentication type ${JSON.stringify(auth?.type ?? '')} for OTLP endpoint`);
        continue;
      }
    }
    plans.push({ transport, target, credentials });
  }
  return { ...(parent === undefined ? {} : { parent }), plans, warnings };
}
