import { Inject, Module, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { APP_LOGGER } from '../observability/logger';
import { ReadinessChecks } from '../observability/readiness-checks';
import { OTLP_UPSTREAM } from './collector.constants';
import { LocalCollector } from './local-collector';
import type { CollectorClient } from './otlp-upstream';
import { OtlpUpstream, parseHeaderList } from './otlp-upstream';

/**
 * The collector's one client: pooled keep-alive connections to OTLP_UPSTREAM_URL, or with none configured the
 * embedded collector writing under DATA_DIR (issue 20). The gateway forwards through it and the pipeline
 * spans' outbox delivers through it, so neither reaches into the other.
 */
@Module({
  providers: [
    {
      provide: OTLP_UPSTREAM,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig): CollectorClient =>
        config.OTLP_UPSTREAM_URL === undefined
          ? new LocalCollector(resolve(config.DATA_DIR, 'otlp'), config.LOCAL_COLLECTOR_MAX_BYTES)
          : new OtlpUpstream(config.OTLP_UPSTREAM_URL, parseHeaderList(config.OTLP_UPSTREAM_HEADERS), config.OTLP_UPSTREAM_TIMEOUT_MS),
    },
  ],
  exports: [OTLP_UPSTREAM],
})
export class CollectorModule implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(
    @Inject(OTLP_UPSTREAM) private readonly upstream: CollectorClient,
    @Inject(APP_LOGGER) private readonly logger: Logger,
    @Inject(APP_CONFIG) config: AppConfig,
    readiness: ReadinessChecks,
  ) {
    // Only a gateway-only process is unready without its collector: in ROLE=all the same readiness
    // gates job pickup, which must not leave rotation because the collector is down (exports get a
    // retryable 502/503 meanwhile).
    if (config.ROLE === 'gateway') readiness.register('upstream', () => upstream.reachable());
  }

  onApplicationBootstrap(): void {
    if (this.upstream instanceof LocalCollector) {
      this.logger.info(
        { directory: this.upstream.directory, maxBytesPerFile: this.upstream.maxBytesPerFile },
        `no OTLP_UPSTREAM_URL: exports are kept in ${this.upstream.directory} (traces.jsonl, metrics.jsonl, logs.jsonl); npm run -s trace prints the latest trace`,
      );
    }
  }

  /** After every module's own shutdown: the gateway's in-flight exports and the outbox's last delivery use the pool until then. */
  async onApplicationShutdown(): Promise<void> {
    await this.upstream.close();
  }
}
