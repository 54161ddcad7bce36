import fastify, { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest, LogController } from 'fastify';
import { promisify } from 'node:util';
import { gunzip, gunzipSync } from 'node:zlib';
import type { Logger } from 'pino';
import { AppConfig } from '../config/app-config';
import { drainAfterAnswer, drainUnreadBodies } from '../observability/body-drain';
import { addRequestHooks, REQUEST_ID_HEADER, requestIdOf, rootLoggerForRequests } from '../observability/request-hooks';
import { frameworkLogger } from '../observability/logger';
import { OUTAGE_RETRY_AFTER_SECONDS, retryAfterForWindow } from '../otlp/retry-after';
import { encodingOf, OTLP_MEDIA_TYPES, OTLP_SIGNALS, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { encodeExportResponse, encodeRpcStatus, mergePartialSuccess, OtlpPartialSuccess } from '../otlp/otlp-response';
import { OtlpPayloadError } from '../otlp/otlp-wire';
import { DecisionSpan, startDecisionSpan } from '../observability/tracing';
import { headerCredential, RunnerCredential } from '../runner-auth/runner-credential';
import { AuthOutcome } from '../runner-auth/auth-outcome';
import { DecisionCache } from '../runner-auth/decision-cache';
import { Receipt } from '../limits/block-lease';
import { JobSpanLedger } from '../limits/job-span-ledger';
import { LimitStore } from '../limits/limit-store';
import { WindowLedger } from '../limits/window-ledger';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayFailure, otlpErrorAnswer } from './otlp-errors';
import { enforceExport } from './export-policy/enforce-export';
import { EnforcedExport, GatewayGrant } from './export-policy/otlp-types';
import type { CollectorClient } from '../collector/collector-client';
import type { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';
import type { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { settleProvisionalTraces } from '../otlp/sampling-reason';

const inflate = promisify(gunzip);

/** A span quota lives at least this long even for a grant about to end (clock skew between replicas). */
const MIN_QUOTA_TTL_MS = 60_000;

type AllowedDecision = Extract<AuthOutcome, { kind: 'allowed' }>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the credential check, which runs before the body is read. */
    exportGrant: AllowedDecision | null;
    /** The export as the handler reads it: its encoding and its body, inflated (set before the handler). */
    exportEncoding: OtlpEncoding | null;
    exportBody: Buffer | null;
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
  /** The runner windows and span quotas are leased from it (issue 21): see `GatewayLedgers`. */
  readonly store: LimitStore;
  /** Only `export` is used here: the module owns the client's life, and tests pass a fake collector. */
  readonly collector: Pick<CollectorClient, 'export'>;
  readonly metrics: GatewayMetrics;
  /** Told of the runner's `job_execution` ends, which close job spans when no webhook will (SPEC §10). */
  readonly pipelineSpans?: Pick<PipelineSpansService, 'jobSpanToCloseFromRunner' | 'closeJobFromRunner'>;
  /** Where a provisional pipeline's traces are parked until its outcome decides (SPEC §11). */
  readonly outcomeSampling?: Pick<OutcomeSamplingService, 'parkExport'>;
}

/**
 * The runner-facing OTLP/HTTP endpoint (SPEC §6). Plain Fastify routes rather than Nest controllers:
 * every span of every job passes here, and Nest's per-request guard/pipe/interceptor machinery costs
 * throughput for nothing on three fixed routes. Nest still wires the dependencies (GatewayModule).
 */
export function buildGatewayServer(deps: GatewayDependencies): FastifyInstance {
  const { config, logger, metrics } = deps;
  const ledgers: GatewayLedgers = {
    windows: new WindowLedger(deps.store, { observer: metrics }),
    spans: new JobSpanLedger(deps.store, { observer: metrics }),
  };

  // Every answer that is not a success goes out here, as a google.rpc.Status in the request's encoding
  // with exactly its media type (otel-go reads the body only when it is application/x-protobuf).
  const sendFailure = (request: FastifyRequest, reply: FastifyReply, failure: GatewayFailure): FastifyReply => {
    const encoding = encodingOf(request.headers['content-type']) ?? 'protobuf';
    request.exportFailure = failure.kind;
    const answer = otlpErrorAnswer(failure);
    if (answer.retryAfterSeconds !== undefined) void reply.header('retry-after', String(answer.retryAfterSeconds));
    const body = Buffer.isBuffer(answer.status) ? answer.status : encodeRpcStatus(encoding, answer.status);
    return reply.status(answer.httpStatus).header('content-type', OTLP_MEDIA_TYPES[encoding]).send(body);
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

  addRequestHooks(app, logger, { successLogIntervalMs: config.EXPORT_SUCCESS_LOG_INTERVAL_MS, sampledRoutes: 'all' });
  drainUnreadBodies(app, config.GATEWAY_MAX_WIRE_BYTES);
  // Leases not spent go back to the store when the gateway stops, for the other replicas.
  app.addHook('onClose', async () => {
    await Promise.all([ledgers.windows.close(), ledgers.spans.close()]);
  });

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
  app.decorateRequest('exportEncoding', null);
  app.decorateRequest('exportBody', null);
  app.decorateRequest('exportSpan', null);
  app.decorateRequest('exportFailure', null);

  /**
   * Admission, when the request arrives and before its body is read (SPEC §6): the credential, then the
   * runner's export window. A client without a valid credential, or a runner over its rate, never makes
   * the gateway buffer or inflate anything.
   */
  const admitExport = async (request: FastifyRequest, reply: FastifyReply) => {
    request.exportSpan = startDecisionSpan('ci_job_telemetry.export');
    try {
      const grant = await authorize(deps, credentialOf(request));
      const window = ledgers.windows.charge(
        `gateway:runner:${grant.identity.runnerId}`,
        config.GATEWAY_RUNNER_RATE_LIMIT,
        config.GATEWAY_RUNNER_RATE_WINDOW_SECONDS * 1000,
      );
      const charged = window instanceof Promise ? await orUnavailable(window) : window;
      if (!charged.allowed) {
        throw new GatewayError({ kind: 'rate_limited', reason: 'runner rate limit exceeded', retryAfterSeconds: retryAfterForWindow(charged.resetInMs) });
      }
      request.exportGrant = grant;
    } catch (error) {
      return sendFailure(request, reply, failureOf(error));
    }
  };

  /** The body as the handler reads it, as the Collector's confighttp does before its handler: media type, encoding, inflated. */
  const readExport = (signal: OtlpSignal) => async (request: FastifyRequest, reply: FastifyReply) => {
    try {
      const read = await exportOf(config, metrics, signal, request);
      request.exportEncoding = read.encoding;
      request.exportBody = read.body;
    } catch (error) {
      return sendFailure(request, reply, failureOf(error));
    }
  };

  for (const signal of OTLP_SIGNALS) {
    const handler = async (request: FastifyRequest, reply: FastifyReply) => {
      const encoding = request.exportEncoding!;
      try {
        const answer = await exportItems(deps, ledgers, signal, encoding, request.exportBody!, request.exportGrant!);
        void reply.status(200).header('content-type', OTLP_MEDIA_TYPES[encoding]);
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
      app.post(url, { onRequest: admitExport, preHandler: readExport(signal), onResponse: countRequest }, handler);
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

/** What the gateway spends without a store round trip per export (issue 21): blocks of runner windows, leases of span quotas. */
interface GatewayLedgers {
  readonly windows: WindowLedger;
  readonly spans: JobSpanLedger;
}

/** The export's media type and encoding checked, its body inflated within the limits (SPEC §6). */
async function exportOf(
  config: AppConfig,
  metrics: GatewayMetrics,
  signal: OtlpSignal,
  request: FastifyRequest,
): Promise<{ encoding: OtlpEncoding; body: Buffer }> {
  const encoding = encodingOf(request.headers['content-type']);
  if (encoding === undefined) throw new GatewayError({ kind: 'unsupported_media_type', message: 'use application/x-protobuf or application/json' });
  const contentEncoding = String(request.headers['content-encoding'] ?? 'identity')
    .trim()
    .toLowerCase();
  if (contentEncoding !== 'identity' && contentEncoding !== 'gzip') {
    throw new GatewayError({ kind: 'unsupported_media_type', message: `content-encoding ${contentEncoding} is not supported; use gzip or none` });
  }
  const wire = (request.body as Buffer | undefined) ?? Buffer.alloc(0);
  metrics.received(signal, wire.length);
  const body = contentEncoding === 'gzip' ? await decompress(wire, config.GATEWAY_MAX_DECOMPRESSED_BYTES) : wire;
  if (body.length > config.GATEWAY_MAX_DECOMPRESSED_BYTES) {
    throw new GatewayError({ kind: 'too_large', message: `body over ${config.GATEWAY_MAX_DECOMPRESSED_BYTES} bytes` });
  }
  return { encoding, body };
}

/**
 * One admitted export, in a straight line as the Collector's otlphttp handler reads: enforce → charge →
 * forward → answer. The charge is a receipt from the job's span lease; what the collector did not accept
 * is refunded through it (SPEC §6: a retried export is never charged twice).
 */
async function exportItems(
  deps: GatewayDependencies,
  ledgers: GatewayLedgers,
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  decision: AllowedDecision,
): Promise<Buffer> {
  const { config, metrics } = deps;
  // Only traces wait for a provisional pipeline's outcome (SPEC §11): its metrics and logs are not trace-sampled
  // data and go on at once, saying `head` (forwarded without waiting), rather than being held a pipeline long.
  const grant: GatewayGrant = signal !== 'traces' && decision.identity.provisional === true ? { ...decision.identity, provisional: false } : decision.identity;
  const spanLimits = {
    maxBytes: config.SPAN_MAX_BYTES,
    maxAttributes: config.SPAN_MAX_ATTRIBUTES,
    maxAttributeValueBytes: config.SPAN_MAX_ATTRIBUTE_VALUE_BYTES,
  };
  let enforced = enforce(signal, encoding, body, grant, Number.MAX_SAFE_INTEGER, spanLimits);

  let receipt: Receipt | undefined;
  if (enforced.forwardedItems > 0 && signal === 'traces') {
    const wanted = enforced.forwardedItems;
    const quotaTtlMs = Math.max(MIN_QUOTA_TTL_MS, decision.identity.expiresAt - Date.now());
    const limits = { perJob: config.SPANS_PER_JOB, perSecond: config.SPANS_PER_SECOND_PER_JOB };
    const pending = ledgers.spans.charge(grant.jobId, wanted, limits, quotaTtlMs);
    const charge = pending instanceof Promise ? await orUnavailable(pending) : pending;
    receipt = charge.receipt;
    // Rarely (quota nearly used, the second's rate spent): enforced again with exactly the room each limit had.
    if (charge.granted < wanted) enforced = enforce(signal, encoding, body, grant, { quota: charge.quotaRoom, rate: charge.rateRoom }, spanLimits);
  }
  countItems(metrics, signal, enforced);
  const ours: OtlpPartialSuccess | undefined =
    enforced.rejectedItems > 0 ? { rejectedItems: enforced.rejectedItems, errorMessage: enforced.errorMessage ?? '' } : undefined;
  if (enforced.nothingToForward) return encodeExportResponse(signal, encoding, ours);

  let outgoing = enforced.body;
  if (grant.provisional === true && deps.outcomeSampling !== undefined) {
    let parked;
    try {
      // Acknowledged only once kept: a store that cannot keep it answers retryable and charges nothing.
      parked = await orUnavailable(deps.outcomeSampling.parkExport(grant.traceId, encoding, outgoing, enforced.forwardedItems));
    } catch (error) {
      receipt?.refund();
      throw error;
    }
    // Parked, or dropped as the decision (or a full budget falling back to the head decision) says.
    if (parked.kind !== 'forward') return encodeExportResponse(signal, encoding, ours);
    // A late export of a pipeline kept already goes on, saying why.
    outgoing = settleProvisionalTraces(encoding, outgoing, parked.reason);
  }

  let theirs: OtlpPartialSuccess | undefined;
  try {
    theirs = await forward(deps, signal, encoding, outgoing);
  } catch (error) {
    // Nothing was accepted: the client sends these spans again, and must not pay for them twice.
    receipt?.refund();
    throw error;
  }
  // Spans the collector itself rejected were not accepted either.
  receipt?.refund(theirs?.rejectedItems ?? 0);
  if (signal === 'traces') reportJobEnds(deps, enforced, grant.jobId);
  return encodeExportResponse(signal, encoding, mergePartialSuccess(ours, theirs));
}

function enforce(
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  body: Buffer,
  grant: GatewayGrant,
  budget: number | { quota: number; rate: number },
  limits: { maxBytes: number; maxAttributes: number; maxAttributeValueBytes: number },
): EnforcedExport {
  try {
    return enforceExport(signal, encoding, body, grant, budget, limits);
  } catch (error) {
    if (error instanceof OtlpPayloadError) throw new GatewayError({ kind: 'bad_request', message: error.message });
    throw error;
  }
}

function countItems(metrics: GatewayMetrics, signal: OtlpSignal, enforced: EnforcedExport): void {
  const rejected = enforced.rejections;
  if (rejected !== undefined) {
    metrics.itemsOf(signal, 'rejected_foreign_trace', rejected.foreignTrace);
    metrics.itemsOf(signal, 'rejected_undecodable', rejected.undecodable);
    metrics.itemsOf(signal, 'rejected_control_plane_span_id', rejected.controlPlaneSpanId);
    metrics.itemsOf(signal, 'rejected_reserved_attribute', rejected.reservedAttribute);
    metrics.itemsOf(signal, 'rejected_span_limits', rejected.overLimits);
    metrics.itemsOf(signal, 'rejected_quota', rejected.overQuota);
    metrics.itemsOf(signal, 'rejected_rate', rejected.overRate);
  }
  metrics.itemsOf(signal, 'accepted', enforced.forwardedItems);
}

/** The runner's `job_execution` ends in what was forwarded, when they are what closes the job span (not awaited). */
function reportJobEnds(deps: GatewayDependencies, enforced: EnforcedExport, jobId: number): void {
  // Enforcement noted the job_execution spans as it walked them; most exports have none.
  if (enforced.jobExecutionEnds === undefined) return;
  const jobSpanId = deps.pipelineSpans?.jobSpanToCloseFromRunner(jobId);
  if (jobSpanId === undefined) return;
  for (const end of enforced.jobExecutionEnds) {
    if (end.parentSpanId === jobSpanId) void deps.pipelineSpans!.closeJobFromRunner(jobId, end);
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
  if (decision.kind === 'allowed') return decision;
  // Every refusal with its reason; the request id comes with every line, a token or capability never (SPEC §5).
  deps.logger.info({ refusal: decision.kind, reason: decision.reason }, 'export refused');
  throw new GatewayError(decision);
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

/** 2xx only when the collector answered 2xx; its partial success is returned for merging. */
async function forward(deps: GatewayDependencies, signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer): Promise<OtlpPartialSuccess | undefined> {
  const { collector, metrics } = deps;
  const started = performance.now();
  const result = await collector.export(signal, encoding, body);
  const happened = result.kind === 'retry' ? result.happened : result.status;
  metrics.upstreamAnswered(signal, String(happened), (performance.now() - started) / 1000);
  if (happened === 'timeout') throw new GatewayError({ kind: 'upstream_timeout' });
  if (happened === 'unreachable') throw new GatewayError({ kind: 'upstream_unreachable' });
  metrics.forwarded(signal, body.length);
  if (result.kind === 'accepted') return result.partialSuccess;
  const { retryAfterSeconds, contentType, body: answer } = result;
  if (happened >= 400 && happened < 500) {
    // The collector's own Status goes on as it came when the client can read it (same encoding).
    const statusBody = answer !== undefined && answer.length > 0 && encodingOf(contentType) === encoding ? answer : undefined;
    throw new GatewayError({ kind: 'upstream_refused', status: happened, retryAfterSeconds, statusBody });
  }
  throw new GatewayError({ kind: 'upstream_error', status: happened, retryAfterSeconds });
}

async function orUnavailable<T>(operation: Promise<T>): Promise<T> {
  try {
    return await operation;
  } catch (error) {
    if (error instanceof StoreUnavailableError) throw new GatewayError({ kind: 'store_unavailable', retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS });
    throw error;
  }
}
