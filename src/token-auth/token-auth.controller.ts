import { Controller, Delete, HttpCode, Inject, NotFoundException, Param, ParseIntPipe, Post, Req, Res, UseGuards } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { APP_LOGGER } from '../observability/logger';
import { sendError } from '../observability/http-error';
import { forwardedCredential } from '../runner-auth/runner-credential';
import { AcceptsCallerKey } from '../internal-api/accepts-caller-key.decorator';
import { InternalApiGuard } from '../internal-api/internal-api.guard';
import { AuthOutcome, identityBodyOf } from '../runner-auth/auth-outcome';
import { DecisionCache } from '../runner-auth/decision-cache';
import { RunnerAuthService } from '../runner-auth/runner-auth.service';
import { AUTH_DECISIONS } from './token-auth.constants';

@Controller('internal/ci/telemetry')
@UseGuards(InternalApiGuard)
export class TokenAuthController {
  constructor(
    private readonly runnerAuth: RunnerAuthService,
    @Inject(AUTH_DECISIONS) private readonly decisions: DecisionCache,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * Runner credentials come as the runner sent them, so nginx can pass its request's headers through;
   * a capability URL comes as the export's path in `X-Original-URI`.
   */
  @Post('auth')
  @AcceptsCallerKey()
  async authenticate(@Req() request: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const { decision, ageMs } = await this.decisions.decide(forwardedCredential(request.headers));
    // Every refusal, reused or not, with its reason (the request id comes with every line): an
    // operator must be able to tell why a runner is refused without ever seeing its tokens (SPEC §5).
    if (decision.kind !== 'allowed') this.logger.info({ refusal: decision.kind, reason: decision.reason }, 'auth refused');
    sendAuthOutcome(request, reply, decision, ageMs);
  }

  /** GitLab calls this when a job finishes or is canceled; the grant ends after the grace. */
  @Delete('grants/:jobId')
  @HttpCode(200)
  async revoke(@Param('jobId', ParseIntPipe) jobId: number): Promise<{ job_id: number; revoked_at: string }> {
    const grant = await this.runnerAuth.revoke(jobId);
    if (grant === null) throw new NotFoundException(`no grant for job ${jobId}`);
    return { job_id: jobId, revoked_at: new Date(grant.revokedAt!).toISOString() };
  }
}

/** `ageMs`: how long ago the decision was made, so a reused one promises only what is left of its max-age. */
function sendAuthOutcome(request: FastifyRequest, reply: FastifyReply, outcome: AuthOutcome, ageMs: number): void {
  // Only a positive decision may be reused; a refusal must be asked again (the gateway caps its own).
  if (outcome.kind !== 'allowed') void reply.header('cache-control', 'no-store');
  switch (outcome.kind) {
    case 'allowed':
      void reply
        .header('cache-control', `private, max-age=${Math.max(0, outcome.maxAgeSeconds - Math.ceil(ageMs / 1000))}`)
        .status(200)
        .send(identityBodyOf(outcome.identity));
      return;
    case 'unauthenticated':
      return sendError(request, reply, 401, outcome.reason);
    case 'forbidden':
      return sendError(request, reply, 403, outcome.reason);
    case 'rate_limited':
      return sendError(request, reply, 429, 'runner rate limit exceeded', { retryAfterSeconds: outcome.retryAfterSeconds });
    case 'unavailable':
      return sendError(request, reply, 503, outcome.reason, { retryAfterSeconds: outcome.retryAfterSeconds });
    default: {
      const unreachable: never = outcome;
      throw new Error(`unhandled auth outcome ${JSON.stringify(unreachable)}`);
    }
  }
}
