import fastify, { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest, LogController } from 'fastify';
import { promisify } from 'node:util';
import { gunzip, gunzipSync } from 'node:zlib';
import type { Logger } from 'pino';
import { AppConfig } from '../config/app-config';
import { GrantStore, StoreUnavailableError } from '../grants/grant';
import { drainAfterAnswer, drainUnreadBodies } from '../observability/body-drain';
import { addRequestHooks, REQUEST_ID_HEADER, requestIdOf, rootLoggerForRequests } from '../observability/request-hooks';
import { frameworkLogger } from '../observability/logger';
import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow, upstreamRetryAfter } from '../observability/retry-after';
import { DecisionSpan, startDecisionSpan } from '../observability/tracing';
import { headerCredential, RunnerCredential } from '../runner-auth/runner-credential';
import { AuthOutcome } from '../runner-auth/auth-outcome';
import { DecisionCache } from '../runner-auth/decision-cache';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayFailure, otlpErrorAnswer } from './otlp-errors';
import { enforceExport } from './wire/otlp-payload';
import { EnforcedExport, GatewayGrant, OtlpEncoding, OtlpSignal } from './wire/otlp-types';
import { decodeExportResponse, encodeExportResponse, encodeRpcStatus, mergePartialSuccess, OtlpPartialSuccess } from './wire/otlp-response';
import { OtlpUpstream, UpstreamFailure } from '../collector/otlp-upstream';
import { OtlpPayloadError } from './wire/otlp-wire';
import { jobExecutionEnds } from './wire/job-execution-end';
import type { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';

const inflate = promisify(gunzip);

const SIGNALS: readonly OtlpSignal[] = ['traces', 'metrics', 'logs'];
const CONTENT_TYPES: Record<OtlpEncoding, string> = { protobuf: 'application/x-protobuf', json: 'application/json' };
/** A span quota lives at least this long even for a grant about to end (clock skew between replicas). */
const MIN_QUOTA_TTL_MS = 60_000;

type AllowedDecision = Extract<AuthOutcome, { kind: 'allowed' }>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the credential check, which runs before the body is read. */
    exportGrant: AllowedDecision | null;
    /** The export's self-instrumentation span (SPEC §8), from the credential check to the answer. */
    exportSpan: DecisionSpan | null;
    /** The failure the export was answered with, for its span. */
    exportFailure: GatewayFailure['kind'] | null;
  }
}

/** Thrown inside the handler to answer with an OTLP error; mapped in one place (otlpErrorAnswer). */
class GatewayError extends Error {
  constructor(readonly failure: GatewayFailure) {
    super(failure.kind);
  }
}

export interface GatewayDependencies {
  readonly config: AppConfig;
  readonly logger: Logger;
  readonly decisions: DecisionCache;
  readonly store: GrantStore;
  /** Only `send` is used here: the module owns the pool's life, and tests pass a fake collector. */
  readonly upstream: Pick<OtlpUpstream, 'send'>;
  readonly metrics: GatewayMetrics;
  /** Told of the runner's `job_execution` ends, which close job spans when no webhook will (SPEC §10). */
  readonly pipelineSpans?: Pick<PipelineSpansService, 'jobSpanToCloseFromRunner' | 'closeJobFromRunner'>;
}

function encodingOf(contentType: string | undefined): OtlpEncoding | undefined {
  const mediaType = (contentType ?? '').split(';')[0].trim().toLowerCase();
  if (mediaType === 'application/x-protobuf') return 'protobuf';
  if (mediaType === 'application/json') return 'json';
  return undefined;
}

/**
 * The runner-facing OTLP/HTTP endpoint (SPEC §6). Plain Fastify routes rather than Nest controllers:
 * every span of every job passes here, and Nest's per-request guard/pipe/interceptor machinery costs
 * throughput for nothing on three fixed routes. Nest still wires the dependencies (GatewayModule).
 */
