import { Type } from 'class-transformer';
import {
  IsArray,
  IsIn,
  IsInt,
  IsISO8601,
  IsObject,
  IsOptional,
  IsString,
  Max,
  Min,
  MinLength,
  ValidateNested,
} from 'class-validator';

export const RUNNER_TYPES = ['instance_type', 'group_type', 'project_type'] as const;
export type RunnerType = (typeof RUNNER_TYPES)[number];

/** GitLab ids are positive bigint columns; JSON numbers keep them exact up to 2^53. */
const MAX_ID = Number.MAX_SAFE_INTEGER;

export class RunnerDto {
  @Max(MAX_ID) @Min(1) @IsInt()
  id!: number;

  @IsIn(RUNNER_TYPES)
  runner_type!: RunnerType;

  @IsOptional() @IsString() @MinLength(1)
  token?: string;

  /** The runner's `info.features` from its job request. */
  @IsOptional() @IsObject()
  features?: Record<string, unknown>;
}

export class JobDto {
  @Max(MAX_ID) @Min(1) @IsInt()
  id!: number;

  @Max(MAX_ID) @Min(1) @IsInt()
  project_id!: number;

  @IsOptional() @Max(MAX_ID) @Min(1) @IsInt()
  namespace_id?: number;

  @IsOptional() @Max(MAX_ID) @Min(1) @IsInt()
  root_namespace_id?: number;

  @Max(MAX_ID) @Min(1) @IsInt()
  pipeline_id!: number;

  @Max(MAX_ID) @Min(1) @IsInt()
  root_pipeline_id!: number;

  /** Seconds; GitLab caps job timeouts at one month. */
  @Max(31 * 24 * 3600) @Min(1) @IsInt()
  timeout!: number;

  @IsOptional() @IsISO8601({ strict: true })
  queued_at?: string;

  @IsOptional() @IsString() @MinLength(1)
  token?: string;
}

/** Only the parts of the job payload the decorator writes to are checked; the rest passes through untouched. */
export class PayloadShapeDto {
  @IsOptional() @IsArray()
  variables?: unknown[];

  @IsOptional() @IsObject()
  features?: Record<string, unknown>;
}

export class JobPayloadRequestDto {
  @IsObject() @ValidateNested() @Type(() => RunnerDto)
  runner!: RunnerDto;

  @IsObject() @ValidateNested() @Type(() => JobDto)
  job!: JobDto;

  @IsObject() @ValidateNested() @Type(() => PayloadShapeDto)
  payload!: PayloadShapeDto;
}

/** A job payload in GitLab's job-request response shape. */
export interface JobPayload extends Record<string, unknown> {
  variables?: unknown[];
  features?: Record<string, unknown>;
}

export interface JobPayloadRequest {
  readonly runner: RunnerDto;
  readonly job: JobDto;
  readonly payload: JobPayload;
}
