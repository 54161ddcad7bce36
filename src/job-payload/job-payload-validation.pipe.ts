import { BadRequestException, Injectable, PipeTransform } from '@nestjs/common';
import { plainToInstance } from 'class-transformer';
import { validateSync, ValidationError } from 'class-validator';
import {
  JobDto,
  JobPayload,
  JobPayloadRequest,
  JobPayloadRequestDto,
  PayloadShapeDto,
  RunnerDto,
} from './dto/job-payload-request.dto';

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export interface FieldProblem {
  readonly field: string;
  readonly problems: string[];
}

function flatten(errors: ValidationError[], prefix = ''): FieldProblem[] {
  return errors.flatMap((error) => {
    const field = prefix + error.property;
    // class-validator's messages start with the bare property name; name the full path instead.
    const problems = Object.values(error.constraints ?? {}).map((message) =>
      message.startsWith(`${error.property} `) ? field + message.slice(error.property.length) : `${field}: ${message}`,
    );
    const own = problems.length > 0 ? [{ field, problems }] : [];
    return [...own, ...flatten(error.children ?? [], `${field}.`)];
  });
}

/**
 * Validates the request with class-validator without copying the job payload: Nest's
 * ValidationPipe would run class-transformer over a body of up to 8 MiB of scripts and variables
 * on every job pickup. Only `runner`, `job` and the two payload fields the decorator writes are checked.
 */
@Injectable()
export class JobPayloadValidationPipe implements PipeTransform<unknown, JobPayloadRequest> {
  transform(body: unknown): JobPayloadRequest {
    const request = isPlainObject(body) ? body : {};
    const view = new JobPayloadRequestDto();
    view.runner = isPlainObject(request.runner) ? plainToInstance(RunnerDto, request.runner) : (request.runner as RunnerDto);
    view.job = isPlainObject(request.job) ? plainToInstance(JobDto, request.job) : (request.job as JobDto);
    view.payload = isPlainObject(request.payload)
      ? Object.assign(new PayloadShapeDto(), { variables: request.payload.variables, features: request.payload.features })
      : (request.payload as PayloadShapeDto);

    const problems = flatten(validateSync(view, { forbidUnknownValues: false, stopAtFirstError: true }));
    if (problems.length > 0) {
      throw new BadRequestException({
        error: `invalid request: ${problems.flatMap((p) => p.problems).join('; ')}`,
        fields: problems,
      });
    }
    return { runner: view.runner, job: view.job, payload: request.payload as JobPayload };
  }
}
