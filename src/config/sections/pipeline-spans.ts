import { Matches } from 'class-validator';
import { Text, Variable } from '../variable';

/** The control-plane spans (SPEC §10): pipeline, job and queue-wait spans the service emits itself. */
export class PipelineSpansConfig {
  /** `service.name` of the pipeline, job and queue-wait spans; never `runner`, which is GitLab Runner's. */
  @Variable('PIPELINE_SPANS_SERVICE_NAME')
  @Text()
  @Matches(/^(?!runner$)/, { message: 'must not be runner: that is the name GitLab Runner exports under' })
  readonly serviceName: string = 'gitlab-ci';
}
