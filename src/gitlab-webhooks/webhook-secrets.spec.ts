import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookSecretsProblem, WebhookSecrets } from './webhook-secrets';

describe('WebhookSecrets (SPEC §10: X-Gitlab-Token, rotated without a restart)', () => {
  let directory: string;
  let file: string;
  let now: number;
  const clock = () => now;
  /** Writes the file as an operator would, with its own modification time: a rewrite within the same millisecond still counts. */
  let version = 0;
  const write = (text: string) => {
    writeFileSync(file, text);
    version += 1;
    utimesSync(file, 1_800_000_000 + version, 1_800_000_000 + version);
  };

  beforeEach(() => {
    directory = mkdtempSync(join(tmpdir(), 'cjt-webhook-secrets-'));
    file = join(directory, 'gitlab_webhook_secret');
    now = 1_000_000;
  });
  afterEach(() => rmSync(directory, { recursive: true, force: true }));

  it('accepts every secret of the file, one a line, blank lines and surrounding spaces ignored', () => {
    write('  old-secret \n\nnew-secret\r\n');
    const secrets = new WebhookSecrets(file, clock);
    expect(secrets.accepts('old-secret')).toBe(true);
    expect(secrets.accepts('new-secret')).toBe(true);
    expect(secrets.accepts('other')).toBe(false);
    expect(secrets.accepts('old-secret\nnew-secret')).toBe(false);
  });

  it('refuses a missing, empty or repeated header', () => {
    write('secret\n');
    const secrets = new WebhookSecrets(file, clock);
    expect(secrets.accepts(undefined)).toBe(false);
    expect(secrets.accepts('')).toBe(false);
    expect(secrets.accepts(['secret', 'secret'])).toBe(false);
  });

  it('reads a rotation from the file within 5 s: the new secret added first, the old one removed after', () => {
    write('old\n');
    const secrets = new WebhookSecrets(file, clock);
    write('old\nnew\n');
    expect(secrets.accepts('new')).toBe(false);
    now += 5000;
    expect(secrets.accepts('new')).toBe(true);
    expect(secrets.accepts('old')).toBe(true);

    write('new\n');
    now += 4999;
    expect(secrets.accepts('old')).toBe(true);
    now += 1;
    expect(secrets.accepts('old')).toBe(false);
    expect(secrets.accepts('new')).toBe(true);
  });

  it('keeps the secrets last read while the file is emptied, unreadable or gone mid-rotation', () => {
    write('kept\n');
    const secrets = new WebhookSecrets(file, clock);
    write('\n');
    now += 5000;
    expect(secrets.accepts('kept')).toBe(true);

    rmSync(file);
    now += 5000;
    expect(secrets.accepts('kept')).toBe(true);

    write('next\n');
    now += 5000;
    expect(secrets.accepts('next')).toBe(true);
    expect(secrets.accepts('kept')).toBe(false);
  });

  it('refuses to start without a secret, naming the file and why', () => {
    write('\n \n');
    expect(() => new WebhookSecrets(file, clock)).toThrow(`GITLAB_WEBHOOK_SECRET_FILE: ${file} holds no secret (one per line)`);
    expect(webhookSecretsProblem(join(directory, 'absent'))).toMatch(/^GITLAB_WEBHOOK_SECRET_FILE: cannot read .*absent: ENOENT/);
    write('secret\n');
    expect(webhookSecretsProblem(file)).toBeUndefined();
  });

  it('says so when the path cannot be read as a file', () => {
    expect(webhookSecretsProblem(directory)).toMatch(/^GITLAB_WEBHOOK_SECRET_FILE: cannot read .*EISDIR/);
  });
});
