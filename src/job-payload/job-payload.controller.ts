import { Body, Controller, HttpCode, Post, UseGuards } from '@nestjs/common';
import { InternalApiGuard } from '../token-auth/internal-api.guard';
import { JobPayloadRequest } from './dto/job-payload-request.dto';
import { JobPayloadValidationPipe } from './job-payload-validation.pipe';
import { DecoratedJobPayload, JobPayloadService } from './job-payload.service';

@Controller('internal/ci/telemetry')
@UseGuards(InternalApiGuard)
export class JobPayloadController {
  constructor(private readonly jobPayloads: JobPayloadService) {}

  @Post('job_payload')
  @HttpCode(200)
  decorate(@Body(JobPayloadValidationPipe) request: JobPayloadRequest): Promise<DecoratedJobPayload> {
    return this.jobPayloads.decorate(request);
  }
}
