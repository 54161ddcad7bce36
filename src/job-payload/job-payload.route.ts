import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../observability/http-error';
import { callerCheckHook } from '../internal-api/internal-api-caller';
import { INTERNAL_API_VERIFIER } from '../internal-api/internal-api.constants';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from '../internal-api/internal-api-token';
import { JsonTooDeepError, MAX_JSON_DEPTH, PayloadLayout, payloadJson, scanRequestText } from './job-payload-text';
import { loadJobPayloadRequestSchema, parseJobPayloadRequest } from './job-payload-request';
import { JobPayloadService } from './job-payload.service';

export const JOB_PAYLOAD_PATH = '/internal/ci/telemetry/job_payload';

/** What the route's JSON parser hands the handler: the parsed body, and its text for the answer to reuse. */
interface RequestBody {
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
  private readonly logger = new Logger(JobPayloadRoute.name);

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    private readonly jobPayloads: JobPayloadService,
  ) {}

  onModuleInit(): void {
    loadJobPayloadRequestSchema();
    const fastify = this.adapterHost.httpAdapter.getInstance<FastifyInstance>();
    const { onProtoPoisoning, onConstructorPoisoning } = fastify.initialConfig;
    // Prototype-poisoning checks as on every other JSON route.
    const parseJson = fastify.getDefaultJsonParser(onProtoPoisoning ?? 'error', onConstructorPoisoning ?? 'error');
    void fastify.register(async (scope) => {
      scope.removeContentTypeParser('application/json');
      // The body as read against BODY_LIMIT_BYTES; a body nested beyond any job payload is a 400 here,
      // not a stack overflow later.
      scope.addContentTypeParser<string>('application/json', { parseAs: 'string' }, (request, text, done) => {
        const scanned = scanRequestText(text, MAX_JSON_DEPTH);
        if (scanned.tooDeep) return done(new JsonTooDeepError(MAX_JSON_DEPTH), undefined);
        parseJson(request, text, (error, json) => {
          if (error !== null) done(error, undefined);
          else done(null, { json, text, payloadLayout: scanned.payload } satisfies RequestBody);
        });
      });
      scope.route({
        method: 'POST',
        url: JOB_PAYLOAD_PATH,
        // Before the body is read: an unauthenticated caller never gets up to 8 MiB parsed.
        onRequest: callerCheckHook((headers) => this.verifier.refusal(headers[INTERNAL_API_HEADER])),
        handler: (request, reply) => this.decorate(request, reply),
      });
    });
    this.logger.log(`Mapped {${JOB_PAYLOAD_PATH}, POST} route (plain Fastify)`);
  }

  private async decorate(request: FastifyRequest, reply: FastifyReply): Promise<string | FastifyReply> {
    const body = request.body as RequestBody;
    const parsed = parseJobPayloadRequest(body.json);
    if (parsed.problems !== undefined) {
      const error = `invalid request: ${parsed.problems.flatMap((problem) => problem.problems).join('; ')}`;
      sendError(request, reply, 400, error, { details: { fields: parsed.problems } });
      return reply;
    }
    const { payload, telemetry } = await this.jobPayloads.decorate(parsed.request);
    const payloadText =
      body.payloadLayout === undefined ? JSON.stringify(payload) : payloadJson(body.text, body.payloadLayout, parsed.request.payload, payload);
    void reply.header('content-type', 'application/json; charset=utf-8');
    return `{"payload":${payloadText},"telemetry":${JSON.stringify(telemetry)}}`;
  }
}
