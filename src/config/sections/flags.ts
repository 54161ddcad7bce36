import { IsOptional, IsString } from 'class-validator';
import { Integer, IsHttpUrl, Text, Variable } from '../variable';

/** Flags (SPEC §4 "Flags"): a file in Unleash's format, or an Unleash server. */
export class FlagsConfig {
  @Variable('FLAGS_FILE') @Text() readonly file: string = 'config/flags.json';

  @Variable('UNLEASH_URL') @IsOptional() @IsHttpUrl() readonly unleashUrl?: string;

  @Variable('UNLEASH_API_TOKEN') @IsOptional() @IsString() readonly unleashApiToken?: string;

  @Variable('UNLEASH_APP_NAME') @Text() readonly unleashAppName: string = 'ci-job-telemetry';

  @Variable('UNLEASH_REFRESH_INTERVAL_MS') @Integer({ min: 1000 }) readonly unleashRefreshIntervalMs: number = 15000;
}
