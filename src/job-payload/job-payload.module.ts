import { Module } from '@nestjs/common';
import { JobPayloadRoute } from './job-payload.route';
import { JobPayloadService } from './job-payload.service';

@Module({ providers: [JobPayloadService, JobPayloadRoute] })
export class JobPayloadModule {}
