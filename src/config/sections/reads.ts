import { IsIn, IsOptional } from 'class-validator';
import { Integer, IsHttpUrl, OptionalText, Variable } from '../variable';

/** Reading traces (SPEC §12): where from, and how far a read may go. */
export class ReadsConfig {
  /**
   * ClickHouse's HTTP interface the read API queries (the Collector exporter's `otel_traces` and the CI view), user
   * and database in the URL as the official client reads them. Unset: the embedded collector's files under DATA_DIR.
   */
  @Variable('CLICKHOUSE_URL') @IsOptional() @IsHttpUrl() readonly clickhouseUrl?: string;

  /** File holding the password of CLICKHOUSE_URL's user, like the other secrets. */
  @Variable('CLICKHOUSE_PASSWORD_FILE') @OptionalText() readonly clickhousePasswordFile?: string;

  /**
   * Whether ClickHouse gzips its answers. `none` by default: the service reads ClickHouse inside its own cluster (as
   * every manifest in deploy/ places it), where a month's 50 MB of job runs cross the link in a fraction of the time
   * gzip takes on both ends. `gzip` where ClickHouse is reached over a slow or metered link.
   */
  @Variable('CLICKHOUSE_COMPRESSION') @IsIn(['none', 'gzip']) readonly clickhouseCompression: 'none' | 'gzip' = 'none';

  /** The longest a read waits for its backend; then it answers 503 with Retry-After (GitLab's own calls time out later). */
  @Variable('READS_TIMEOUT_MS') @Integer({ min: 100, max: 60_000 }) readonly timeoutMs: number = 4000;

  /** How far back a trace read looks when GitLab passes no `from`/`to` (and a job summary's default window). */
  @Variable('READS_LOOKBACK_DAYS') @Integer({ min: 1, max: 31 }) readonly lookbackDays: number = 31;

  /**
   * A JSON file of prices per runner minute, by runner type or tag set (`{"per_minute": {"runner_type":
   * {"instance_type": 0.008}, "tags": {"arm64,docker": 0.012}}}`): the waste read then prices what it counts (SPEC
   * §13). Unset: no cost. Read once at start; a bad file stops the service.
   */
  @Variable('RUNNER_PRICES_FILE') @OptionalText() readonly runnerPricesFile?: string;

  /**
   * The most spans one trace read answers (SPEC §12 "a read is bounded"): about 300 bytes of OTLP/JSON a span, so
   * the default answer stays within a few MiB. Past it, `completeness` says `truncated` and how many there were.
   */
  @Variable('READS_MAX_SPANS') @Integer({ min: 100, max: 1_000_000 }) readonly maxSpans: number = 10_000;
}
