import { Controller, Get, Param, Query, UseGuards } from '@nestjs/common';
import { InternalApiGuard } from '../internal-api/internal-api.guard';
import { CriticalPathAnswer, JobsAnswer, Params, ReadsService, TraceAnswer } from './reads.service';

/**
 * SPEC §12 on the internal port: GitLab's reads of a project's traces, behind the internal API's JWT (SPEC §3).
 * Nest routes, not plain Fastify ones: a read is a person opening a page, not a per-export call, and the guard's
 * cost is nothing beside a trace's. Ids and windows are checked by the service, so each 400 names its field.
 */
@Controller('internal/ci/telemetry/projects/:project_id')
@UseGuards(InternalApiGuard)
export class ReadsController {
  constructor(private readonly reads: ReadsService) {}

  @Get('pipelines/:pipeline_id/trace')
  pipelineTrace(@Param() params: Params, @Query() query: Params): Promise<TraceAnswer> {
    return this.reads.pipelineTrace(params, query);
  }

  @Get('pipelines/:pipeline_id/critical_path')
  criticalPath(@Param() params: Params, @Query() query: Params): Promise<CriticalPathAnswer> {
    return this.reads.criticalPath(params, query);
  }

  @Get('jobs/:job_id/trace')
  jobTrace(@Param() params: Params, @Query() query: Params): Promise<TraceAnswer> {
    return this.reads.jobTrace(params, query);
  }

  @Get('jobs')
  jobs(@Param() params: Params, @Query() query: Params): Promise<JobsAnswer> {
    return this.reads.jobs(params, query);
  }
}
