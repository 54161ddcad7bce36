import { OUTAGE_RETRY_AFTER_SECONDS } from '../otlp/retry-after';
import { AuthRefusal, RefusalAnswer, refusalAnswer } from '../runner-auth/auth-outcome';
import type { RpcStatus } from '../otlp/otlp-response';

/**
 * Every way a gateway request can fail, the framework's own failures included (bad URL, body limit,
 * shutdown): each becomes an OTLP/HTTP answer in one place, `otlpErrorAnswer` (SPEC §6). A refusal of the
 * runner's credential, or of its export rate, is the auth decision's own refusal, answered as the auth endpoint
 * answers it (`refusalAnswer`).
 */
export type GatewayFailure =
  | AuthRefusal
  | { readonly kind: 'unsupported_media_type'; readonly message: string }
  | { readonly kind: 'bad_request'; readonly message: string }
  | { readonly kind: 'not_found'; readonly message: string }
  | { readonly kind: 'too_large'; readonly message: string }
  | { readonly kind: 'store_unavailable'; readonly retryAfterSeconds: number }
  | { readonly kind: 'shutting_down' }
  | { readonly kind: 'upstream_unreachable' }
  | { readonly kind: 'upstream_timeout' }
  /** The collector answered 5xx (or something that is not HTTP success); its Retry-After, when it sent one. */
  | { readonly kind: 'upstream_error'; readonly status: number; readonly retryAfterSeconds?: number }
  /**
   * The collector refused with a 4xx, passed on as it came (SPEC §6); `status` is its google.rpc.Status
   * body when that is readable in the client's encoding.
   */
  | { readonly kind: 'upstream_refused'; readonly status: number; readonly retryAfterSeconds?: number; readonly statusBody?: Buffer }
  | { readonly kind: 'internal' };

/** Thrown on the export path to answer with an OTLP error; answered in one place, through otlpErrorAnswer. */
export class GatewayError extends Error {
  constructor(readonly failure: GatewayFailure) {
    super(failure.kind);
  }
}

export interface OtlpErrorAnswer {
  readonly httpStatus: number;
  /** The google.rpc.Status to encode in the request's encoding, or the collector's own, already encoded. */
  readonly status: RpcStatus | Buffer;
  readonly retryAfterSeconds?: number;
}

/** google.rpc.Code values OTLP uses. */
const RPC = {
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** The google.rpc.Code OTLP pairs with each refusal's HTTP status. */
const REFUSAL_CODES: Record<RefusalAnswer['httpStatus'], number> = {
  401: RPC.UNAUTHENTICATED,
  403: RPC.PERMISSION_DENIED,
  429: RPC.RESOURCE_EXHAUSTED,
  503: RPC.UNAVAILABLE,
};

/**
 * OTLP clients retry 429, 502, 503 and 504 only (OTLP/HTTP "Failures"), so every transient fault lands on
 * one of those with a Retry-After, and nothing permanent does.
 */
export function otlpErrorAnswer(failure: GatewayFailure): OtlpErrorAnswer {
  switch (failure.kind) {
    case 'unsupported_media_type':
      return { httpStatus: 415, status: { code: RPC.INVALID_ARGUMENT, message: failure.message } };
    case 'bad_request':
      return { httpStatus: 400, status: { code: RPC.INVALID_ARGUMENT, message: failure.message } };
    case 'not_found':
      return { httpStatus: 404, status: { code: RPC.NOT_FOUND, message: failure.message } };
    case 'too_large':
      return { httpStatus: 413, status: { code: RPC.RESOURCE_EXHAUSTED, message: failure.message } };
    case 'unauthenticated':
    case 'forbidden':
    case 'rate_limited':
    case 'unavailable': {
      const answer = refusalAnswer(failure);
      return {
        httpStatus: answer.httpStatus,
        status: { code: REFUSAL_CODES[answer.httpStatus], message: answer.message },
        retryAfterSeconds: answer.retryAfterSeconds,
      };
    }
    case 'store_unavailable':
      return { httpStatus: 503, status: { code: RPC.UNAVAILABLE, message: 'grant store unavailable' }, retryAfterSeconds: failure.retryAfterSeconds };
    case 'shutting_down':
      // Another replica, or this one restarted, takes the retry.
      return { httpStatus: 503, status: { code: RPC.UNAVAILABLE, message: 'gateway is shutting down' }, retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
    case 'upstream_unreachable':
      return { httpStatus: 502, status: { code: RPC.UNAVAILABLE, message: 'collector unreachable' }, retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS };
    case 'upstream_timeout':
      return {
        httpStatus: 504,
        status: { code: RPC.DEADLINE_EXCEEDED, message: 'collector did not answer in time' },
        retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS,
      };
    case 'upstream_error':
      // 503 and 504 keep their meaning; any other 5xx is the collector failing: bad gateway.
      return {
        httpStatus: failure.status === 503 || failure.status === 504 ? failure.status : 502,
        status: { code: RPC.UNAVAILABLE, message: `collector answered ${failure.status}` },
        retryAfterSeconds: failure.retryAfterSeconds ?? OUTAGE_RETRY_AFTER_SECONDS,
      };
    case 'upstream_refused':
      return {
        httpStatus: failure.status,
        status: failure.statusBody ?? {
          code: failure.status === 429 ? RPC.RESOURCE_EXHAUSTED : RPC.INVALID_ARGUMENT,
          message: `collector answered ${failure.status}`,
        },
        retryAfterSeconds: failure.retryAfterSeconds,
      };
    case 'internal':
      return { httpStatus: 500, status: { code: RPC.INTERNAL, message: 'internal error' } };
    default: {
      const unreachable: never = failure;
      throw new Error(`unhandled gateway failure ${JSON.stringify(unreachable)}`);
    }
  }
}
