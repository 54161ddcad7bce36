import { DynamicModule, Inject, Injectable, Module, OnModuleDestroy } from '@nestjs/common';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { SECRETS } from '../config/config.constants';
import { CollectorConfig } from '../config/sections/collector';
import { GatewayConfig } from '../config/sections/gateway';
import { InternalApiConfig } from '../config/sections/internal-api';
import { ProcessConfig } from '../config/sections/process';
import { Secrets } from '../config/secrets';
import { LimitStore } from '../limits/limit-store';
import { LIMIT_STORE } from '../limits/limits.constants';
import { LimitsModule } from '../limits/limits.module';
import { signInternalApiToken } from '../internal-api/internal-api-token';
import { APP_LOGGER } from '../observability/logger';
import { DecisionCache } from '../runner-auth/decision-cache';
import { RunnerAuthModule } from '../runner-auth/runner-auth.module';
import { RunnerAuthService } from '../runner-auth/runner-auth.service';
import { RunnerCredential } from '../runner-auth/runner-credential';
import { GatewayAuthenticator, RemoteAuthenticator } from './gateway-auth';
import { GatewayMetrics } from './gateway-metrics';
import { GATEWAY_AUTHENTICATOR } from './otlp-gateway.constants';
import { buildGatewayServer } from './otlp-gateway.server';
import { CollectorModule } from '../collector/collector.module';
import { PipelineSpansModule } from '../pipeline-spans/pipeline-spans.module';
import { PipelineSpansService } from '../pipeline-spans/pipeline-spans.service';
import { OutcomeSamplingModule } from '../outcome-sampling/outcome-sampling.module';
import { OutcomeSamplingService } from '../outcome-sampling/outcome-sampling.service';
import { COLLECTOR_CLIENT } from '../collector/collector.constants';
import type { CollectorClient } from '../collector/collector-client';

/** The gateway's own Fastify server, listening on GATEWAY_PORT; main.ts starts it, Nest closes it. */
@Injectable()
export class GatewayServer implements OnModuleDestroy {
  readonly instance: FastifyInstance;

  constructor(
    config: GatewayConfig,
    @Inject(APP_LOGGER) logger: Logger,
    @Inject(LIMIT_STORE) store: LimitStore,
    @Inject(GATEWAY_AUTHENTICATOR) private readonly authenticator: GatewayAuthenticator,
    @Inject(COLLECTOR_CLIENT) private readonly collector: CollectorClient,
    metrics: GatewayMetrics,
    pipelineSpans: PipelineSpansService,
    outcomeSampling: OutcomeSamplingService,
  ) {
    const decisions = new DecisionCache((credential: RunnerCredential) => authenticator.authenticate(credential), config.decisionCacheSize, metrics);
    this.instance = buildGatewayServer({ config, logger, decisions, store, collector, metrics, pipelineSpans, outcomeSampling });
  }

  async listen(port: number, host: string): Promise<string> {
    return this.instance.listen({ port, host });
  }

  /** Stops accepting, lets in-flight exports finish (Fastify's close), then drops the control-process pool (the collector's is CollectorModule's). */
  async onModuleDestroy(): Promise<void> {
    await this.instance.close();
    await this.authenticator.close?.();
  }
}

/** Internal-API headers for ROLE=gateway, signed once and reused while comfortably inside the 60 s window. */
function internalApiHeaderSigner(secret: Buffer, issuer: string): () => Promise<Record<string, string>> {
  let signed: { value: string; at: number } | undefined;
  return async () => {
    if (signed === undefined || Date.now() - signed.at > 30_000) {
      signed = { value: await signInternalApiToken(secret, issuer), at: Date.now() };
    }
    return { 'gitlab-ci-telemetry-api-request': signed.value };
  };
}

@Module({})
export class OtlpGatewayModule {
  /** ROLE=all decides in-process; ROLE=gateway asks the control process at AUTH_URL (SPEC §2). */
  static forRole(role: ProcessConfig['role']): DynamicModule {
    const authenticator =
      role === 'gateway'
        ? {
            provide: GATEWAY_AUTHENTICATOR,
            inject: [GatewayConfig, InternalApiConfig, CollectorConfig, SECRETS],
            useFactory: (config: GatewayConfig, internalApi: InternalApiConfig, collector: CollectorConfig, secrets: Secrets) =>
              new RemoteAuthenticator(config.authUrl!, internalApiHeaderSigner(secrets.internalApiSecret, internalApi.issuers[0]), collector.upstreamTimeoutMs),
          }
        : { provide: GATEWAY_AUTHENTICATOR, useExisting: RunnerAuthService };
    return {
      module: OtlpGatewayModule,
      // A ROLE=gateway process loads no auth decision of its own: it asks AUTH_URL.
      imports:
        role === 'gateway'
          ? [LimitsModule, CollectorModule, PipelineSpansModule, OutcomeSamplingModule]
          : [LimitsModule, CollectorModule, PipelineSpansModule, OutcomeSamplingModule, RunnerAuthModule],
      providers: [authenticator, GatewayMetrics, GatewayServer],
      exports: [GatewayServer],
    };
  }
}
