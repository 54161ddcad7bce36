import 'reflect-metadata';
import { plainToInstance, Transform } from 'class-transformer';
import {
  ArrayNotEmpty,
  getMetadataStorage,
  IsBoolean,
  IsIn,
  IsInt,
  IsOptional,
  IsString,
  IsUrl,
  Matches,
  Max,
  Min,
  MinLength,
  validateSync,
  ValidationError,
} from 'class-validator';

const toList = ({ value }: { value: unknown }) =>
  typeof value === 'string'
    ? value
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item.length > 0)
    : value;

/** Only the literal words count: `Boolean("false")` is true, which is how flags get silently flipped. */
const toBoolean = ({ value }: { value: unknown }) => {
  if (typeof value !== 'string') return value;
  const word = value.trim().toLowerCase();
  if (['true', '1', 'yes'].includes(word)) return true;
  if (['false', '0', 'no'].includes(word)) return false;
  return value;
};

const toInt = ({ value }: { value: unknown }) => (typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value);

/** `host:port`, the host a name, IPv4 or bracketed IPv6 address. */
const HOST_PORT = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/;

const URL_OPTIONS = { require_tld: false, require_protocol: true, protocols: ['http', 'https'] };

/** class-validator's own message ("must be a URL address") does not say which schemes are wanted. */
const IsHttpUrl = () => IsUrl(URL_OPTIONS, { message: 'must be an http:// or https:// URL' });

/**
 * The environment as the service understands it, grouped by the feature that reads it. Every variable
 * has a default that lets `npm start` run with no other server (SPEC §8); production deployments
 * override them.
 */
export class EnvironmentVariables {
  // ── The process (SPEC §2, §8) ──

  @IsIn(['all', 'control', 'gateway'])
  ROLE: 'all' | 'control' | 'gateway' = 'all';

  @IsString()
  HOST = '0.0.0.0';

  @Transform(toInt)
  @IsInt()
  @Min(0)
  @Max(65535)
  INTERNAL_PORT = 8080;

  @Transform(toInt)
  @IsInt()
  @Min(0)
  @Max(65535)
  GATEWAY_PORT = 4318;

