import { CanActivate, ExecutionContext, Inject, Injectable, UnauthorizedException } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from './internal-api-token';
import { INTERNAL_API_VERIFIER } from './token-auth.constants';

/** Every `/internal/*` route: a valid GitLab-signed JWT or 401 (SPEC §3). */
@Injectable()
export class InternalApiGuard implements CanActivate {
  constructor(@Inject(INTERNAL_API_VERIFIER) private readonly verifier: InternalApiTokenVerifier) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const request = context.switchToHttp().getRequest<FastifyRequest>();
    const header = request.headers[INTERNAL_API_HEADER];
    if (typeof header !== 'string' || header.length === 0) {
      throw new UnauthorizedException(`missing ${INTERNAL_API_HEADER} header`);
    }
    try {
      await this.verifier.verify(header);
    } catch {
      // Which check failed is not the caller's business: one answer for forged, expired, stale and foreign.
      throw new UnauthorizedException(`invalid ${INTERNAL_API_HEADER} token`);
    }
    return true;
  }
}
