import { Module } from '@nestjs/common';
import { WebhooksConfig } from '../config/sections/webhooks';
import { ReadinessChecks } from '../observability/readiness-checks';
import { PipelineSpansModule } from '../pipeline-spans/pipeline-spans.module';
import { GitlabWebhookMetrics } from './gitlab-webhook.metrics';
import { GitlabWebhookRoute } from './gitlab-webhook.route';
import { WebhookSpoolMetrics } from './webhook-spool.metrics';
import { WebhookSpoolService } from './webhook-spool.service';

/** GitLab's webhooks on the internal port of a control process (ROLE=all or control): route, secrets, parsers and spool (SPEC §10 "Sources"). */
@Module({
  imports: [PipelineSpansModule],
  providers: [GitlabWebhookMetrics, WebhookSpoolMetrics, WebhookSpoolService, GitlabWebhookRoute],
})
export class GitlabWebhooksModule {
  constructor(config: WebhooksConfig, metrics: WebhookSpoolMetrics, readiness: ReadinessChecks) {
    // Without a webhook secret no hook is accepted, so none is ever spooled: nothing to report.
    if (config.secretFile === undefined) return;
    // Hooks waiting for the store are safe on disk; leaving rotation would only turn GitLab's next ones away.
    readiness.register('webhook_spool', () => (metrics.lastDepth().hooks > 0 ? 'degraded' : true));
  }
}