  @IsIn(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
  LOG_LEVEL = 'info';

  // ── Internal API authentication (SPEC §3) ──

  /** Unset: a secret is generated under `.secrets/` on first start, as GitLab does for its own secrets. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  INTERNAL_API_SECRET_FILE?: string;

  @Transform(toList)
  @IsString({ each: true })
  @MinLength(1, { each: true })
  INTERNAL_API_ISSUERS: string[] = ['gitlab'];

  @Transform(toInt)
  @IsInt()
  @Min(1024)
  BODY_LIMIT_BYTES = 8 * 1024 * 1024;

  /**
   * SHA-256 digests (hex) of caller keys accepted on the auth endpoint in place of the internal-API
   * JWT, for gateways that cannot sign one (nginx `auth_request`). Only digests are configured.
   */
  @Transform(toList)
  @Matches(/^[0-9a-f]{64}$/, { each: true, message: 'each entry must be a SHA-256 digest in lowercase hex' })
  AUTH_CALLER_KEY_DIGESTS: string[] = [];

  // ── Job-payload decorator: trace context, endpoints, grants (SPEC §4) ──

  @IsOptional()
  @IsString()
  @MinLength(1)
  TRACE_KEY_FILE?: string;

  /**
   * Key of the per-job capability URLs (SPEC §4); generated under `.secrets/` when unset. To rotate,
   * move the old file to CAPABILITY_PREVIOUS_KEY_FILE and put a new key here; drop the previous key
   * once the longest job timeout plus GRANT_GRACE_SECONDS has passed.
   */
  @IsOptional()
  @IsString()
  @MinLength(1)
  CAPABILITY_KEY_FILE?: string;

  @IsOptional()
  @IsString()
  @MinLength(1)
  CAPABILITY_PREVIOUS_KEY_FILE?: string;

  /**
   * How self-managed runners are told to authenticate (SPEC §4): `capability`, a per-job URL a stock
   * GitLab Runner can use with no credentials of its own; or `headers`, the job and runner tokens as
   * headers, only for runners known to send them (a stock runner skips that endpoint).
   */
  @IsIn(['capability', 'headers'])
  RUNNER_ENDPOINT_FORM: 'capability' | 'headers' = 'capability';

  /**
   * `keyed`: HMAC ids under the trace key (SPEC §4). `gitlab`: the ids GitLab Rails gives its own
   * job spans, so Rails' spans and the runner's land in one trace.
   */
  @IsIn(['keyed', 'gitlab'])
  TRACE_ID_SCHEME: 'keyed' | 'gitlab' = 'keyed';

  /** How long the decorator waits for the store before answering `degraded` (SPEC §4 "Grant"). */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(10000)
  STORE_TIMEOUT_MS = 150;

  @Transform(toInt)
  @IsInt()
  @Min(0)
  GRANT_GRACE_SECONDS = 900;

  /**
   * The gateway's base URL as runners reach it. Unset: `http://localhost:<GATEWAY_PORT>`, right only for
   * runners on this host; loadConfig fills it in, so it always follows GATEWAY_PORT.
   */
  @IsOptional()
  @IsHttpUrl()
  GATEWAY_PUBLIC_URL!: string;

  @IsHttpUrl()
  COLLECTOR_PUBLIC_URL = 'http://localhost:4318';

  @Transform(toList)
  @IsIn(['instance_type', 'group_type', 'project_type'], { each: true })
  HOSTED_RUNNER_TYPES: string[] = [];

  @Transform(({ value }) => (toList({ value }) as unknown[] | undefined)?.map((id) => toInt({ value: id })))
  @IsInt({ each: true })
  HOSTED_RUNNER_IDS: number[] = [];

  @IsString()
  @MinLength(1)
  HOSTED_OIDC_AUDIENCE = 'ci-job-telemetry';

  /** Runners that say nothing about tracing ignore fields they do not know, so they are eligible by default. */
  @Transform(toBoolean)
  @IsBoolean()
  UNADVERTISED_RUNNERS_ELIGIBLE = true;

  // ── Flags (SPEC §4 "Flags") ──

  @IsString()
  @MinLength(1)
  FLAGS_FILE = 'config/flags.json';

  @IsOptional()
  @IsHttpUrl()
  UNLEASH_URL?: string;

  @IsOptional()
  @IsString()
  UNLEASH_API_TOKEN?: string;

  @IsString()
  @MinLength(1)
  UNLEASH_APP_NAME = 'ci-job-telemetry';

  @Transform(toInt)
  @IsInt()
  @Min(1000)
  UNLEASH_REFRESH_INTERVAL_MS = 15000;

  // ── Runner authentication (SPEC §5) ──

  /** GitLab's public keys for JWT job tokens (`glcbt-` + RS256 JWT): a JWKS file or URL (SPEC §5). */
  @IsOptional()
  @IsString()
  @MinLength(1)
  JOB_TOKEN_JWKS_FILE?: string;

  @IsOptional()
  @IsHttpUrl()
  JOB_TOKEN_JWKS_URL?: string;

  /** When set, JWT job tokens must carry this `iss` (the GitLab instance URL). */
  @IsOptional()
  @IsString()
  @MinLength(1)
  JOB_TOKEN_ISSUER?: string;

  /** Upper bound of the auth decision's `Cache-Control: max-age`. */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  AUTH_DECISION_MAX_AGE_SECONDS = 60;

  /**
   * Auth decisions the endpoint keeps per process, for their max-age (refusals 5 s), so a gateway
   * that asks on every export (nginx) costs a store lookup once per window. 0 turns it off.
   */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  AUTH_DECISION_CACHE_SIZE = 10_000;

  /** Auth requests one runner may make per window, counted in the store across replicas. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  RUNNER_RATE_LIMIT = 1200;

  @Transform(toInt)
  @IsInt()
  @Min(1)
  RUNNER_RATE_WINDOW_SECONDS = 60;

  /** After a job finishes or is canceled, its runner may still flush telemetry this long. */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  GRANT_REVOKE_GRACE_SECONDS = 60;

  // ── OTLP gateway (SPEC §6) ──

  /**
   * The OpenTelemetry Collector's OTLP/HTTP base URL the gateway forwards to (SPEC §6). Unset: the embedded
   * collector keeps every export under DATA_DIR (issue 20), so `npm start` works with no other server.
   */
  @IsOptional()
  @IsHttpUrl()
  OTLP_UPSTREAM_URL?: string;

  /** Where the embedded collector writes `otlp/<signal>.jsonl`; relative to the working directory, like `.secrets/`. */
  @IsString()
  @MinLength(1)
  DATA_DIR = '.data';

  /** Size at which the embedded collector starts a new file per signal, keeping one previous file (`.jsonl.1`). */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  LOCAL_COLLECTOR_MAX_BYTES = 64 * 1024 * 1024;

  /** Extra headers for the collector, `name=value` pairs separated by commas (upstream credentials). */
  @IsOptional()
  @Matches(/^\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=[^,]*(,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=[^,]*)*\s*$/, {
    message: 'must be name=value pairs separated by commas',
  })
  OTLP_UPSTREAM_HEADERS?: string;

  @Transform(toInt)
  @IsInt()
  @Min(100)
  OTLP_UPSTREAM_TIMEOUT_MS = 10_000;

  /**
   * How long a protobuf traces export may wait to share one upstream request with others (issue 29). It waits
   * only while a request to the collector is in flight, so an idle gateway adds nothing; 0 sends each alone.
   */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  @Max(1000)
  OTLP_UPSTREAM_LINGER_MS = 2;

  /** The most bytes one coalesced upstream request carries; a batch that would grow past it leaves at once. */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  OTLP_UPSTREAM_BATCH_MAX_BYTES = 1024 * 1024;

  /** Control process auth endpoint for ROLE=gateway (SPEC §2), e.g. http://control:8080/internal/ci/telemetry/auth. */
  @IsOptional()
  @IsHttpUrl()
  AUTH_URL?: string;

  /** Bytes on the wire per export. */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  GATEWAY_MAX_WIRE_BYTES = 20 * 1024 * 1024;

  /** Bytes after gzip per export, enforced while inflating (OTLP recommends 20 MiB). */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  GATEWAY_MAX_DECOMPRESSED_BYTES = 20 * 1024 * 1024;

  @Transform(toInt)
  @IsInt()
  @Min(0)
  SPANS_PER_JOB = 1000;

  /**
   * Spans one job may send in any one-second window, across replicas (issue 9 item 11). The default lets a
   * full OpenTelemetry SDK batch (512 spans) through at once.
   */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  SPANS_PER_SECOND_PER_JOB = 1000;

  /** Largest span the gateway forwards, in the encoding it was sent in (GitLab's design: 4 KB a span). */
  @Transform(toInt)
  @IsInt()
  @Min(64)
  SPAN_MAX_BYTES = 4096;

  /** Most attributes one span may carry (the OpenTelemetry SDK's default attribute count limit). */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  SPAN_MAX_ATTRIBUTES = 128;

  /** Longest attribute value on a span: UTF-8 bytes of a string, bytes of a bytes value, encoded size otherwise. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  SPAN_MAX_ATTRIBUTE_VALUE_BYTES = 2048;

  /** Exports one runner may send per window, across replicas. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  GATEWAY_RUNNER_RATE_LIMIT = 6000;

  @Transform(toInt)
  @IsInt()
  @Min(1)
  GATEWAY_RUNNER_RATE_WINDOW_SECONDS = 60;

  /**
   * Successful exports (the gateway's, and the auth endpoint's answers, which nginx asks for on every export)
   * are logged at most once per this many milliseconds, with the count of those not logged; every refusal and
   * failure is logged, and metrics count everything. 0: a line per export.
   */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  EXPORT_SUCCESS_LOG_INTERVAL_MS = 1000;

  /** Auth decisions kept per token pair (the endpoint's max-age caps each one). */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  GATEWAY_DECISION_CACHE_SIZE = 10_000;

  /**
   * ROLE=gateway without a Redis store keeps span quotas and rate limits in this process only, so N
   * replicas let through N times the limits. Refused at start unless this says it is intended.
   */
  @Transform(toBoolean)
  @IsBoolean()
  GATEWAY_PER_PROCESS_QUOTAS = false;

  // ── Control-plane spans (SPEC §10) ──

  /**
   * Secrets GitLab's webhooks send as `X-Gitlab-Token`, one per line (two during a rotation). Unset: no
   * webhook is accepted, and a job span is closed from its runner's `job_execution` span instead.
   */
  @IsOptional()
  @IsString()
  @MinLength(1)
  GITLAB_WEBHOOK_SECRET_FILE?: string;

  /** `service.name` of the pipeline, job and queue-wait spans; never `runner`, which is GitLab Runner's. */
  @IsString()
  @MinLength(1)
  @Matches(/^(?!runner$)/, { message: 'must not be runner: that is the name GitLab Runner exports under' })
  PIPELINE_SPANS_SERVICE_NAME = 'gitlab-ci';

  /**
   * Spans the outbox holds while the collector cannot take them (a few per job). A full outbox refuses new
   * spans (counted, logged, readiness says degraded) and never delays a pickup.
   */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  OUTBOX_MAX_SPANS = 100_000;

  /** How long a span id is remembered, so a webhook redelivered later never emits a second copy. */
  @Transform(toInt)
  @IsInt()
  @Min(60)
  OUTBOX_DEDUP_SECONDS = 3 * 24 * 3600;

  // ── Outcome-based sampling (SPEC §11): bounds of what provisional pipelines park ──

  /** Time limit: how long after a provisional pipeline's first parked span its decision is taken without an outcome. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  OUTCOME_SAMPLING_MAX_WAIT_SECONDS = 6 * 3600;

  /** Spans one provisional pipeline may park; beyond, its exports fall back to the head decision (dropped, counted). */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  OUTCOME_SAMPLING_MAX_PIPELINE_SPANS = 50_000;

  /** Bytes (as forwarded) one provisional pipeline may park. */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  OUTCOME_SAMPLING_MAX_PIPELINE_BYTES = 64 * 1024 * 1024;

  /** Bytes all provisional pipelines may park together: size the store for it (docs/sampling.md). */
  @Transform(toInt)
  @IsInt()
  @Min(1024)
  OUTCOME_SAMPLING_MAX_TOTAL_BYTES = 512 * 1024 * 1024;

  /** How long a decision is remembered, so a late export (a runner's last batch, a retried job) follows it. */
  @Transform(toInt)
  @IsInt()
  @Min(60)
  OUTCOME_SAMPLING_DECISION_MEMORY_SECONDS = 3 * 24 * 3600;

  /**
   * How long a drop waits after the root pipeline ended, for a child pipeline that ends after it (a trigger without
   * `strategy: depend`); a child GitLab said was running holds the drop until it ends, within the time limit.
   */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  OUTCOME_SAMPLING_LATE_CHILD_SECONDS = 300;

  /** Longest wait between two delivery attempts of the outbox while the collector is down. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  OUTBOX_MAX_BACKOFF_SECONDS = 30;

  /**
   * How long a webhook waits for the store before it is spooled and answered 202: well inside GitLab's own
   * webhook timeout (10 s by default), after which GitLab counts the delivery failed.
   */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(5000)
  WEBHOOK_STORE_TIMEOUT_MS = 2000;

  /** Where this replica spools webhooks the store cannot take; unset: `<DATA_DIR>/webhook-spool`. One per replica. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  WEBHOOK_SPOOL_DIR?: string;

  /** Webhooks the spool holds; past either bound a webhook is answered 503, which GitLab counts as failed. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  WEBHOOK_SPOOL_MAX_HOOKS = 20_000;

  @Transform(toInt)
  @IsInt()
  @Min(1024)
  WEBHOOK_SPOOL_MAX_BYTES = 256 * 1024 * 1024;

  /** Longest wait between two replays of the spool while the store is still down. */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  WEBHOOK_REPLAY_MAX_BACKOFF_SECONDS = 30;

  // ── Store (SPEC §7) ──

  /** One Redis server (SPEC §7); `rediss://` for TLS. Exclusive with REDIS_SENTINELS and REDIS_CLUSTER_NODES. */
  @IsOptional()
  @IsUrl(
    { require_tld: false, require_protocol: true, protocols: ['redis', 'rediss'] },
    { message: 'must be a redis:// or rediss:// (TLS) URL, e.g. redis://localhost:6379' },
  )
  REDIS_URL?: string;

  /** Sentinel addresses (`host:port`, comma separated): the store follows the primary they elect. */
  @Transform(toList)
  @IsOptional()
  @ArrayNotEmpty()
  @Matches(HOST_PORT, { each: true, message: 'each entry must be host:port' })
  REDIS_SENTINELS?: string[];

  /** The master name the sentinels monitor (`sentinel monitor <name> …`). */
  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_SENTINEL_MASTER?: string;

  /** Seed nodes of a Redis Cluster (`host:port`, comma separated); the rest is discovered. */
  @Transform(toList)
  @IsOptional()
  @ArrayNotEmpty()
  @Matches(HOST_PORT, { each: true, message: 'each entry must be host:port' })
  REDIS_CLUSTER_NODES?: string[];

  /** ACL user of the store's connections (Redis 6+); unset: the `default` user. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_USERNAME?: string;

  /** File holding the password of REDIS_USERNAME (or of `requirepass`), like the other secrets. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_PASSWORD_FILE?: string;

  /** ACL user and password file for the sentinels themselves, when they require one. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_SENTINEL_USERNAME?: string;

  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_SENTINEL_PASSWORD_FILE?: string;

  /** TLS to every Redis node and sentinel; with REDIS_URL the `rediss://` scheme says the same. */
  @Transform(toBoolean)
  @IsBoolean()
  REDIS_TLS = false;

  /**
   * Replicas that must have a grant write before it counts (Redis WAIT). 0: asynchronous replication,
   * where a failover can lose grants written in the last moments before the primary died.
   */
  @Transform(toInt)
  @IsInt()
  @Min(0)
  @Max(16)
  REDIS_WAIT_REPLICAS = 0;

  /**
   * How long one Redis command may take before it fails as a store outage, for every caller (decorator,
   * auth decision, gateway quotas). The decorator's own bound on a pickup is STORE_TIMEOUT_MS.
   */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(10000)
  REDIS_COMMAND_TIMEOUT_MS = 150;

  /** PEM file of the CA that signed the Redis servers' certificates, when it is not a public one. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  REDIS_TLS_CA_FILE?: string;

  // ── Reading traces (SPEC §12) ──

  /**
   * ClickHouse's HTTP interface the read API queries (the Collector exporter's `otel_traces` and the CI view), user
   * and database in the URL as the official client reads them. Unset: the embedded collector's files under DATA_DIR.
   */
  @IsOptional()
  @IsHttpUrl()
  CLICKHOUSE_URL?: string;

  /** File holding the password of CLICKHOUSE_URL's user, like the other secrets. */
  @IsOptional()
  @IsString()
  @MinLength(1)
  CLICKHOUSE_PASSWORD_FILE?: string;

  /** The longest a read waits for its backend; then it answers 503 with Retry-After (GitLab's own calls time out later). */
  @Transform(toInt)
  @IsInt()
  @Min(100)
  @Max(60_000)
  READS_TIMEOUT_MS = 4000;

  /** How far back a trace read looks when GitLab passes no `from`/`to` (and a job summary's default window). */
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(31)
  READS_LOOKBACK_DAYS = 31;

  /**
   * The most spans one trace read answers (SPEC §12 "a read is bounded"): about 300 bytes of OTLP/JSON a span, so
   * the default answer stays within a few MiB. Past it, `completeness` says `truncated` and how many there were.
   */
  @Transform(toInt)
  @IsInt()
  @Min(100)
  @Max(1_000_000)
  READS_MAX_SPANS = 10_000;

  // ── Self-instrumentation (SPEC §8) ──

  /**
   * Where the service sends its own spans (SPEC §8): an OTLP/HTTP base URL, `/v1/traces` appended.
   * Unset: no SDK is registered and self-instrumentation costs next to nothing.
   */
  @IsOptional()
  @IsHttpUrl()
  OTEL_EXPORTER_OTLP_ENDPOINT?: string;

  @IsString()
  @MinLength(1)
  OTEL_SERVICE_NAME = 'ci-job-telemetry';
}

export type AppConfig = Readonly<EnvironmentVariables>;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
  }
}

