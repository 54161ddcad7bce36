import { AppConfig } from '../../src/config/app-config';
import { MetricsService } from '../../src/observability/metrics.service';
import { OutboxStore } from '../../src/outbox/outbox';
import { OutboxDeliverer } from '../../src/outbox/outbox-deliverer';
import { OutcomeSamplingService } from '../../src/outcome-sampling/outcome-sampling.service';
import { CicdMetrics } from '../../src/pipeline-spans/cicd.metrics';
import { PipelineSpansMetrics } from '../../src/pipeline-spans/pipeline-spans.metrics';
import { PipelineSpansService } from '../../src/pipeline-spans/pipeline-spans.service';
import { TracedWorkStore } from '../../src/traced-work/traced-work';
import { TEST_SECRETS } from './internal-api';

/**
 * The pipeline-spans service without Nest, on the sections of `config` it reads and the test secrets. Unless given,
 * its deliverer waits to be asked and it has no outcome sampling (nothing is traced provisionally).
 */
export function pipelineSpansServiceOn(
  config: AppConfig,
  parts: { store: TracedWorkStore; outbox: OutboxStore; deliverer?: OutboxDeliverer; metrics?: MetricsService; outcomeSampling?: OutcomeSamplingService },
): PipelineSpansService {
  const metrics = parts.metrics ?? new MetricsService();
  const cicdMetrics = new CicdMetrics(config.pipelineSpans, metrics, parts.store);
  return new PipelineSpansService(
    config.pipelineSpans,
    config.outbox,
    config.outcomeSampling,
    config.jobPayload,
    config.webhooks,
    config.store,
    TEST_SECRETS,
    parts.store,
    parts.outbox,
    parts.deliverer ?? ({ kick: () => undefined } as unknown as OutboxDeliverer),
    new PipelineSpansMetrics(metrics),
    parts.outcomeSampling ?? ({} as OutcomeSamplingService),
    cicdMetrics,
  );
}
