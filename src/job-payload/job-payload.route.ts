import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { callerCheckHook } from '../internal-api/internal-api-caller';
import { INTERNAL_API_VERIFIER } from '../internal-api/internal-api.constants';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from '../internal-api/internal-api-token';
import { sendError } from '../observability/http-error';
import { APP_LOGGER } from '../observability/logger';
import { registerPlainPost } from '../observability/plain-route';
import { SAMPLED_ACCESS_LOG } from '../observability/request-hooks';
import { changesAnswer, decoratedAnswer, JobPayloadBody, prefersChanges, useJobPayloadParser } from './job-payload-body';
import { loadJobPayloadRequestSchema, parseJobPayloadRequest } from './job-payload-request';
import { JobPayloadService } from './job-payload.service';

export const JOB_PAYLOAD_PATH = '/internal/ci/telemetry/job_payload';

/**
 * `POST /internal/ci/telemetry/job_payload` (SPEC §4) as a plain Fastify route (registerPlainPost says
 * why: GitLab calls it on every job pickup). The handler is one call to JobPayloadService; its 400s
 * carry `fields`.
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
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    private readonly jobPayloads: JobPayloadService,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    loadJobPayloadRequestSchema();
    registerPlainPost(this.adapterHost, {
      url: JOB_PAYLOAD_PATH,
      // One access line per pickup cost about 15 µs of CPU (a fifth of what the decorator adds to a bare route) to
      // say what ci_job_telemetry_decisions_total already counts: answers below 400 are logged at most once per
      // EXPORT_SUCCESS_LOG_INTERVAL_MS with how many went unlogged, as the auth endpoint's are; refusals, bad
      // requests and failures each get their line, and a pickup left degraded its warning with the job id.
      config: SAMPLED_ACCESS_LOG,
      bodyParsers: useJobPayloadParser,
      // An unauthenticated caller never gets up to 8 MiB parsed.
      onRequest: callerCheckHook((headers) => this.verifier.refusal(headers[INTERNAL_API_HEADER]), this.logger),
      handler: (request, reply) => this.decorate(request, reply),
    });
  }

  private async decorate(request: FastifyRequest, reply: FastifyReply): Promise<string | FastifyReply> {
    const body = request.body as JobPayloadBody | undefined;
    if (body === undefined) {
      sendError(request, reply, 415, 'a JSON body is required (content-type: application/json)');
      return reply;
    }
    // A caller holding the payload may ask for the changes alone: neither sends nor receives its megabytes again.
    const changesOnly = prefersChanges(request.headers.prefer);
    const parsed = parseJobPayloadRequest(body.json, !changesOnly);
    if (parsed.problems !== undefined) {
      const error = `invalid request: ${parsed.problems.flatMap((problem) => problem.problems).join('; ')}`;
      sendError(request, reply, 400, error, { details: { fields: parsed.problems } });
      return reply;
    }
    const decoration = await this.jobPayloads.decorate(parsed.request);
    void reply.header('content-type', 'application/json; charset=utf-8');
    if (changesOnly) {
      void reply.header('preference-applied', 'return=minimal');
      return changesAnswer(parsed.request.job.id, decoration);
    }
    return decoratedAnswer(body, parsed.request.payload!, decoration);
  }
}
