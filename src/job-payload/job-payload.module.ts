import { Module } from '@nestjs/common';
import { FlagsModule } from '../flags/flags.module';
import { GrantsModule } from '../grants/grants.module';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { PipelineSpansModule } from '../pipeline-spans/pipeline-spans.module';
import { JobPayloadMetrics } from './job-payload.metrics';
import { JobPayloadRoute } from './job-payload.route';
import { JobPayloadService } from './job-payload.service';

/** The job-payload decorator (SPEC §4): GitLab's pickup call, answered with a grant written to the store. */
@Module({
  imports: [InternalApiModule, GrantsModule, FlagsModule, PipelineSpansModule],
  providers: [JobPayloadMetrics, JobPayloadService, JobPayloadRoute],
})
export class JobPayloadModule {}
