import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';

/** How often the secret file may be looked at again for a rotation, at most. */
const RECHECK_MS = 5000;

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * The secrets GitLab sends as `X-Gitlab-Token` (SPEC §10), one per line so that a new one can be added
 * before the old one is removed. The file is read again when it changes (checked at most every 5 s), so a
 * rotation needs no restart. Compared as SHA-256 digests in constant time against every secret, so
 * neither a token's length nor which secret it matched shows in the answer's timing. Never logged.
 */
export class WebhookSecrets {
  private digests: Buffer[] = [];
  private modifiedAt = -1;
  private checkedAt = -Infinity;

  constructor(
    private readonly file: string,
    private readonly now: () => number = Date.now,
  ) {
    this.reload();
    if (this.digests.length === 0) throw new Error(`GITLAB_WEBHOOK_SECRET_FILE: ${file} holds no secret (one per line)`);
  }

  accepts(token: string | string[] | undefined): boolean {
    if (this.now() - this.checkedAt >= RECHECK_MS) this.reload();
    if (typeof token !== 'string' || token.length === 0) return false;
    const presented = digest(token);
    let matched = false;
    for (const secret of this.digests) matched = timingSafeEqual(secret, presented) || matched;
    return matched;
  }

  private reload(): void {
    this.checkedAt = this.now();
    try {
      const modifiedAt = statSync(this.file).mtimeMs;
      if (modifiedAt === this.modifiedAt) return;
      const secrets = readFileSync(this.file, 'utf8')
        .split('\n')
        .map((line) => line.trim())
        .filter((line) => line.length > 0);
      // A file emptied or unreadable mid-rotation keeps the secrets last read: webhooks keep working.
      if (secrets.length === 0) return;
      this.digests = secrets.map(digest);
      this.modifiedAt = modifiedAt;
    } catch (error) {
      if (this.digests.length === 0) throw new Error(`GITLAB_WEBHOOK_SECRET_FILE: cannot read ${this.file}: ${(error as Error).message}`);
    }
  }
}

/** Why the webhook secret file cannot be used (one line for the start-up), or undefined when it can. */
export function webhookSecretsProblem(file: string): string | undefined {
  try {
    new WebhookSecrets(file);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}
