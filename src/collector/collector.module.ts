import { Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { OTLP_UPSTREAM } from './collector.constants';
import { OtlpUpstream, parseHeaderList } from './otlp-upstream';

/**
 * The collector's one client: pooled keep-alive connections to OTLP_UPSTREAM_URL. The gateway forwards
 * through it and the pipeline spans' outbox delivers through it, so neither reaches into the other.
 */
@Module({
  providers: [
    {
      provide: OTLP_UPSTREAM,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) =>
        new OtlpUpstream(config.OTLP_UPSTREAM_URL, parseHeaderList(config.OTLP_UPSTREAM_HEADERS), config.OTLP_UPSTREAM_TIMEOUT_MS),
    },
  ],
  exports: [OTLP_UPSTREAM],
})
export class CollectorModule implements OnApplicationShutdown {
  constructor(@Inject(OTLP_UPSTREAM) private readonly upstream: OtlpUpstream) {}

  /** After every module's own shutdown: the gateway's in-flight exports and the outbox's last delivery use the pool until then. */
  async onApplicationShutdown(): Promise<void> {
    await this.upstream.close();
  }
}
