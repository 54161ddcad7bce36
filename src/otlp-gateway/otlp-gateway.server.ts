import fastify, { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest, LogController } from 'fastify';
import { promisify } from 'node:util';
import { gunzip, gunzipSync } from 'node:zlib';
import { GatewayConfig } from '../config/sections/gateway';
import { drainAfterAnswer, drainUnreadBodies } from '../observability/body-drain';
import { addRequestHooks, REQUEST_ID_HEADER, requestIdOf, rootLoggerForRequests } from '../observability/request-hooks';
import { frameworkLogger } from '../observability/logger';
import { encodingOf, OTLP_MEDIA_TYPES, OTLP_SIGNALS, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { encodeRpcStatus } from '../otlp/otlp-response';
import { DecisionSpan, startDecisionSpan } from '../observability/tracing';
import { headerCredential, RunnerCredential } from '../runner-auth/runner-credential';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayError, GatewayFailure, otlpErrorAnswer } from './otlp-errors';
import { AllowedDecision, ExportPath, GatewayDependencies } from './export-path';
import { readExportBody } from './export-body';

const inflate = promisify(gunzip);

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

/**
 * The runner-facing OTLP/HTTP endpoint (SPEC §6): the HTTP shell around the export path (export-path.ts). Here are
 * what confighttp wraps around the Collector's receiver: the server, its hooks, the request's credential and body
 * (media type, content encoding, limits), and every failure answered as an OTLP Status in one place.
 *
 * Plain Fastify routes rather than Nest controllers: every span of every job passes here, and Nest's per-request
 * guard/pipe/interceptor machinery costs throughput for nothing on three fixed routes. Nest still wires the
 * dependencies (GatewayModule).
 */
export function buildGatewayServer(deps: GatewayDependencies): FastifyInstance {
  const { config, logger, metrics } = deps;
  const exportPath = new ExportPath(deps);

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
    bodyLimit: config.maxWireBytes,
    genReqId: requestIdOf,
    childLoggerFactory: rootLoggerForRequests,
    // Fastify answers a URL it cannot decode with JSON of its own; OTLP clients get a Status. That answer
    // is sent outside any route, where neither the onRequest hooks (request id, SPEC §8) nor the onSend
    // drain run, so both are done here.
    frameworkErrors: (error, request, reply) => {
      void reply.header(REQUEST_ID_HEADER, request.id);
      drainAfterAnswer(request.raw, config.maxWireBytes);
      sendFailure(request, reply, failureOf(error));
    },
    // Fastify's own answer while closing is a JSON 503 without Retry-After; the onRequest hook below
    // answers instead, with a retryable OTLP Status.
    return503OnClosing: false,
  });

  // Bodies stay bytes: the payload core edits them in place, whatever the media type. Unknown media
  // types are refused by the handler with an OTLP Status instead of Fastify's own 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', readExportBody(config.maxWireBytes));

  addRequestHooks(app, logger, { successLogIntervalMs: config.successLogIntervalMs, sampledRoutes: 'all' });
  drainUnreadBodies(app, config.maxWireBytes);
  app.addHook('onClose', () => exportPath.close());

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

  /** Admission when the request arrives, before its body is read (ExportPath.admit). */
  const admitExport = async (request: FastifyRequest, reply: FastifyReply) => {
    request.exportSpan = startDecisionSpan('ci_job_telemetry.export');
    try {
      request.exportGrant = await exportPath.admit(credentialOf(request));
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
        const answer = await exportPath.exportItems(signal, encoding, request.exportBody!, request.exportGrant!);
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
function frameworkFailure(error: FastifyError, config: GatewayConfig): GatewayFailure {
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { kind: 'too_large', message: `body over ${config.maxWireBytes} bytes` };
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

/** The export's media type and encoding checked, its body inflated within the limits (SPEC §6). */
async function exportOf(
  config: GatewayConfig,
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
  const body = contentEncoding === 'gzip' ? await decompress(wire, config.maxDecompressedBytes) : wire;
  if (body.length > config.maxDecompressedBytes) {
    throw new GatewayError({ kind: 'too_large', message: `body over ${config.maxDecompressedBytes} bytes` });
  }
  return { encoding, body };
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
