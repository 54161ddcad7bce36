import { Inject, Module, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import type { Logger } from 'pino';
import { CollectorConfig } from '../config/sections/collector';
import { ProcessConfig } from '../config/sections/process';
import { APP_LOGGER } from '../observability/logger';
import { ReadinessChecks } from '../observability/readiness-checks';
import { CoalescingCollectorClient } from './coalescing-collector-client';
import type { CollectorClient } from './collector-client';
import { localCollectorDirectory, SIGNAL_FILE_NAMES } from './collector-files';
import { COLLECTOR_CLIENT } from './collector.constants';
import { CollectorMetrics } from './collector.metrics';
import { HttpCollectorClient, parseHeaderList } from './http-collector-client';
import { LocalCollector } from './local-collector';

/**
 * The collector's one client: pooled keep-alive connections to OTLP_UPSTREAM_URL, or with none configured the
 * embedded collector writing under DATA_DIR (issue 20). The gateway forwards through it and the pipeline
 * spans' outbox delivers through it, so neither reaches into the other.
 */
@Module({
  providers: [
    CollectorMetrics,
    {
      provide: COLLECTOR_CLIENT,
      inject: [CollectorConfig, ProcessConfig, CollectorMetrics, APP_LOGGER],
      // Coalescing sits in front of the HTTP collector only: the embedded one writes a line per export, with no request to save.
      useFactory: (config: CollectorConfig, processConfig: ProcessConfig, metrics: CollectorMetrics, logger: Logger): CollectorClient =>
        config.upstreamUrl === undefined
          ? new LocalCollector(localCollectorDirectory(processConfig.dataDir), config.localMaxBytes)
          : new CoalescingCollectorClient(
              new HttpCollectorClient(config.upstreamUrl, parseHeaderList(config.upstreamHeaders), config.upstreamTimeoutMs),
              { lingerMs: config.upstreamLingerMs, maxBytes: config.upstreamBatchMaxBytes },
              metrics,
              logger,
            ),
    },
  ],
  exports: [COLLECTOR_CLIENT],
})
export class CollectorModule implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(
    @Inject(COLLECTOR_CLIENT) private readonly collector: CollectorClient,
    @Inject(APP_LOGGER) private readonly logger: Logger,
    processConfig: ProcessConfig,
    readiness: ReadinessChecks,
  ) {
    // Only a gateway-only process is unready without its collector: in ROLE=all the same readiness
    // gates job pickup, which must not leave rotation because the collector is down (exports get a
    // retryable 502/503 meanwhile).
    if (processConfig.role === 'gateway') readiness.register('upstream', () => collector.reachable());
  }

  onApplicationBootstrap(): void {
    if (this.collector instanceof LocalCollector) {
      this.logger.info(
        { directory: this.collector.directory, maxBytesPerFile: this.collector.maxBytesPerFile },
        `no OTLP_UPSTREAM_URL: exports are kept in ${this.collector.directory} (${SIGNAL_FILE_NAMES}); npm run -s trace prints the latest trace`,
      );
    }
  }

  /** After every module's own shutdown: the gateway's in-flight exports and the outbox's last delivery use the pool until then. */
  async onApplicationShutdown(): Promise<void> {
    await this.collector.close();
  }
}
