import { CanActivate, ExecutionContext, Inject, Injectable, UnauthorizedException } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { APP_LOGGER } from '../observability/logger';
import { internalApiCallerRefusal, logCallerRefusal } from './internal-api-caller';
import { InternalApiTokenVerifier } from './internal-api-token';
import { INTERNAL_API_VERIFIER } from './internal-api.constants';

/**
 * Every `/internal/*` route served by a Nest controller: a valid GitLab-signed JWT or 401 (SPEC §3).
 * Caller keys are for the auth endpoint only, a plain Fastify route (token-auth.route.ts).
 */
@Injectable()
export class InternalApiGuard implements CanActivate {
  constructor(
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const request = context.switchToHttp().getRequest<FastifyRequest>();
    const refusal = await internalApiCallerRefusal(request.headers, this.verifier);
    if (refusal === undefined) return true;
    logCallerRefusal(this.logger, refusal);
    throw new UnauthorizedException(refusal.error);
  }
}