export function buildGatewayServer(deps: GatewayDependencies): FastifyInstance {
  const { config, logger, metrics } = deps;

  // Every answer that is not a success goes out here, as a google.rpc.Status in the request's encoding
  // with exactly its media type (otel-go reads the body only when it is application/x-protobuf).
  const sendFailure = (request: FastifyRequest, reply: FastifyReply, failure: GatewayFailure): FastifyReply => {
    const encoding = encodingOf(request.headers['content-type']) ?? 'protobuf';
    request.exportFailure = failure.kind;
    const answer = otlpErrorAnswer(failure);
    if (answer.retryAfterSeconds !== undefined) void reply.header('retry-after', String(answer.retryAfterSeconds));
    const body = Buffer.isBuffer(answer.status) ? answer.status : encodeRpcStatus(encoding, answer.status);
    return reply.status(answer.httpStatus).header('content-type', CONTENT_TYPES[encoding]).send(body);
  };
  const failureOf = (error: unknown): GatewayFailure => {
    if (error instanceof GatewayError) return error.failure;
    const failure = frameworkFailure(error as FastifyError, config);
    if (failure.kind === 'internal') logger.error({ err: error }, 'gateway request failed');
    return failure;
  };

  const app = fastify({
    // pino's Logger and Fastify's FastifyBaseLogger differ only in typing details.
    loggerInstance: frameworkLogger(logger) as unknown as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.GATEWAY_MAX_WIRE_BYTES,
    genReqId: requestIdOf,
    childLoggerFactory: rootLoggerForRequests,
    // Fastify answers a URL it cannot decode with JSON of its own; OTLP clients get a Status. That answer
    // is sent outside any route, where neither the onRequest hooks (request id, SPEC §8) nor the onSend
    // drain run, so both are done here.
    frameworkErrors: (error, request, reply) => {
      void reply.header(REQUEST_ID_HEADER, request.id);
      drainAfterAnswer(request.raw, config.GATEWAY_MAX_WIRE_BYTES);
      sendFailure(request, reply, failureOf(error));
    },
    // Fastify's own answer while closing is a JSON 503 without Retry-After; the onRequest hook below
    // answers instead, with a retryable OTLP Status.
    return503OnClosing: false,
  });

  // Bodies stay bytes: the payload core edits them in place, whatever the media type. Unknown media
  // types are refused by the handler with an OTLP Status instead of Fastify's own 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  addRequestHooks(app, logger);
  drainUnreadBodies(app, config.GATEWAY_MAX_WIRE_BYTES);

  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', (request, reply, done) => {
    if (closing) sendFailure(request, reply, { kind: 'shutting_down' });
    else done();
  });

  // Errors Fastify raises before the handler: body over the wire limit, a body cut short.
  app.setErrorHandler((error, request, reply) => sendFailure(request, reply, failureOf(error)));
  // The path is not echoed: on a capability route it holds a credential.
  app.setNotFoundHandler((request, reply) =>
    sendFailure(request, reply, {
      kind: 'not_found',
      message: `no OTLP route ${request.method} here; POST /v1/{traces,metrics,logs} or the job's capability URL`,
    }),
  );

  app.decorateRequest('exportGrant', null);
  app.decorateRequest('exportSpan', null);
  app.decorateRequest('exportFailure', null);

  /**
   * Credentials are checked when the request arrives, before its body is read (SPEC §6): a client
   * without a valid credential never makes the gateway buffer or inflate anything.
   */
  const authorizeExport = async (request: FastifyRequest, reply: FastifyReply) => {
    request.exportSpan = startDecisionSpan('ci_job_telemetry.export');
    try {
      request.exportGrant = await authorize(deps, credentialOf(request));
    } catch (error) {
      return sendFailure(request, reply, failureOf(error));
    }
  };

  for (const signal of SIGNALS) {
    const handler = async (request: FastifyRequest, reply: FastifyReply) => {
      const encoding = encodingOf(request.headers['content-type']);
      try {
        if (encoding === undefined) {
          throw new GatewayError({ kind: 'unsupported_media_type', message: 'use application/x-protobuf or application/json' });
        }
        const answer = await handleExport(deps, signal, encoding, request, request.exportGrant!);
        void reply.status(200).header('content-type', CONTENT_TYPES[encoding]);
        return answer;
      } catch (error) {
        return sendFailure(request, reply, failureOf(error));
      }
    };
    const countRequest = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      metrics.request(signal, reply.statusCode);
      request.exportSpan?.end(
        request.exportFailure ?? 'exported',
        () => ({
          'otlp.signal': signal,
          'http.response.status_code': reply.statusCode,
          ...(request.exportGrant === null ? {} : { 'ci.job.id': request.exportGrant.identity.jobId }),
        }),
        reply.statusCode >= 500,
      );
      done();
    };
    // Header credentials (SPEC §5), and the per-job capability URL a stock runner uses (SPEC §4).
    for (const url of [`/v1/${signal}`, `/jobs/:jobId/:capability/v1/${signal}`]) {
      app.post(url, { onRequest: authorizeExport, onResponse: countRequest }, handler);
    }
  }
  return app;
}

