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
