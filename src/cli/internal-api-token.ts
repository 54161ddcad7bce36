/* Prints a `Gitlab-Ci-Telemetry-Api-Request` header value signed with the configured secret. */
import { ConfigError, loadConfig } from '../config/app-config';
import { loadSecrets } from '../config/secrets';
import { signInternalApiToken } from '../internal-api/internal-api-token';

async function main(): Promise<void> {
  const config = loadConfig(process.env);
  const secrets = loadSecrets(config);
  process.stdout.write(`${await signInternalApiToken(secrets.internalApiSecret, config.internalApi.issuers[0])}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof ConfigError ? error.message : String(error)}\n`);
  process.exit(1);
});
