import { DynamicModule, Module, Provider } from '@nestjs/common';
import { localCollectorDirectory } from '../collector/collector-files';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG, SECRETS } from '../config/config.constants';
import { Secrets } from '../config/secrets';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { ClickHouseTraceReads } from './clickhouse-trace-reads';
import { CollectorFilesTraceReads } from './collector-files-reads';
import { TRACE_READS } from './reads.constants';
import { ReadsController } from './reads.controller';
import { ReadsService } from './reads.service';
import type { TraceReads } from './trace-reads';

/** The backend configuration names: ClickHouse with CLICKHOUSE_URL, else the embedded collector's files under DATA_DIR. */
export function traceReadsFor(config: AppConfig, secrets: Secrets): TraceReads {
  if (config.CLICKHOUSE_URL !== undefined) {
    return new ClickHouseTraceReads({ url: config.CLICKHOUSE_URL, password: secrets.clickhousePassword ?? '', timeoutMs: config.READS_TIMEOUT_MS });
  }
  return new CollectorFilesTraceReads(localCollectorDirectory(config.DATA_DIR));
}

/** SPEC §12: the read API on the internal port, over one backend of the read port. */
@Module({})
export class ReadsModule {
  static forRoot(): DynamicModule {
    return ReadsModule.with({ provide: TRACE_READS, inject: [APP_CONFIG, SECRETS], useFactory: traceReadsFor });
  }

  /** Over a backend given as is: the endpoint tests run the same cases against each backend, and against one that fails. */
  static withBackend(reads: TraceReads): DynamicModule {
    return ReadsModule.with({ provide: TRACE_READS, useValue: reads });
  }

  private static with(backend: Provider): DynamicModule {
    return { module: ReadsModule, imports: [InternalApiModule], controllers: [ReadsController], providers: [backend, ReadsService] };
  }
}
