import 'reflect-metadata';
import { createInternalApp } from './app.factory';
import { ConfigError, loadConfig } from './config/app-config';
import { loadSecrets } from './config/secrets';
import { createLogger } from './observability/logger';
import { startSelfTracing } from './observability/self-tracing';
import { SHUTDOWN_GRACE_MS } from './observability/shutdown';
import { GatewayServer } from './otlp-gateway/otlp-gateway.module';
import { jwksFileProblem } from './runner-auth/job-token-verifier';
import { webhookSecretsProblem } from './pipeline-spans/webhook-secrets';

async function bootstrap(): Promise<void> {
  let config;
  let secrets;
  try {
    config = loadConfig(process.env);
    secrets = loadSecrets(config);
    // Only processes that verify job tokens read the keys (ROLE=gateway asks AUTH_URL instead).
    const keysProblem = config.ROLE !== 'gateway' && config.JOB_TOKEN_JWKS_FILE !== undefined ? jwksFileProblem(config.JOB_TOKEN_JWKS_FILE) : undefined;
    if (keysProblem !== undefined) throw new ConfigError([keysProblem]);
    const webhookProblem =
      config.ROLE !== 'gateway' && config.GITLAB_WEBHOOK_SECRET_FILE !== undefined ? webhookSecretsProblem(config.GITLAB_WEBHOOK_SECRET_FILE) : undefined;
    if (webhookProblem !== undefined) throw new ConfigError([webhookProblem]);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) process.stderr.write(`invalid configuration: ${problem}\n`);
    process.exit(78); // EX_CONFIG
  }

  const logger = createLogger(config.LOG_LEVEL);
  const stopSelfTracing = startSelfTracing(config.OTEL_EXPORTER_OTLP_ENDPOINT, config.OTEL_SERVICE_NAME);
  const internal = await createInternalApp(config, secrets, logger);
  await internal.listen(config.INTERNAL_PORT, config.HOST);
  logger.info({ url: await internal.getUrl(), role: config.ROLE }, 'internal API listening');
  if (config.ROLE !== 'control') {
    const url = await internal.get(GatewayServer).listen(config.GATEWAY_PORT, config.HOST);
    logger.info({ url, upstream: config.OTLP_UPSTREAM_URL }, 'OTLP gateway listening');
  }

  const shutdown = (signal: string) => {
    logger.info({ signal }, 'shutting down');
    setTimeout(() => process.exit(1), SHUTDOWN_GRACE_MS).unref();
    // The service's own last spans are flushed after the requests that made them have finished.
    internal
      .close()
      .then(stopSelfTracing)
      .then(
        () => process.exit(0),
        (error: unknown) => {
          logger.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

void bootstrap();