/** Fastify's own errors as gateway failures; anything else is ours, a 500 that shows no internals. */
function frameworkFailure(error: FastifyError, config: AppConfig): GatewayFailure {
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { kind: 'too_large', message: `body over ${config.GATEWAY_MAX_WIRE_BYTES} bytes` };
    // Fastify's messages for these quote the path, which may hold a capability (SPEC §4).
    case 'FST_ERR_BAD_URL':
      return { kind: 'bad_request', message: 'the URL is not valid percent-encoding' };
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return { kind: 'bad_request', message: 'a URL segment is too long' };
    default:
      if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) return { kind: 'bad_request', message: error.message };
      return { kind: 'internal' };
  }
}

/** The capability of a capability route, otherwise the header credentials. */
function credentialOf(request: FastifyRequest): RunnerCredential {
  const params = request.params as { jobId?: string; capability?: string };
  if (params.capability === undefined) return headerCredential(request.headers);
  // Digits only and within the safe range, so the id the MAC is checked against is the id in the URL.
  if (!/^\d{1,15}$/.test(params.jobId ?? '')) return { kind: 'missing', reason: 'invalid capability URL' };
  return { kind: 'capability', jobId: Number(params.jobId), capability: params.capability };
}

async function handleExport(
  deps: GatewayDependencies,
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  request: FastifyRequest,
  grant: AllowedDecision,
): Promise<Buffer> {
  const { config, store, metrics } = deps;
  const contentEncoding = String(request.headers['content-encoding'] ?? 'identity')
    .trim()
    .toLowerCase();
  if (contentEncoding !== 'identity' && contentEncoding !== 'gzip') {
    throw new GatewayError({ kind: 'unsupported_media_type', message: `content-encoding ${contentEncoding} is not supported; use gzip or none` });
  }

  // The runner's export window is charged in the same store round trip as the job's spans (the client
  // pipelines commands issued in one turn of the event loop), so it is asked for now and read after
  // enforcement. It still decides first: a runner over its rate gets 429 whatever its body holds.
  const window = orUnavailable(() =>
    store.hitRateWindow(`gateway:runner:${grant.identity.runnerId}`, config.GATEWAY_RUNNER_RATE_LIMIT, config.GATEWAY_RUNNER_RATE_WINDOW_SECONDS * 1000),
  );
  // Read below; a store failure meanwhile (during decompression) must not count as unhandled.
  window.catch(() => undefined);
  const windowAllows = async () => {
    const { allowed, resetInMs } = await window;
    if (!allowed) throw new GatewayError({ kind: 'rate_limited', retryAfterSeconds: retryAfterForWindow(resetInMs) });
  };

  let enforcement: Promise<{ enforced: EnforcedExport; reservedSpans: number }>;
  try {
    const wire = (request.body as Buffer | undefined) ?? Buffer.alloc(0);
    metrics.received(signal, wire.length);
    const body = contentEncoding === 'gzip' ? await decompress(wire, config.GATEWAY_MAX_DECOMPRESSED_BYTES) : wire;
    if (body.length > config.GATEWAY_MAX_DECOMPRESSED_BYTES) {
      throw new GatewayError({ kind: 'too_large', message: `body over ${config.GATEWAY_MAX_DECOMPRESSED_BYTES} bytes` });
    }
    enforcement = enforce(deps, signal, encoding, body, grant);
  } catch (error) {
    await windowAllows();
    throw error;
  }
  const [windowOutcome, enforcementOutcome] = await Promise.allSettled([windowAllows(), enforcement]);
  if (windowOutcome.status === 'rejected') {
    // Spans taken in the same round trip as a refused window were never sent on.
    if (enforcementOutcome.status === 'fulfilled') await giveBackSpans(deps, grant.identity, enforcementOutcome.value.reservedSpans);
    throw windowOutcome.reason;
  }
  if (enforcementOutcome.status === 'rejected') throw enforcementOutcome.reason;
  const { enforced, reservedSpans } = enforcementOutcome.value;
  const ours: OtlpPartialSuccess | undefined =
    enforced.rejectedItems > 0 ? { rejectedItems: enforced.rejectedItems, errorMessage: enforced.errorMessage ?? '' } : undefined;
  if (enforced.nothingToForward) return encodeExportResponse(signal, encoding, ours);

  let theirs: OtlpPartialSuccess | undefined;
  try {
    theirs = await forward(deps, signal, encoding, enforced.body);
  } catch (error) {
    // Nothing was accepted: the client sends these spans again, and must not pay for them twice (SPEC §6).
    await giveBackSpans(deps, grant.identity, reservedSpans);
    throw error;
  }
  // Spans the collector itself rejected were not accepted either.
  await giveBackSpans(deps, grant.identity, Math.min(reservedSpans, theirs?.rejectedItems ?? 0));
  if (signal === 'traces') reportJobEnds(deps, encoding, enforced.body, grant.identity.jobId);
  return encodeExportResponse(signal, encoding, mergePartialSuccess(ours, theirs));
}

