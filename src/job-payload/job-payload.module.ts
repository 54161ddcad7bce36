import { Module } from '@nestjs/common';
import { JobPayloadController } from './job-payload.controller';
import { JobPayloadService } from './job-payload.service';

@Module({ controllers: [JobPayloadController], providers: [JobPayloadService] })
export class JobPayloadModule {}
