import { Module } from '@nestjs/common';
import { CollectorModule } from '../collector/collector.module';
import { ReadinessChecks } from '../observability/readiness-checks';
import { OutboxModule } from '../outbox/outbox.module';
import { OutcomeSamplingMetrics } from './outcome-sampling.metrics';
import { OutcomeSamplingService } from './outcome-sampling.service';
import { ParkingModule } from './parking/parking.module';

/**
 * Outcome-based sampling (SPEC §11) in every role that has a store: parking, decisions, the sweep, and the delivery
 * of kept pipelines, registered with the outbox as its `parked` entries.
 */
@Module({
  imports: [ParkingModule, OutboxModule, CollectorModule],
  providers: [OutcomeSamplingMetrics, OutcomeSamplingService],
  exports: [OutcomeSamplingService],
})
export class OutcomeSamplingModule {
  constructor(service: OutcomeSamplingService, readiness: ReadinessChecks) {
    // Degraded, never failing: a full budget only makes provisional pipelines fall back to the head decision, and a
    // toggle without webhooks only means nothing is traced provisionally; neither must take pickups out of rotation.
    readiness.register('outcome_sampling', async () => {
      if (service.toggledWithoutWebhooks()) return 'degraded';
      await service.readUsage();
      return service.budgetFull() ? 'degraded' : true;
    });
  }
}
