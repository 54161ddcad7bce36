import { Module } from '@nestjs/common';
import { FlagsModule } from '../flags/flags.module';
import { FlagsService } from '../flags/flags.service';
import { GrantsModule } from '../grants/grants.module';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { OutcomeSamplingModule } from '../outcome-sampling/outcome-sampling.module';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { PipelineSpansModule } from '../pipeline-spans/pipeline-spans.module';
import { TracedWorkModule } from '../traced-work/traced-work.module';
import { JobPayloadMetrics } from './job-payload.metrics';
import { JobPayloadRoute } from './job-payload.route';
import { JobPayloadService } from './job-payload.service';

/** The job-payload decorator (SPEC §4): GitLab's pickup call, answered with a grant written to the store. */
@Module({
  imports: [InternalApiModule, GrantsModule, TracedWorkModule, FlagsModule, PipelineSpansModule, OutcomeSamplingModule],
  providers: [JobPayloadMetrics, JobPayloadService, JobPayloadRoute],
})
export class JobPayloadModule {
  constructor(flags: FlagsService, outcomeSampling: OutcomeSamplingService) {
    // The decorator's side evaluates the outcome-sampling toggle; readiness and the start-up warning read it.
    outcomeSampling.watchToggle(() => flags.outcomeSamplingToggled());
  }
}
