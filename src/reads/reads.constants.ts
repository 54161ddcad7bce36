/** The read port's backend (SPEC §12): ClickHouse when CLICKHOUSE_URL is set, else the embedded collector's files. */
export const TRACE_READS = Symbol('TRACE_READS');
