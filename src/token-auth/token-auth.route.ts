import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { CallerKeys } from '../internal-api/caller-keys';
import { callerCheckHook, internalApiCallerRefusal } from '../internal-api/internal-api-caller';
import { CALLER_KEYS, INTERNAL_API_VERIFIER } from '../internal-api/internal-api.constants';
import { InternalApiTokenVerifier } from '../internal-api/internal-api-token';
import { sendError } from '../observability/http-error';
import { SAMPLED_ACCESS_LOG } from '../observability/request-hooks';
import { APP_LOGGER } from '../observability/logger';
import { registerPlainPost } from '../observability/plain-route';
import { AuthOutcome, identityBodyOf, JobIdentity, refusalAnswer } from '../runner-auth/auth-outcome';
import { CachedDecision, DecisionCache } from '../runner-auth/decision-cache';
import { forwardedCredential } from '../runner-auth/runner-credential';
import { AUTH_DECISIONS } from './token-auth.constants';

export const AUTH_PATH = '/internal/ci/telemetry/auth';

/**
 * The answer's JSON per identity: a reused decision hands back the same identity object, so nginx's
 * every export does not serialize the same six fields again.
 */
const identityJson = new WeakMap<JobIdentity, string>();
function identityJsonOf(identity: JobIdentity): string {
  let json = identityJson.get(identity);
  if (json === undefined) identityJson.set(identity, (json = JSON.stringify(identityBodyOf(identity))));
  return json;
}

/**
 * `POST /internal/ci/telemetry/auth` (SPEC §5) as a plain Fastify route (registerPlainPost says why:
 * nginx `auth_request` calls it on every export).
 */
@Injectable()
export class TokenAuthRoute implements OnModuleInit {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    @Inject(CALLER_KEYS) private readonly callerKeys: CallerKeys,
    @Inject(AUTH_DECISIONS) private readonly decisions: DecisionCache,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    registerPlainPost(this.adapterHost, {
      url: AUTH_PATH,
      config: SAMPLED_ACCESS_LOG,
      // The internal-API JWT, or a caller key for gateways that cannot sign one (SPEC §3).
      onRequest: callerCheckHook((headers) => internalApiCallerRefusal(headers, this.verifier, this.callerKeys), this.logger),
      handler: (request, reply) => this.authenticate(request, reply),
    });
  }

  /**
   * Runner credentials come as the runner sent them, so nginx can pass its request's headers through;
   * a capability URL comes as the export's path in `X-Original-URI`. A reused decision is answered
   * synchronously (undefined to Fastify: the reply is sent); a lookup through the returned promise.
   */
  private authenticate(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> | undefined {
    const decided = this.decisions.decide(forwardedCredential(request.headers));
    if (decided instanceof Promise) return decided.then((settled) => this.answer(request, reply, settled));
    this.answer(request, reply, decided);
    return undefined;
  }

  private answer(request: FastifyRequest, reply: FastifyReply, { decision, ageMs }: CachedDecision): FastifyReply {
    // Every refusal, reused or not, with its reason (the request id comes with every line): an
    // operator must be able to tell why a runner is refused without ever seeing its tokens (SPEC §5).
    if (decision.kind !== 'allowed') this.logger.info({ refusal: decision.kind, reason: decision.reason }, 'auth refused');
    sendAuthOutcome(request, reply, decision, ageMs);
    return reply;
  }
}

/** `ageMs`: how long ago the decision was made, so a reused one promises only what is left of its max-age. */
function sendAuthOutcome(request: FastifyRequest, reply: FastifyReply, outcome: AuthOutcome, ageMs: number): void {
  if (outcome.kind === 'allowed') {
    void reply
      .header('cache-control', `private, max-age=${Math.max(0, outcome.maxAgeSeconds - Math.ceil(ageMs / 1000))}`)
      .status(200)
      .type('application/json; charset=utf-8')
      .send(identityJsonOf(outcome.identity));
    return;
  }
  // Only a positive decision may be reused; a refusal must be asked again (the gateway caps its own).
  void reply.header('cache-control', 'no-store');
  const answer = refusalAnswer(outcome);
  sendError(request, reply, answer.httpStatus, answer.message, { retryAfterSeconds: answer.retryAfterSeconds });
}