/** A password in a URL (`redis://:secret@host`) is never echoed back, even in a refusal. */
function withoutPassword(value: unknown): unknown {
  if (typeof value !== 'string' || !value.includes('@')) return value;
  return value.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/@:]*):[^/@]*@/, '$1:***@');
}

function describe(error: ValidationError): string {
  const value = error.value === undefined ? 'unset' : JSON.stringify(withoutPassword(error.value));
  const constraints = Object.values(error.constraints ?? {}).join('; ');
  return `${error.property}: ${constraints} (got ${value})`;
}

/**
 * Every variable the service reads: each has a validation decorator, optional ones (no default) included,
 * so the list cannot fall behind the class.
 */
export const VARIABLE_NAMES: ReadonlySet<string> = new Set([
  ...Object.keys(new EnvironmentVariables()),
  ...getMetadataStorage()
    .getTargetValidationMetadatas(EnvironmentVariables, '', true, false)
    .map((metadata) => metadata.propertyName),
]);

/**
 * Reads and validates the environment once at start (SPEC §8). Throws a {@link ConfigError}
 * holding one line per bad variable; nothing else in the code base reads `process.env`.
 */
export function loadConfig(env: NodeJS.ProcessEnv | Record<string, string | undefined>): AppConfig {
  const provided: Record<string, string> = {};
  for (const key of VARIABLE_NAMES) {
    const value = env[key];
    if (value !== undefined && value !== '') provided[key] = value;
  }
  const config = plainToInstance(EnvironmentVariables, provided);
  const errors = validateSync(config, { forbidUnknownValues: true });
  const problems = errors.map(describe);
  if (config.ROLE === 'gateway' && config.AUTH_URL === undefined) {
    problems.push('AUTH_URL: required with ROLE=gateway (the control process auth endpoint)');
  }
  if (config.ROLE === 'gateway' && config.OTLP_UPSTREAM_URL === undefined) {
    problems.push('OTLP_UPSTREAM_URL: required with ROLE=gateway (an edge gateway keeps no exports on its own disk)');
  }
  if (config.ROLE === 'gateway' && storeMode(config) === 'memory' && !config.GATEWAY_PER_PROCESS_QUOTAS) {
    problems.push(
      'REDIS_URL: required with ROLE=gateway (or REDIS_SENTINELS or REDIS_CLUSTER_NODES), or every replica keeps its own span quotas and rate limits (set GATEWAY_PER_PROCESS_QUOTAS=true if that is intended)',
    );
  }
  problems.push(...storeProblems(config));
  if (config.GATEWAY_PUBLIC_URL === undefined) config.GATEWAY_PUBLIC_URL = `http://localhost:${config.GATEWAY_PORT}`;
  if (problems.length === 0) problems.push(...addressProblems(config, provided.GATEWAY_PUBLIC_URL !== undefined));
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}

