import { CanActivate, ExecutionContext, Inject, Injectable, UnauthorizedException } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import { CALLER_KEY_HEADER, CallerKeys } from './caller-keys';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from './internal-api-token';
import { ACCEPTS_CALLER_KEY, CALLER_KEYS, INTERNAL_API_VERIFIER } from './internal-api.constants';

/**
 * Every `/internal/*` route: a valid GitLab-signed JWT or 401 (SPEC §3). Routes marked
 * `@AcceptsCallerKey()` also take a configured caller key, for gateways that cannot sign JWTs.
 */
@Injectable()
export class InternalApiGuard implements CanActivate {
  constructor(
    @Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier,
    @Inject(CALLER_KEYS) private readonly callerKeys: CallerKeys,
    private readonly reflector: Reflector,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const request = context.switchToHttp().getRequest<FastifyRequest>();
    const callerKey = request.headers[CALLER_KEY_HEADER];
    if (typeof callerKey === 'string' && this.reflector.get<boolean>(ACCEPTS_CALLER_KEY, context.getHandler())) {
      if (this.callerKeys.accepts(callerKey)) return true;
      throw new UnauthorizedException(`invalid ${CALLER_KEY_HEADER}`);
    }
    const refusal = await this.verifier.refusal(request.headers[INTERNAL_API_HEADER]);
    if (refusal !== undefined) throw new UnauthorizedException(refusal);
    return true;
  }
}