/** The runner's `job_execution` ends in what was forwarded, when they are what closes the job span (not awaited). */
function reportJobEnds(deps: GatewayDependencies, encoding: OtlpEncoding, body: Buffer, jobId: number): void {
  const jobSpanId = deps.pipelineSpans?.jobSpanToCloseFromRunner(jobId);
  if (jobSpanId === undefined) return;
  try {
    for (const end of jobExecutionEnds(encoding, body, jobSpanId)) void deps.pipelineSpans!.closeJobFromRunner(jobId, end);
  } catch (error) {
    // The collector has the export: its answer must not turn into a failure for what is only a side look.
    deps.logger.warn({ err: error, jobId }, "could not read the runner's job_execution end");
  }
}

/**
 * Returns span quota taken for spans the collector did not accept. Best effort: the client's answer is
 * already decided, and a store that cannot be reached now leaves the job charged, as it was before.
 */
async function giveBackSpans(deps: GatewayDependencies, grant: GatewayGrant, spans: number): Promise<void> {
  if (spans <= 0) return;
  try {
    await deps.store.releaseSpans(grant.jobId, spans);
  } catch (error) {
    deps.logger.warn({ err: error, jobId: grant.jobId, spans }, 'could not give span quota back');
  }
}

async function authorize(deps: GatewayDependencies, credential: RunnerCredential): Promise<AllowedDecision> {
  const decision: AuthOutcome =
    credential.kind === 'missing'
      ? {
          kind: 'unauthenticated',
          reason: `${credential.reason}: export to the job's capability URL, or send the job token as Authorization: Bearer and the runner token as Runner-Token`,
        }
      : (await deps.decisions.decide(credential)).decision;
  // Every refusal with its reason; the request id comes with every line, a token or capability never (SPEC §5).
  if (decision.kind !== 'allowed') deps.logger.info({ refusal: decision.kind, reason: decision.reason }, 'export refused');
  switch (decision.kind) {
    case 'allowed':
      return decision;
    case 'unauthenticated':
      throw new GatewayError({ kind: 'unauthenticated', message: decision.reason });
    case 'forbidden':
      throw new GatewayError({ kind: 'forbidden', message: decision.reason });
    case 'rate_limited':
      throw new GatewayError({ kind: 'rate_limited', retryAfterSeconds: decision.retryAfterSeconds });
    case 'unavailable':
      throw new GatewayError({ kind: 'store_unavailable', retryAfterSeconds: decision.retryAfterSeconds });
    default: {
      const unreachable: never = decision;
      throw new Error(`unhandled decision ${JSON.stringify(unreachable)}`);
    }
  }
}

/**
 * Exports that inflate to at most this much are inflated on the event loop (about 1 ms at most): handing
 * a typical 4 KiB gzip export to the thread pool cost more than inflating it. Larger ones go to the pool.
 */
const INLINE_INFLATE_MAX_BYTES = 1024 * 1024;

