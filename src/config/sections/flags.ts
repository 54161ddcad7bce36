import { Transform } from 'class-transformer';
import { IsInt, IsOptional, IsString, Min, MinLength } from 'class-validator';
import { IsHttpUrl, toInt, Variable } from '../variable';

/** Flags (SPEC §4 "Flags"): a file in Unleash's format, or an Unleash server. */
export class FlagsConfig {
  @Variable('FLAGS_FILE')
  @IsString()
  @MinLength(1)
  readonly file: string = 'config/flags.json';

  @Variable('UNLEASH_URL')
  @IsOptional()
  @IsHttpUrl()
  readonly unleashUrl?: string;

  @Variable('UNLEASH_API_TOKEN')
  @IsOptional()
  @IsString()
  readonly unleashApiToken?: string;

  @Variable('UNLEASH_APP_NAME')
  @IsString()
  @MinLength(1)
  readonly unleashAppName: string = 'ci-job-telemetry';

  @Variable('UNLEASH_REFRESH_INTERVAL_MS')
  @Transform(toInt)
  @IsInt()
  @Min(1000)
  readonly unleashRefreshIntervalMs: number = 15000;
}