const LOOPBACK_HOSTS = new Set(['localhost', '[::1]', '::1']);
const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '[::]']);
const isLoopback = (host: string) => LOOPBACK_HOSTS.has(host) || /^127\.\d+\.\d+\.\d+$/.test(host);

/** The port a URL names, when it names this process: a loopback host, while HOST listens there too. */
function portOnThisHost(config: EnvironmentVariables, text: string): number | undefined {
  if (!WILDCARD_HOSTS.has(config.HOST) && !isLoopback(config.HOST)) return undefined;
  const url = new URL(text);
  if (!isLoopback(url.hostname)) return undefined;
  return Number(url.port || (url.protocol === 'https:' ? 443 : 80));
}

/**
 * Ports and addresses that cannot be right together, each of which would start and fail later, or
 * never visibly: a port the process would bind twice, runners handed a URL that is not the gateway,
 * a gateway forwarding to itself.
 */
function addressProblems(config: EnvironmentVariables, publicUrlSet: boolean): string[] {
  const problems: string[] = [];
  const servesGateway = config.ROLE !== 'control';
  const handsOutUrls = config.ROLE !== 'gateway';
  if (servesGateway && config.GATEWAY_PORT !== 0 && config.GATEWAY_PORT === config.INTERNAL_PORT) {
    problems.push(`GATEWAY_PORT: ${config.GATEWAY_PORT} is INTERNAL_PORT too; ROLE=${config.ROLE} listens on both, so give them different ports`);
  }
  if (handsOutUrls && config.GATEWAY_PORT === 0 && !publicUrlSet) {
    problems.push('GATEWAY_PUBLIC_URL: required with GATEWAY_PORT=0, since runners must be handed the port the gateway actually gets');
  }
  if (
    handsOutUrls &&
    (publicUrlSet || !servesGateway) &&
    config.INTERNAL_PORT !== 0 &&
    portOnThisHost(config, config.GATEWAY_PUBLIC_URL) === config.INTERNAL_PORT
  ) {
    problems.push(
      `GATEWAY_PUBLIC_URL: ${config.GATEWAY_PUBLIC_URL} is this process's internal API (INTERNAL_PORT=${config.INTERNAL_PORT}), not the OTLP gateway runners must be handed`,
    );
  }
  if (
    servesGateway &&
    config.GATEWAY_PORT !== 0 &&
    config.OTLP_UPSTREAM_URL !== undefined &&
    portOnThisHost(config, config.OTLP_UPSTREAM_URL) === config.GATEWAY_PORT
  ) {
    problems.push(
      `OTLP_UPSTREAM_URL: ${config.OTLP_UPSTREAM_URL} is this process's own gateway (GATEWAY_PORT=${config.GATEWAY_PORT}), so exports would loop; point it at the OpenTelemetry Collector's OTLP/HTTP receiver`,
    );
  }
  return problems;
}

