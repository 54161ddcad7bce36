import 'reflect-metadata';
import type { FastifyInstance } from 'fastify';
import { createInternalApp } from './app.factory';
import { AppConfig, ConfigError, loadConfig } from './config/app-config';
import { loadSecrets, Secrets } from './config/secrets';
import { pricesFileProblem } from './across/prices';
import { createLogger } from './observability/logger';
import { ReadinessChecks } from './observability/readiness-checks';
import { startSelfTracing } from './observability/self-tracing';
import { SHUTDOWN_GRACE_MS } from './observability/shutdown';
import { GatewayServer } from './otlp-gateway/otlp-gateway.module';
import { jwksFileProblem } from './runner-auth/job-token-verifier';
import { webhookSecretsProblem } from './gitlab-webhooks/webhook-secrets';
import { listenProblem, readCommandLine, startupSummary, startupWarnings, USAGE } from './startup';

const EX_USAGE = 64;
const EX_SOFTWARE = 70;
const EX_CONFIG = 78;

/** A start-up mistake of the user's: one line, no stack, and the exit code that says configuration. */
function refuse(line: string, exitCode = EX_CONFIG): never {
  process.stderr.write(`${line}\n`);
  process.exit(exitCode);
}

function configuration(): { config: AppConfig; secrets: Secrets } {
  try {
    const config = loadConfig(process.env);
    const secrets = loadSecrets(config);
    // Only processes that verify job tokens read the keys (ROLE=gateway asks AUTH_URL instead).
    const control = config.process.role !== 'gateway';
    const { jobTokenJwksFile } = config.runnerAuth;
    const keysProblem = control && jobTokenJwksFile !== undefined ? jwksFileProblem(jobTokenJwksFile) : undefined;
    if (keysProblem !== undefined) throw new ConfigError([keysProblem]);
    const webhookSecretFile = config.webhooks.secretFile;
    const webhookProblem = control && webhookSecretFile !== undefined ? webhookSecretsProblem(webhookSecretFile) : undefined;
    if (webhookProblem !== undefined) throw new ConfigError([webhookProblem]);
    const pricesFile = config.reads.runnerPricesFile;
    const pricesProblem = control && pricesFile !== undefined ? pricesFileProblem(pricesFile) : undefined;
    if (pricesProblem !== undefined) throw new ConfigError([pricesProblem]);
    return { config, secrets };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    refuse(error.problems.map((problem) => `invalid configuration: ${problem}`).join('\n'));
  }
}

/** Listens, or refuses with the one line that names what to change (a port in use, a HOST that is not here). */
async function listen(variable: 'INTERNAL_PORT' | 'GATEWAY_PORT', host: string, port: number, start: () => Promise<string>): Promise<string> {
  try {
    return await start();
  } catch (error) {
    const problem = listenProblem(error, variable, host, port);
    if (problem === undefined) throw error;
    refuse(`cannot start: ${problem}`);
  }
}

async function bootstrap(): Promise<void> {
  const commandLine = readCommandLine(process.argv.slice(2));
  if (commandLine.kind === 'help') {
    process.stdout.write(USAGE);
    return;
  }
  if (commandLine.kind === 'unknown') {
    refuse(
      `unknown argument ${JSON.stringify(commandLine.argument)}: the service takes none, it is configured by environment variables (see --help)`,
      EX_USAGE,
    );
  }
  const { config, secrets } = configuration();

  const { role, host, internalPort, gatewayPort, logLevel } = config.process;
  const logger = createLogger(logLevel);
  const stopSelfTracing = startSelfTracing(config.selfTracing.endpoint, config.selfTracing.serviceName, config.selfTracing.metricExportIntervalMs);
  const internal = await createInternalApp(config, secrets, logger);
  const readinessChecks = internal.get(ReadinessChecks);
  readinessChecks.holdUntilStarted();
  // Fastify's own listen, not Nest's: Nest logs a failed listen's raw error itself before rejecting.
  const internalFastify: FastifyInstance = internal.getHttpAdapter().getInstance();
  const internalUrl = await listen('INTERNAL_PORT', host, internalPort, () => internalFastify.listen({ port: internalPort, host }));
  const gatewayUrl =
    role === 'control' ? undefined : await listen('GATEWAY_PORT', host, gatewayPort, () => internal.get(GatewayServer).listen(gatewayPort, host));
  const readiness = await readinessChecks.run();
  logger.info(startupSummary(config, { internalUrl, gatewayUrl, readiness }), 'ci-job-telemetry started');
  for (const warning of startupWarnings(config, process.env)) logger.warn(warning);
  // Lines are written in batches; the start-up line is out before the process says it is ready.
  await new Promise<void>((resolve) => logger.flush(() => resolve()));
  readinessChecks.started();

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

// Anything else that stops the start is the service's own fault, not the user's: its stack is worth reading.
bootstrap().catch((error: unknown) => {
  process.stderr.write(`cannot start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(EX_SOFTWARE);
});
