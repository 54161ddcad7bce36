import { Module } from '@nestjs/common';
import { OutboxModule } from '../outbox/outbox.module';
import { OutcomeSamplingModule } from '../outcome-sampling/outcome-sampling.module';
import { TracedWorkModule } from '../traced-work/traced-work.module';
import { CicdMetrics } from './cicd.metrics';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';
import { PipelineSpansService } from './pipeline-spans.service';

/**
 * The control-plane spans (SPEC §10): what the decorator, the gateway and GitLab's webhooks tell it through
 * PipelineSpansService, turned into spans for the outbox (or, for a provisional pipeline, for outcome sampling).
 */
@Module({
  imports: [TracedWorkModule, OutboxModule, OutcomeSamplingModule],
  providers: [CicdMetrics, PipelineSpansMetrics, PipelineSpansService],
  exports: [PipelineSpansService],
})
export class PipelineSpansModule {}
