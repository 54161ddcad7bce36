import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

export async function internalApiHeaders(secret: Buffer): Promise<Record<string, string>> {
  return { 'gitlab-ci-telemetry-api-request': await signInternalApiToken(secret, ISSUER) };
}
