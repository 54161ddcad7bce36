import { Matches } from 'class-validator';
import { Integer, Text, Variable } from '../variable';

/** The control-plane spans (SPEC §10): pipeline, job and queue-wait spans the service emits itself. */
export class PipelineSpansConfig {
  /** `service.name` of the pipeline, job and queue-wait spans; never `runner`, which is GitLab Runner's. */
  @Variable('PIPELINE_SPANS_SERVICE_NAME')
  @Text()
  @Matches(/^(?!runner$)/, { message: 'must not be runner: that is the name GitLab Runner exports under' })
  readonly serviceName: string = 'gitlab-ci';

  /**
   * How many values of `cicd.pipeline.name` (a project's path, its child pipelines apart) the CI/CD metrics take; a
   * project seen after that many is counted under `_OTHER`, so the series stay bounded whatever GitLab sends.
   */
  @Variable('CICD_METRICS_MAX_PIPELINE_NAMES') @Integer({ min: 1 }) readonly cicdMetricsMaxPipelineNames: number = 1000;
}
