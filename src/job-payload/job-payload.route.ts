import { Inject, Injectable, Logger as NestLogger, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { sendError } from '../observability/http-error';
import { APP_LOGGER } from '../observability/logger';
import { callerCheckHook } from '../internal-api/internal-api-caller';
import { INTERNAL_API_VERIFIER } from '../internal-api/internal-api.constants';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from '../internal-api/internal-api-token';
import { JsonTooDeepError, MAX_JSON_DEPTH, PayloadLayout, payloadJson, scanRequestText } from './job-payload-text';
import { JobPayload, loadJobPayloadRequestSchema, parseJobPayloadRequest } from './job-payload-request';
import { DecoratedJobPayload, JobPayloadService } from './job-payload.service';

export const JOB_PAYLOAD_PATH = '/internal/ci/telemetry/job_payload';

/** What the route's JSON parser hands the handler: the parsed body, and its text for the answer to reuse. */
export interface JobPayloadBody {
  readonly json: unknown;
  readonly text: string;
  readonly payloadLayout?: PayloadLayout;
}

/**
 * `POST /internal/ci/telemetry/job_payload` (SPEC §4) as a plain Fastify route. GitLab calls it on
 * every job pickup, and Nest's per-request machinery (guard, pipe, parameter resolution) with
 * class-validator cost about 400 µs of CPU per request, as much as the decorator itself: measured
 * with bench/job-payload.bench.ts. DI still wires it; the handler is one call to JobPayloadService.
 *
 * Errors keep the internal API's one shape (`{ error, request_id }`, 400s with `fields`); Fastify's
 * own errors (malformed JSON, 413 over BODY_LIMIT_BYTES) still go through AllExceptionsFilter.
 *
 * The route sits in a Fastify context of its own so that its JSON parser applies to it alone: one
 * pass over the body text checks the nesting before anything is parsed (a preParsing stream doing
 * that cost about 100 µs of CPU per pickup in stream machinery alone) and notes where the payload's
 * members stand, so that the answer writes back what it did not change as the text it came as
 * instead of serializing the whole payload again (30 to 50 µs for an 11 KiB payload). Both measured
 * with `--cpu-prof` on bench/job-payload.bench.ts.
 */
@Injectable()
export class JobPayloadRoute implements OnModuleInit {
  private readonly nestLogger = new NestLogger(JobPayloadRoute.name);

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    private readonly jobPayloads: JobPayloadService,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    loadJobPayloadRequestSchema();
    const fastify = this.adapterHost.httpAdapter.getInstance<FastifyInstance>();
    void fastify.register(async (scope) => {
      useJobPayloadParser(scope);
      scope.route({
        method: 'POST',
        url: JOB_PAYLOAD_PATH,
        // Before the body is read: an unauthenticated caller never gets up to 8 MiB parsed.
        onRequest: callerCheckHook((headers) => this.verifier.refusal(headers[INTERNAL_API_HEADER]), this.logger),
        handler: (request, reply) => this.decorate(request, reply),
      });
    });
    this.nestLogger.debug(`Mapped {${JOB_PAYLOAD_PATH}, POST} route (plain Fastify)`);
  }

  private async decorate(request: FastifyRequest, reply: FastifyReply): Promise<string | FastifyReply> {
    const body = request.body as JobPayloadBody | undefined;
    if (body === undefined) {
      sendError(request, reply, 415, 'a JSON body is required (content-type: application/json)');
      return reply;
    }
    const parsed = parseJobPayloadRequest(body.json);
    if (parsed.problems !== undefined) {
      const error = `invalid request: ${parsed.problems.flatMap((problem) => problem.problems).join('; ')}`;
      sendError(request, reply, 400, error, { details: { fields: parsed.problems } });
      return reply;
    }
    const decorated = await this.jobPayloads.decorate(parsed.request);
    void reply.header('content-type', 'application/json; charset=utf-8');
    return decoratedAnswer(body, parsed.request.payload, decorated);
  }
}

/**
 * Makes `scope` (a Fastify context of the decorator's own) take JSON bodies only, as JobPayloadBody: read
 * against BODY_LIMIT_BYTES, refused with a 400 when nested beyond any job payload (not a stack overflow
 * later), checked for prototype poisoning as on every other JSON route.
 */
export function useJobPayloadParser(scope: FastifyInstance): void {
  const { onProtoPoisoning, onConstructorPoisoning } = scope.initialConfig;
  const parseJson = scope.getDefaultJsonParser(onProtoPoisoning ?? 'error', onConstructorPoisoning ?? 'error');
  // JSON only: Fastify's default text/plain parser would hand the handler a string, answered as a
  // payload missing every field ("runner is required") instead of as the wrong media type.
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser('*', (request, _body, done) => done(new UnsupportedMediaTypeError(request.headers['content-type']), undefined));
  scope.addContentTypeParser<string>('application/json', { parseAs: 'string' }, (request, text, done) => {
    const scanned = scanRequestText(text, MAX_JSON_DEPTH);
    if (scanned.tooDeep) return done(new JsonTooDeepError(MAX_JSON_DEPTH), undefined);
    parseJson(request, text, (error, json) => {
      if (error !== null) done(error, undefined);
      else done(null, { json, text, payloadLayout: scanned.payload } satisfies JobPayloadBody);
    });
  });
}

/** The decorator's answer, the payload written back from the request's own text where it did not change. */
export function decoratedAnswer(body: JobPayloadBody, sent: JobPayload, { payload, telemetry }: DecoratedJobPayload): string {
  const payloadText = body.payloadLayout === undefined ? JSON.stringify(payload) : payloadJson(body.text, body.payloadLayout, sent, payload);
  return `{"payload":${payloadText},"telemetry":${JSON.stringify(telemetry)}}`;
}

/** 415 through the internal API's error shape (AllExceptionsFilter reads `statusCode`), naming what was sent. */
class UnsupportedMediaTypeError extends Error {
  readonly statusCode = 415;

  constructor(contentType: string | undefined) {
    const sent = contentType === undefined || contentType === '' ? 'none' : contentType.slice(0, 100);
    super(`content-type must be application/json (got ${sent})`);
    this.name = 'UnsupportedMediaTypeError';
  }
}
