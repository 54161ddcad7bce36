import { DynamicModule, Module, Provider } from '@nestjs/common';
import { Counter } from 'prom-client';
import { localCollectorDirectory } from '../collector/collector-files';
import { SECRETS } from '../config/config.constants';
import { ProcessConfig } from '../config/sections/process';
import { ReadsConfig } from '../config/sections/reads';
import { Secrets } from '../config/secrets';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { MetricsService } from '../observability/metrics.service';
import type { BackendSpec } from './reads-backend';
import { InProcessReads, ReadsPool, ReadsRunner } from './reads-pool';
import { READS_RUNNER } from './reads.constants';
import { ReadsController } from './reads.controller';
import { ReadsService } from './reads.service';
import type { TraceReads } from './trace-reads';

/** The backend configuration names: ClickHouse with CLICKHOUSE_URL, else the embedded collector's files under DATA_DIR. */
export function backendSpecFor(config: ReadsConfig, processConfig: ProcessConfig, clickhousePassword: string | undefined): BackendSpec {
  if (config.clickhouseUrl !== undefined) {
    return {
      kind: 'clickhouse',
      options: { url: config.clickhouseUrl, password: clickhousePassword ?? '', timeoutMs: config.timeoutMs, compression: config.clickhouseCompression },
    };
  }
  return { kind: 'files', directory: localCollectorDirectory(processConfig.dataDir) };
}

/** The pool over `backend`, its abandoned reads counted where operators look (SPEC §8). */
function readsPool(backend: BackendSpec, config: ReadsConfig, metrics: MetricsService): ReadsPool {
  const abandoned = new Counter({
    name: 'ci_job_telemetry_reads_abandoned_total',
    help: 'Trace reads still running at READS_TIMEOUT_MS: answered 503, their worker thread terminated (its work stopped) and replaced',
    registers: [metrics.registry],
  });
  return new ReadsPool({ backend, timeoutMs: config.timeoutMs, onAbandoned: () => abandoned.inc() });
}

/** SPEC §12: the read API on the internal port, over one backend of the read port. */
@Module({})
export class ReadsModule {
  static forRoot(): DynamicModule {
    return ReadsModule.with({
      provide: READS_RUNNER,
      inject: [ReadsConfig, ProcessConfig, SECRETS, MetricsService],
      useFactory: (config: ReadsConfig, processConfig: ProcessConfig, secrets: Secrets, metrics: MetricsService) =>
        readsPool(backendSpecFor(config, processConfig, secrets.clickhousePassword), config, metrics),
    });
  }

  /** Over a backend built in each worker thread from `backend`, as forRoot builds it from the configuration. */
  static withBackendSpec(backend: BackendSpec): DynamicModule {
    return ReadsModule.with({
      provide: READS_RUNNER,
      inject: [ReadsConfig, MetricsService],
      useFactory: (config: ReadsConfig, metrics: MetricsService) => readsPool(backend, config, metrics),
    });
  }

  /** Over a backend given as an object, on this thread: the endpoint tests' failing and noting backends. */
  static withBackend(reads: TraceReads): DynamicModule {
    return ReadsModule.with({
      provide: READS_RUNNER,
      inject: [ReadsConfig],
      useFactory: (config: ReadsConfig): ReadsRunner => new InProcessReads(reads, config.timeoutMs),
    });
  }

  private static with(runner: Provider): DynamicModule {
    // ReadsService is exported for the MCP tools (src/mcp/), a second edge over the same reads.
    return { module: ReadsModule, imports: [InternalApiModule], controllers: [ReadsController], providers: [runner, ReadsService], exports: [ReadsService] };
  }
}
