import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Secrets } from '../../src/config/secrets';
import { signInternalApiToken } from '../../src/internal-api/internal-api-token';

export const ISSUER = 'gitlab';

export interface SecretFiles {
  readonly dir: string;
  readonly internalApiSecret: Buffer;
  readonly traceKey: Buffer;
  readonly internalApiSecretFile: string;
  readonly traceKeyFile: string;
  readonly capabilityKeyFile: string;
}

/** Fresh secrets for one test world, written as GitLab writes its own: base64 in a file. */
export function makeSecretFiles(): SecretFiles {
  const dir = mkdtempSync(join(tmpdir(), 'cjt-secrets-'));
  const internalApiSecret = randomBytes(32);
  const traceKey = randomBytes(32);
  const internalApiSecretFile = join(dir, 'internal_api_secret');
  const traceKeyFile = join(dir, 'trace_key');
  writeFileSync(internalApiSecretFile, internalApiSecret.toString('base64'));
  writeFileSync(traceKeyFile, traceKey.toString('base64'));
  const capabilityKeyFile = join(dir, 'capability_key');
  writeFileSync(capabilityKeyFile, randomBytes(32).toString('base64'));
  return { dir, internalApiSecret, traceKey, internalApiSecretFile, traceKeyFile, capabilityKeyFile };
}

/** Fixed, distinct keys for unit tests that build a service by hand (no files, no Redis credentials). */
export const TEST_SECRETS: Secrets = {
  internalApiSecret: Buffer.alloc(32, 1),
  traceKey: Buffer.alloc(32, 2),
  tokenDigestKey: Buffer.alloc(32, 3),
  capabilityKeys: [Buffer.alloc(32, 4)],
  redis: {},
};

export async function internalApiHeaders(secret: Buffer): Promise<Record<string, string>> {
  return { 'gitlab-ci-telemetry-api-request': await signInternalApiToken(secret, ISSUER) };
}