export type StoreMode = 'memory' | 'single' | 'sentinel' | 'cluster';

/** Where shared state lives (SPEC §7): in this process, or Redis as one server, Sentinel-managed or a cluster. */
export function storeMode(config: AppConfig): StoreMode {
  if (config.REDIS_SENTINELS !== undefined) return 'sentinel';
  if (config.REDIS_CLUSTER_NODES !== undefined) return 'cluster';
  return config.REDIS_URL === undefined ? 'memory' : 'single';
}

function storeProblems(config: EnvironmentVariables): string[] {
  const problems: string[] = [];
  const topologies = (['REDIS_URL', 'REDIS_SENTINELS', 'REDIS_CLUSTER_NODES'] as const).filter((name) => config[name] !== undefined);
  if (topologies.length > 1) problems.push(`${topologies[1]}: cannot be combined with ${topologies[0]} (set exactly one of them)`);
  if (config.REDIS_SENTINELS !== undefined && config.REDIS_SENTINEL_MASTER === undefined) {
    problems.push('REDIS_SENTINEL_MASTER: required with REDIS_SENTINELS (the master name the sentinels monitor)');
  }
  if (config.REDIS_SENTINELS === undefined) {
    for (const name of ['REDIS_SENTINEL_MASTER', 'REDIS_SENTINEL_USERNAME', 'REDIS_SENTINEL_PASSWORD_FILE'] as const) {
      if (config[name] !== undefined) problems.push(`${name}: only meaningful with REDIS_SENTINELS`);
    }
  }
  return problems;
}
