import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { sendError } from '../observability/http-error';
import { registerPlainPost, refusalHook, RouteRefusal } from '../observability/plain-route';
import { OUTAGE_RETRY_AFTER_SECONDS } from '../observability/retry-after';
import { parseJobHook, parsePipelineHook, WebhookEvent, WebhookPayloadError } from './gitlab-webhook';
import { PipelineSpansMetrics } from './pipeline-spans.metrics';
import { PipelineSpansService } from './pipeline-spans.service';
import { WebhookSecrets } from './webhook-secrets';

export const GITLAB_WEBHOOK_PATH = '/webhooks/gitlab';

/** The event kinds SPEC §10 reads, by GitLab's `X-Gitlab-Event` header. */
const PARSERS: Record<string, (body: unknown, receivedAt: number) => WebhookEvent> = {
  'Pipeline Hook': parsePipelineHook,
  'Job Hook': parseJobHook,
};

/**
 * `POST /webhooks/gitlab` on the internal port (SPEC §10): GitLab's Pipeline and Job events, for a group
 * or project webhook, as a plain Fastify route (registerPlainPost says why). A thin edge: the secret is checked before the body is read, the payload parsed, and
 * the spans it implies written to the outbox; the collector is never waited for, so GitLab gets its 2xx in
 * milliseconds whatever the collector does (it disables webhooks that keep failing or time out).
 */
@Injectable()
export class GitlabWebhookRoute implements OnModuleInit {
  private readonly logger = new Logger(GitlabWebhookRoute.name);
  private readonly secrets: WebhookSecrets | undefined;

  constructor(
    @Inject(APP_CONFIG) config: AppConfig,
    private readonly adapterHost: HttpAdapterHost,
    private readonly pipelineSpans: PipelineSpansService,
    private readonly metrics: PipelineSpansMetrics,
  ) {
    this.secrets = config.GITLAB_WEBHOOK_SECRET_FILE === undefined ? undefined : new WebhookSecrets(config.GITLAB_WEBHOOK_SECRET_FILE);
  }

  onModuleInit(): void {
    registerPlainPost(this.adapterHost, {
      url: GITLAB_WEBHOOK_PATH,
      // A caller without the secret never gets a payload parsed.
      onRequest: refusalHook(
        (request) => this.refusal(request),
        (request, refusal) => {
          this.metrics.webhook(eventOf(request), 'unauthorized');
          this.logger.log(`webhook refused: ${refusal.error}`);
        },
      ),
      handler: (request, reply) => this.receive(request, reply),
    });
  }

  private refusal(request: FastifyRequest): RouteRefusal | undefined {
    if (this.secrets === undefined) return { error: 'webhooks are not enabled on this service (set GITLAB_WEBHOOK_SECRET_FILE)' };
    const token = request.headers['x-gitlab-token'];
    if (token === undefined) return { error: 'missing X-Gitlab-Token: set the secret token of the GitLab webhook' };
    return this.secrets.accepts(token) ? undefined : { error: 'invalid X-Gitlab-Token' };
  }

  private async receive(request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const started = performance.now();
    const event = eventOf(request);
    const uuid = request.headers['x-gitlab-event-uuid'];
    const answered = (outcome: string) => this.metrics.webhook(event, outcome, (performance.now() - started) / 1000);
    const parse = event in PARSERS ? PARSERS[event] : undefined;
    if (parse === undefined) {
      answered('ignored');
      return { status: 'ignored', reason: 'only Pipeline Hook and Job Hook events are read' };
    }
    let parsed: WebhookEvent;
    try {
      parsed = parse(request.body, Date.now());
    } catch (error) {
      if (!(error instanceof WebhookPayloadError)) throw error;
      answered('invalid');
      this.logger.warn(`${event} ${String(uuid ?? '')} refused: ${error.message}`);
      sendError(request, reply, 400, `invalid ${event}: ${error.message}`);
      return reply;
    }
    try {
      const outcome = await this.pipelineSpans.handleWebhook(parsed);
      answered('accepted');
      return { status: 'accepted', ...outcome };
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      answered('unavailable');
      this.logger.warn(`${event} ${String(uuid ?? '')} not recorded, the store is unavailable: ${error.message}`);
      sendError(request, reply, 503, 'the store is unavailable; the webhook was not recorded', { retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS });
      return reply;
    }
  }
}

/** The `X-Gitlab-Event` as a metric label: the kinds read, or `other` (the header is the caller's to choose). */
function eventOf(request: FastifyRequest): string {
  const event = request.headers['x-gitlab-event'];
  return typeof event === 'string' && event in PARSERS ? event : 'other';
}
