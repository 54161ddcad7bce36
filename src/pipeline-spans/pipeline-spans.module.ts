import { Inject, Module } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { CollectorModule } from '../collector/collector.module';
import { TracedWorkModule } from '../traced-work/traced-work.module';
import { OutcomeSamplingModule } from '../outcome-sampling/outcome-sampling.module';
import { ReadinessChecks } from '../observability/readiness-checks';
import { GitlabWebhookRoute } from './gitlab-webhook.route';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';
import { PipelineSpansService } from './pipeline-spans.service';
import { SpanOutboxDeliverer } from './span-outbox-deliverer';
import { WebhookSpoolMetrics } from './webhook-spool.metrics';
import { WebhookSpoolService } from './webhook-spool.service';

/**
 * The control-plane spans (SPEC §10): what the decorator and the gateway tell it through
 * PipelineSpansService, and the outbox's delivery to the collector, in every role that has a store.
 */
@Module({
  imports: [TracedWorkModule, CollectorModule, OutcomeSamplingModule],
  providers: [PipelineSpansMetrics, SpanOutboxDeliverer, PipelineSpansService],
  exports: [PipelineSpansService, PipelineSpansMetrics],
})
export class PipelineSpansModule {
  constructor(@Inject(APP_CONFIG) config: AppConfig, metrics: PipelineSpansMetrics, readiness: ReadinessChecks) {
    // A full outbox refuses new spans but must not take the replica out of rotation: pickups would fail.
    readiness.register('outbox', () => (metrics.lastDepth().spans >= config.OUTBOX_MAX_SPANS ? 'degraded' : true));
  }
}

/** GitLab's webhooks on the internal port of a control process (ROLE=all or control), and their spool. */
@Module({
  imports: [PipelineSpansModule],
  providers: [WebhookSpoolMetrics, WebhookSpoolService, GitlabWebhookRoute],
})
export class GitlabWebhookModule {
  constructor(@Inject(APP_CONFIG) config: AppConfig, metrics: WebhookSpoolMetrics, readiness: ReadinessChecks) {
    // Without a webhook secret no hook is accepted, so none is ever spooled: nothing to report.
    if (config.GITLAB_WEBHOOK_SECRET_FILE === undefined) return;
    // Hooks waiting for the store are safe on disk; leaving rotation would only turn GitLab's next ones away.
    readiness.register('webhook_spool', () => (metrics.lastDepth().hooks > 0 ? 'degraded' : true));
  }
}
