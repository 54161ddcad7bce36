import { Body, Controller, Get, Header, HttpCode, Param, Post, Query, UseGuards } from '@nestjs/common';
import { InternalApiGuard } from '../internal-api/internal-api.guard';
import { Params, ReadsService } from './reads.service';

const JSON_BODY = 'application/json; charset=utf-8';

/**
 * SPEC §12 on the internal port: GitLab's reads of a project's traces, behind the internal API's JWT (SPEC §3).
 * Nest routes, not plain Fastify ones: a read is a person opening a page, not a per-export call, and the guard's
 * cost is nothing beside a trace's. Ids and windows are checked by the service, so each 400 names its field. Each
 * answer arrives as JSON already encoded (off this thread), and is sent as it is: the shapes are those of
 * src/reads/read-answers.ts (TraceAnswer, CriticalPathAnswer, JobsAnswer) and src/across/ (SPEC §13), as openapi/openapi.yaml has them.
 */
@Controller('internal/ci/telemetry/projects/:project_id')
@UseGuards(InternalApiGuard)
export class ReadsController {
  constructor(private readonly reads: ReadsService) {}

  @Get('pipelines/:pipeline_id/trace')
  @Header('content-type', JSON_BODY)
  pipelineTrace(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.pipelineTrace(params, query);
  }

  @Get('pipelines/:pipeline_id/critical_path')
  @Header('content-type', JSON_BODY)
  criticalPath(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.criticalPath(params, query);
  }

  @Get('jobs/:job_id/trace')
  @Header('content-type', JSON_BODY)
  jobTrace(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.jobTrace(params, query);
  }

  @Get('pipelines/:pipeline_id/compare')
  @Header('content-type', JSON_BODY)
  compare(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.compare(params, query);
  }

  @Get('regressions')
  @Header('content-type', JSON_BODY)
  regressions(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.regressions(params, query);
  }

  @Get('waste')
  @Header('content-type', JSON_BODY)
  waste(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.waste(params, query);
  }

  @Get('runners/queue')
  @Header('content-type', JSON_BODY)
  runnerQueue(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.runnerQueue(params, query);
  }

  /** A question, not a change: POST only because its arguments are a body. */
  @Post('runners/what_if')
  @HttpCode(200)
  @Header('content-type', JSON_BODY)
  whatIf(@Param() params: Params, @Body() body: unknown): Promise<Buffer> {
    return this.reads.whatIf(params, body);
  }

  @Get('jobs')
  @Header('content-type', JSON_BODY)
  jobs(@Param() params: Params, @Query() query: Params): Promise<Buffer> {
    return this.reads.jobs(params, query);
  }
}
