/**
 * The gateway's failures as OTLP/HTTP answers (SPEC §6): one function maps each to its HTTP status,
 * google.rpc.Code and Retry-After. OTLP clients retry 429, 502, 503 and 504 only, so every transient
 * fault must land on one of those, and nothing permanent may.
 */
export type GatewayFailure =
  | { readonly kind: 'unsupported_media_type'; readonly message: string }
  | { readonly kind: 'bad_request'; readonly message: string }
  | { readonly kind: 'too_large'; readonly message: string }
  | { readonly kind: 'unauthenticated'; readonly message: string }
  | { readonly kind: 'forbidden'; readonly message: string }
  | { readonly kind: 'rate_limited'; readonly retryAfterSeconds: number }
  | { readonly kind: 'store_unavailable'; readonly retryAfterSeconds: number }
  | { readonly kind: 'upstream_unreachable' }
  | { readonly kind: 'upstream_timeout' }
  | { readonly kind: 'upstream_error'; readonly status: number }
  | { readonly kind: 'not_found'; readonly message: string };

export interface OtlpErrorAnswer {
  readonly httpStatus: number;
  /** google.rpc.Code */
  readonly rpcCode: number;
  readonly message: string;
  readonly retryAfterSeconds?: number;
}

/** Seconds a client should wait after a collector fault. */
export const UPSTREAM_RETRY_AFTER_SECONDS = 5;

const RPC = { INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8, UNAVAILABLE: 14, UNAUTHENTICATED: 16 } as const;

export function otlpErrorAnswer(failure: GatewayFailure): OtlpErrorAnswer {
  switch (failure.kind) {
    case 'unsupported_media_type':
      return { httpStatus: 415, rpcCode: RPC.INVALID_ARGUMENT, message: failure.message };
    case 'bad_request':
      return { httpStatus: 400, rpcCode: RPC.INVALID_ARGUMENT, message: failure.message };
    case 'too_large':
      return { httpStatus: 413, rpcCode: RPC.RESOURCE_EXHAUSTED, message: failure.message };
    case 'unauthenticated':
      return { httpStatus: 401, rpcCode: RPC.UNAUTHENTICATED, message: failure.message };
    case 'forbidden':
      return { httpStatus: 403, rpcCode: RPC.PERMISSION_DENIED, message: failure.message };
    case 'not_found':
      return { httpStatus: 404, rpcCode: RPC.NOT_FOUND, message: failure.message };
    case 'rate_limited':
      return { httpStatus: 429, rpcCode: RPC.RESOURCE_EXHAUSTED, message: 'runner rate limit exceeded', retryAfterSeconds: failure.retryAfterSeconds };
    case 'store_unavailable':
      return { httpStatus: 503, rpcCode: RPC.UNAVAILABLE, message: 'grant store unavailable', retryAfterSeconds: failure.retryAfterSeconds };
    case 'upstream_unreachable':
      return { httpStatus: 502, rpcCode: RPC.UNAVAILABLE, message: 'collector unreachable', retryAfterSeconds: UPSTREAM_RETRY_AFTER_SECONDS };
    case 'upstream_timeout':
      return { httpStatus: 504, rpcCode: RPC.DEADLINE_EXCEEDED, message: 'collector did not answer in time', retryAfterSeconds: UPSTREAM_RETRY_AFTER_SECONDS };
    case 'upstream_error':
      // 503 and 504 keep their meaning; any other 5xx is the collector failing: bad gateway.
      return {
        httpStatus: failure.status === 503 || failure.status === 504 ? failure.status : 502,
        rpcCode: RPC.UNAVAILABLE,
        message: `collector answered ${failure.status}`,
        retryAfterSeconds: UPSTREAM_RETRY_AFTER_SECONDS,
      };
    default: {
      const unreachable: never = failure;
      throw new Error(`unhandled gateway failure ${JSON.stringify(unreachable)}`);
    }
  }
}