const inflatedTooFar = (error: unknown) => (error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError;

/**
 * Inflates with a hard output cap: zlib stops at the limit, so a gzip bomb costs at most that much
 * memory and the time to produce it (SPEC §6).
 */
async function decompress(wire: Buffer, maxBytes: number): Promise<Buffer> {
  try {
    try {
      return gunzipSync(wire, { maxOutputLength: Math.min(maxBytes, INLINE_INFLATE_MAX_BYTES) });
    } catch (error) {
      if (!inflatedTooFar(error) || maxBytes <= INLINE_INFLATE_MAX_BYTES) throw error;
      return await inflate(wire, { maxOutputLength: maxBytes });
    }
  } catch (error) {
    if (inflatedTooFar(error)) throw new GatewayError({ kind: 'too_large', message: `body over ${maxBytes} bytes once decompressed` });
    throw new GatewayError({ kind: 'bad_request', message: 'body is not valid gzip' });
  }
}

/**
 * Trace binding, per-span limits, and the job's span quota and rate. Quota and rate are taken from the
 * store (one round trip) only for spans that passed the checks before; in the rare case the store grants
 * fewer (quota nearly used, the second's rate spent, or another replica took some), the body is enforced
 * again with exactly the room each limit had.
 */
async function enforce(
  deps: GatewayDependencies,
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  decision: AllowedDecision,
): Promise<{ enforced: EnforcedExport; reservedSpans: number }> {
  const { config, store, metrics } = deps;
  const grant: GatewayGrant = decision.identity;
  const spanLimits = {
    maxBytes: config.SPAN_MAX_BYTES,
    maxAttributes: config.SPAN_MAX_ATTRIBUTES,
    maxAttributeValueBytes: config.SPAN_MAX_ATTRIBUTE_VALUE_BYTES,
  };
  let enforced: EnforcedExport;
  try {
    enforced = enforceExport(signal, encoding, body, grant, Number.MAX_SAFE_INTEGER, spanLimits);
  } catch (error) {
    if (error instanceof OtlpPayloadError) throw new GatewayError({ kind: 'bad_request', message: error.message });
    throw error;
  }
  let reservedSpans = 0;
  if (enforced.forwardedItems > 0 && signal === 'traces') {
    const wanted = enforced.forwardedItems;
    const ttlMs = Math.max(MIN_QUOTA_TTL_MS, decision.identity.expiresAt - Date.now());
    const limits = { perJob: config.SPANS_PER_JOB, perSecond: config.SPANS_PER_SECOND_PER_JOB };
    const reservation = await orUnavailable(() => store.reserveSpans(grant.jobId, wanted, limits, ttlMs));
    reservedSpans = reservation.granted;
    if (reservation.granted < wanted) {
      enforced = enforceExport(signal, encoding, body, grant, { quota: reservation.quotaRoom, rate: reservation.rateRoom }, spanLimits);
    }
  }
  const rejected = enforced.rejections;
  if (rejected !== undefined) {
    metrics.itemsOf(signal, 'rejected_foreign_trace', rejected.foreignTrace);
    metrics.itemsOf(signal, 'rejected_span_limits', rejected.overLimits);
    metrics.itemsOf(signal, 'rejected_quota', rejected.overQuota);
    metrics.itemsOf(signal, 'rejected_rate', rejected.overRate);
  }
  metrics.itemsOf(signal, 'accepted', enforced.forwardedItems);
  return { enforced, reservedSpans };
}

/** 2xx only when the collector answered 2xx; its partial success is returned for merging. */
async function forward(deps: GatewayDependencies, signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): Promise<OtlpPartialSuccess | undefined> {
  const { upstream, metrics } = deps;
  const started = performance.now();
  const stopTimer = (outcome: string) => metrics.upstreamAnswered(signal, outcome, (performance.now() - started) / 1000);
  let answer;
  try {
    answer = await upstream.send(`/v1/${signal}`, CONTENT_TYPES[encoding], body);
  } catch (error) {
    if (!(error instanceof UpstreamFailure)) throw error;
    stopTimer(error.kind);
    throw new GatewayError({ kind: error.kind === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable' });
  }
  stopTimer(String(answer.status));
  metrics.forwarded(signal, body.length);
  const retryAfterSeconds = upstreamRetryAfter(answer.retryAfter);
  if (answer.status >= 400 && answer.status < 500) {
    // The collector's own Status goes on as it came when the client can read it (same encoding).
    const statusBody = answer.body.length > 0 && encodingOf(answer.contentType) === encoding ? answer.body : undefined;
    throw new GatewayError({ kind: 'upstream_refused', status: answer.status, retryAfterSeconds, statusBody });
  }
  if (answer.status < 200 || answer.status >= 300) throw new GatewayError({ kind: 'upstream_error', status: answer.status, retryAfterSeconds });
  try {
    return decodeExportResponse(signal, encoding, answer.body);
  } catch {
    // The collector accepted the data; an unreadable answer must not make the client send it again.
    return undefined;
  }
}

async function orUnavailable<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (error instanceof StoreUnavailableError) throw new GatewayError({ kind: 'store_unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS });
    throw error;
  }
}
