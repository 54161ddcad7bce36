import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface WebhookSecret {
  readonly secret: string;
  /** GITLAB_WEBHOOK_SECRET_FILE for the service. */
  readonly file: string;
}

/** A webhook secret file as an operator writes it: one secret per line. */
export function makeWebhookSecret(secret = `whsec-${randomUUID()}`): WebhookSecret {
  const file = join(mkdtempSync(join(tmpdir(), 'cjt-webhook-')), 'gitlab_webhook_secret');
  writeFileSync(file, `${secret}\n`);
  return { secret, file };
}

export interface Delivered {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly body: Record<string, unknown>;
  /** Milliseconds from sending to the whole answer. */
  readonly elapsedMs: number;
}

/**
 * One delivery as GitLab makes it: POST with `X-Gitlab-Event`, `X-Gitlab-Token`, `X-Gitlab-Event-UUID`
 * (the same UUID again for a redelivery) and the JSON body.
 */
export async function deliverWebhook(
  serviceUrl: string,
  event: 'Pipeline Hook' | 'Job Hook' | string,
  body: unknown,
  options: { token?: string; uuid?: string } = {},
): Promise<Delivered> {
  const started = performance.now();
  const response = await fetch(`${serviceUrl}/webhooks/gitlab`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-gitlab-event': event,
      'x-gitlab-event-uuid': options.uuid ?? randomUUID(),
      'x-gitlab-instance': 'https://gitlab.example.com',
      'user-agent': 'GitLab/18.6.0',
      ...(options.token === undefined ? {} : { 'x-gitlab-token': options.token }),
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? undefined,
    body: text.length > 0 ? (JSON.parse(text) as Record<string, unknown>) : {},
    elapsedMs: performance.now() - started,
  };
}
