import { Logger, Module } from '@nestjs/common';
import { RunnerAuthConfig } from '../config/sections/runner-auth';
import { GrantsModule } from '../grants/grants.module';
import { LimitsModule } from '../limits/limits.module';
import { ReadinessChecks } from '../observability/readiness-checks';
import { JobTokenKeys, jobTokenKeys, JobTokenVerifier } from './job-token-verifier';
import { JOB_TOKEN_VERIFIER } from './runner-auth.constants';
import { RunnerAuthMetrics } from './runner-auth.metrics';
import { RunnerAuthService } from './runner-auth.service';

/**
 * Configured keys that cannot be read make the service unready, with one log line when that starts
 * and one when it ends (SPEC §5). Checked once at start too, so an unreachable JWKS URL is logged
 * before the first probe asks; an unreadable file has already stopped the start (main.ts).
 */
function watchJobTokenKeys(keys: JobTokenKeys, readiness: ReadinessChecks): void {
  const logger = new Logger('JobTokenKeys');
  let reported: string | undefined;
  const check = async () => {
    const problem = await keys.problem();
    if (problem !== reported) {
      if (problem === undefined) logger.log('job token keys readable again');
      else logger.error(`${problem}: JWT job tokens are answered 503 until this is fixed`);
      reported = problem;
    }
    return problem === undefined;
  };
  readiness.register('job_token_keys', check);
  void check();
}

/**
 * The auth decision (SPEC §5, §6): runner credentials in, one job's identity or a refusal out. Shared by
 * the auth endpoint and, in a ROLE=all process, the gateway; a ROLE=gateway process never loads it.
 */
@Module({
  imports: [GrantsModule, LimitsModule],
  providers: [
    {
      provide: JOB_TOKEN_VERIFIER,
      inject: [RunnerAuthConfig, ReadinessChecks],
      useFactory: (config: RunnerAuthConfig, readiness: ReadinessChecks) => {
        const keys = jobTokenKeys({ file: config.jobTokenJwksFile, url: config.jobTokenJwksUrl });
        if (keys !== undefined) watchJobTokenKeys(keys, readiness);
        return new JobTokenVerifier(keys?.getKey, config.jobTokenIssuer);
      },
    },
    RunnerAuthMetrics,
    RunnerAuthService,
  ],
  exports: [RunnerAuthService],
})
export class RunnerAuthModule {}
