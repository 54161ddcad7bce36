import { Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { WebhooksConfig } from '../config/sections/webhooks';
import { sendError } from '../observability/http-error';
import { registerPlainPost, refusalHook, RouteRefusal } from '../observability/plain-route';
import { OUTAGE_RETRY_AFTER_SECONDS } from '../otlp/retry-after';
import { GitlabWebhookMetrics } from './gitlab-webhook.metrics';
import { WebhookSecrets } from './webhook-secrets';
import { SpoolReason, SpoolRefusal } from './webhook-spool.metrics';
import { isReadEvent, WebhookSpoolService } from './webhook-spool.service';

export const GITLAB_WEBHOOK_PATH = '/webhooks/gitlab';

/**
 * `POST /webhooks/gitlab` on the internal port (SPEC §10): GitLab's Pipeline and Job events, for a group
 * or project webhook, as a plain Fastify route (registerPlainPost says why). A thin edge: the secret is
 * checked before the body is read, then the hook is taken (WebhookSpoolService): recorded in the outbox,
 * or spooled while the store cannot take it. The collector is never waited for, so GitLab gets its 2xx in
 * milliseconds whatever the collector or the store does (it disables webhooks that keep failing or time
 * out); only bad input and a full spool are refused.
 */
@Injectable()
export class GitlabWebhookRoute implements OnModuleInit {
  private readonly logger = new Logger(GitlabWebhookRoute.name);
  private readonly secrets: WebhookSecrets | undefined;

  constructor(
    config: WebhooksConfig,
    private readonly adapterHost: HttpAdapterHost,
    private readonly spool: WebhookSpoolService,
    private readonly metrics: GitlabWebhookMetrics,
  ) {
    this.secrets = config.secretFile === undefined ? undefined : new WebhookSecrets(config.secretFile);
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
    const intake = await this.spool.take({
      event: String(request.headers['x-gitlab-event']),
      uuid: typeof uuid === 'string' ? uuid : undefined,
      receivedAt: Date.now(),
      body: request.body,
    });
    const answered = (outcome: string) => this.metrics.webhook(event, outcome, (performance.now() - started) / 1000);
    switch (intake.kind) {
      case 'recorded':
        answered('accepted');
        return { status: 'accepted', ...intake.outcome };
      case 'ignored':
        answered('ignored');
        return { status: 'ignored', reason: 'only Pipeline Hook and Job Hook events are read' };
      case 'invalid':
        answered('invalid');
        this.logger.warn(`${event} ${String(uuid ?? '')} refused: ${intake.problem}`);
        sendError(request, reply, 400, `invalid ${event}: ${intake.problem}`);
        return reply;
      case 'spooled':
        answered('spooled');
        void reply.status(202);
        return { status: 'spooled', reason: SPOOLED[intake.reason] };
      case 'refused':
        answered('unavailable');
        sendError(request, reply, 503, REFUSED[intake.reason], { retryAfterSeconds: OUTAGE_RETRY_AFTER_SECONDS });
        return reply;
      default:
        return intake satisfies never;
    }
  }
}

const SPOOLED: Record<SpoolReason, string> = {
  store_unavailable: 'the store is unavailable; the webhook is kept and recorded once it is back',
  store_timeout: 'the store did not answer in time; the webhook is kept and recorded once it answers',
  error: 'the webhook could not be handled now; it is kept and tried again',
  behind_spooled: 'earlier webhooks of its pipeline wait for the store; it is kept and recorded after them',
};

const REFUSED: Record<SpoolRefusal, string> = {
  full: 'the store is unavailable and the webhook spool is full; the webhook was not recorded',
  unwritable: 'the store is unavailable and the webhook spool cannot be written; the webhook was not recorded',
};

/** The `X-Gitlab-Event` as a metric label: the kinds read, or `other` (the header is the caller's to choose). */
function eventOf(request: FastifyRequest): string {
  const event = request.headers['x-gitlab-event'];
  return typeof event === 'string' && isReadEvent(event) ? event : 'other';
}
