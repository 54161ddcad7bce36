import { Controller, Delete, HttpCode, NotFoundException, Param, ParseIntPipe, UseGuards } from '@nestjs/common';
import { InternalApiGuard } from '../internal-api/internal-api.guard';
import { RunnerAuthService } from '../runner-auth/runner-auth.service';

/** Grant revocation. The auth endpoint itself, called on every export, is a plain route (token-auth.route.ts). */
@Controller('internal/ci/telemetry')
@UseGuards(InternalApiGuard)
export class TokenAuthController {
  constructor(private readonly runnerAuth: RunnerAuthService) {}

  /** GitLab calls this when a job finishes or is canceled; the grant ends after the grace. */
  @Delete('grants/:jobId')
  @HttpCode(200)
  async revoke(@Param('jobId', ParseIntPipe) jobId: number): Promise<{ job_id: number; revoked_at: string }> {
    const grant = await this.runnerAuth.revoke(jobId);
    if (grant === null) throw new NotFoundException(`no grant for job ${jobId}`);
    return { job_id: jobId, revoked_at: new Date(grant.revokedAt!).toISOString() };
  }
}
