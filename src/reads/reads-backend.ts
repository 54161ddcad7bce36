import { ClickHouseTraceReads } from './clickhouse-trace-reads';
import { CollectorFilesTraceReads } from './collector-files-reads';
import type { ClickHouseReadsOptions, TraceReads } from './trace-reads';

/**
 * Which backend of the read port to build, as plain data: the service sends it to each worker thread of the reads
 * pool, which builds its own (a ClickHouse client, an index of the collector's files) and keeps it while it lives.
 */
export type BackendSpec = { readonly kind: 'files'; readonly directory: string } | { readonly kind: 'clickhouse'; readonly options: ClickHouseReadsOptions };

export function traceReadsOf(spec: BackendSpec): TraceReads {
  switch (spec.kind) {
    case 'files':
      return new CollectorFilesTraceReads(spec.directory);
    case 'clickhouse':
      return new ClickHouseTraceReads(spec.options);
    default: {
      const unknown: never = spec;
      throw new Error(`no such reads backend: ${JSON.stringify(unknown)}`);
    }
  }
}
