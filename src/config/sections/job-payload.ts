import { Transform } from 'class-transformer';
import { IsBoolean, IsIn, IsInt, IsOptional } from 'class-validator';
import { Integer, IsHttpUrl, OptionalText, Text, toBoolean, toIntList, toList, Variable } from '../variable';

/** The job-payload decorator: trace context, the endpoints runners are handed, grants (SPEC §4). */
export class JobPayloadConfig {
  @Variable('TRACE_KEY_FILE') @OptionalText() readonly traceKeyFile?: string;

  /**
   * Key of the per-job capability URLs (SPEC §4); generated under `.secrets/` when unset. To rotate,
   * move the old file to CAPABILITY_PREVIOUS_KEY_FILE and put a new key here; drop the previous key
   * once the longest job timeout plus GRANT_GRACE_SECONDS has passed.
   */
  @Variable('CAPABILITY_KEY_FILE') @OptionalText() readonly capabilityKeyFile?: string;

  @Variable('CAPABILITY_PREVIOUS_KEY_FILE') @OptionalText() readonly capabilityPreviousKeyFile?: string;

  /**
   * How self-managed runners are told to authenticate (SPEC §4): `capability`, a per-job URL a stock
   * GitLab Runner can use with no credentials of its own; or `headers`, the job and runner tokens as
   * headers, only for runners known to send them (a stock runner skips that endpoint).
   */
  @Variable('RUNNER_ENDPOINT_FORM') @IsIn(['capability', 'headers']) readonly runnerEndpointForm: 'capability' | 'headers' = 'capability';

  /**
   * `keyed`: HMAC ids under the trace key (SPEC §4). `gitlab`: the ids GitLab Rails gives its own
   * job spans, so Rails' spans and the runner's land in one trace.
   */
  @Variable('TRACE_ID_SCHEME') @IsIn(['keyed', 'gitlab']) readonly traceIdScheme: 'keyed' | 'gitlab' = 'keyed';

  /** How long the decorator waits for the store before answering `degraded` (SPEC §4 "Grant"). */
  @Variable('STORE_TIMEOUT_MS') @Integer({ min: 1, max: 10000 }) readonly storeTimeoutMs: number = 150;

  @Variable('GRANT_GRACE_SECONDS') @Integer({ min: 0 }) readonly grantGraceSeconds: number = 900;

  /**
   * The gateway's base URL as runners reach it. Unset: `http://localhost:<GATEWAY_PORT>`, right only for
   * runners on this host; loadConfig fills it in, so it always follows GATEWAY_PORT.
   */
  @Variable('GATEWAY_PUBLIC_URL') @IsOptional() @IsHttpUrl() readonly gatewayPublicUrl!: string;

  @Variable('COLLECTOR_PUBLIC_URL') @IsHttpUrl() readonly collectorPublicUrl: string = 'http://localhost:4318';

  @Variable('HOSTED_RUNNER_TYPES')
  @Transform(toList)
  @IsIn(['instance_type', 'group_type', 'project_type'], { each: true })
  readonly hostedRunnerTypes: string[] = [];

  @Variable('HOSTED_RUNNER_IDS') @Transform(toIntList) @IsInt({ each: true }) readonly hostedRunnerIds: number[] = [];

  @Variable('HOSTED_OIDC_AUDIENCE') @Text() readonly hostedOidcAudience: string = 'ci-job-telemetry';

  /** Runners that say nothing about tracing ignore fields they do not know, so they are eligible by default. */
  @Variable('UNADVERTISED_RUNNERS_ELIGIBLE') @Transform(toBoolean) @IsBoolean() readonly unadvertisedRunnersEligible: boolean = true;
}
