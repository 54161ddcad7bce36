import { DynamicModule, Module } from '@nestjs/common';
import type { Logger } from 'pino';
import { AppConfig } from './config/app-config';
import { ConfigModule } from './config/config.module';
import { Secrets } from './config/secrets';
import { JobPayloadModule } from './job-payload/job-payload.module';
import { ObservabilityModule } from './observability/observability.module';
import { OtlpGatewayModule } from './otlp-gateway/otlp-gateway.module';
import { GitlabWebhooksModule } from './gitlab-webhooks/gitlab-webhooks.module';
import { McpModule } from './mcp/mcp.module';
import { ReadsModule } from './reads/reads.module';
import { TokenAuthModule } from './token-auth/token-auth.module';

/**
 * The process by role (SPEC §2): the internal API on 8080 (job payload, auth, trace reads and their MCP server, health,
 * metrics) and,
 * unless ROLE=control, the OTLP gateway on 4318. A gateway-only process keeps health and metrics
 * on the internal port and asks a control process for auth decisions.
 *
 * Only configuration and observability are global: every module reads the one and reports to the other.
 * Everything else is imported where it is used, features → shared capabilities → config/observability.
 */
@Module({})
export class AppModule {
  static forRoot(config: AppConfig, secrets: Secrets, logger: Logger): DynamicModule {
    const reads = ReadsModule.forRoot();
    const control = config.process.role === 'gateway' ? [] : [TokenAuthModule, JobPayloadModule, GitlabWebhooksModule, reads, McpModule.over(reads)];
    const gateway = config.process.role === 'control' ? [] : [OtlpGatewayModule.forRole(config.process.role)];
    return {
      module: AppModule,
      imports: [ConfigModule.forRoot(config, secrets), ObservabilityModule.forRoot(logger), ...control, ...gateway],
    };
  }
}
