import { jobPayloadRequest } from '../../test/fixtures/job-payload';

/** Placeholders no real field holds, replaced per request so every request is a distinct job. */
const JOB_ID_MARK = 900_000_000_001;
const PIPELINE_ID_MARK = 900_000_000_002;
/**
 * Jobs per pipeline, a cycle of sizes from 10 to 40 (GitLab pipelines run about 10 to 40 jobs), 25 on average:
 * consecutive job ids fill one pipeline after another. The decorator pins its head decision once per root
 * pipeline and replica (a store call, then an in-process cache): one pickup in 25 pays for it here, as it would
 * on one replica; with N replicas behind a load balancer, up to N in 25 do.
 */
export const PIPELINE_SIZES: readonly number[] = [24, 10, 38, 16, 30, 12, 40, 22, 34, 18, 28, 14, 36, 20, 32, 26];
const CYCLE_JOBS = PIPELINE_SIZES.reduce((sum, size) => sum + size, 0);
const CYCLE_ENDS = PIPELINE_SIZES.map((_, i) => PIPELINE_SIZES.slice(0, i + 1).reduce((sum, size) => sum + size, 0));

/** The pipeline of a job id under PIPELINE_SIZES: a pure function, so every bench and replica agrees. */
export function pipelineIdOf(jobId: number): number {
  const cycle = Math.floor(jobId / CYCLE_JOBS);
  const within = jobId - cycle * CYCLE_JOBS;
  return cycle * PIPELINE_SIZES.length + CYCLE_ENDS.findIndex((end) => within < end);
}

export interface JobPayloadBodies {
  /** Size of one request body in bytes (ids vary by a few digits). */
  readonly bytes: number;
  /** The JSON body for one job: job id, payload id, CI_JOB_ID and the pipeline ids set. */
  bodyFor(jobId: number): string;
  readonly changesBytes: number;
  /** The same request without its payload, as a caller asking for the changes (`Prefer: return=minimal`) sends it. */
  changesBodyFor(jobId: number): string;
}

function scriptLines(count: number): string[] {
  const lines = ['set -euo pipefail', 'bundle config set path vendor', 'bin/setup-test-db'];
  for (let i = 0; lines.length < count; i++) {
    switch (i % 4) {
      case 0:
        lines.push(`echo "group ${i}"`);
        break;
      case 1:
        lines.push(`bin/rspec spec/unit/part_${i}_spec.rb`);
        break;
      case 2:
        lines.push(`cp tmp/report_${i}.json out/`);
        break;
      default:
        lines.push(`export GROUP_${i}_DONE=1`);
    }
  }
  return lines;
}

function variables(): Array<Record<string, unknown>> {
  const predefined: Array<[string, string]> = [
    ['CI_JOB_ID', String(JOB_ID_MARK)],
    ['CI_JOB_NAME', 'rspec unit 3/16'],
    ['CI_JOB_STAGE', 'test'],
    ['CI_JOB_URL', `https://gitlab.example.com/group/project/-/jobs/${JOB_ID_MARK}`],
    ['CI_PIPELINE_ID', String(PIPELINE_ID_MARK)],
    ['CI_PIPELINE_SOURCE', 'merge_request_event'],
    ['CI_PIPELINE_URL', `https://gitlab.example.com/group/project/-/pipelines/${PIPELINE_ID_MARK}`],
    ['CI_PROJECT_ID', '7'],
    ['CI_PROJECT_NAME', 'project'],
    ['CI_PROJECT_PATH', 'group/project'],
    ['CI_PROJECT_URL', 'https://gitlab.example.com/group/project'],
    ['CI_PROJECT_NAMESPACE', 'group'],
    ['CI_COMMIT_SHA', '3f8a1c2d9e4b5a6f7081928374655647382910ab'],
    ['CI_COMMIT_BEFORE_SHA', '0000000000000000000000000000000000000000'],
    ['CI_COMMIT_REF_NAME', 'feature/job-telemetry'],
    ['CI_COMMIT_REF_SLUG', 'feature-job-telemetry'],
    ['CI_COMMIT_BRANCH', 'feature/job-telemetry'],
    ['CI_COMMIT_MESSAGE', 'Add job telemetry to the runner pickup path\n\nSee the design document.'],
    ['CI_DEFAULT_BRANCH', 'main'],
    ['CI_SERVER_URL', 'https://gitlab.example.com'],
    ['CI_SERVER_VERSION', '18.6.0-ee'],
    ['CI_REGISTRY', 'registry.gitlab.example.com'],
    ['CI_REGISTRY_IMAGE', 'registry.gitlab.example.com/group/project'],
    ['CI_NODE_INDEX', '3'],
    ['CI_NODE_TOTAL', '16'],
    ['GITLAB_USER_LOGIN', 'developer'],
    ['GITLAB_USER_EMAIL', 'developer@example.com'],
    ['RAILS_ENV', 'test'],
    ['BUNDLE_JOBS', '4'],
    ['KNAPSACK_TEST_FILE_PATTERN', 'spec/{models,services,lib}/**/*_spec.rb'],
  ];
  const secret: Array<[string, string]> = [
    ['CI_JOB_TOKEN', 'glcbt-64_opaque-job-token-abcdefghijklmnopqrstu'],
    ['CI_REGISTRY_PASSWORD', 'glcbt-64_opaque-job-token-abcdefghijklmnopqrstu'],
    ['DATABASE_URL', 'postgresql://ci:ci-password@postgres:5432/project_test'],
    ['AWS_SECRET_ACCESS_KEY', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'],
    ['DANGER_GITLAB_API_TOKEN', 'glpat-xxxxxxxxxxxxxxxxxxxx'],
  ];
  return [
    ...predefined.map(([key, value]) => ({ key, value, public: true, masked: false })),
    ...secret.map(([key, value]) => ({ key, value, public: false, masked: true })),
    // An existing TRACEPARENT the decorator has to replace (SPEC §4).
    { key: 'TRACEPARENT', value: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', public: true, masked: false },
  ];
}

/**
 * A job-payload request as GitLab sends it for a large-ish job (~10 KB: three dozen variables, a
 * script of a few hundred lines), in the shape of GitLab's job-request response.
 */
export function jobPayloadBodies(scriptLineCount = 200): JobPayloadBodies {
  const request = jobPayloadRequest({
    job: { id: JOB_ID_MARK, pipeline_id: PIPELINE_ID_MARK, root_pipeline_id: PIPELINE_ID_MARK },
    payload: {
      id: JOB_ID_MARK,
      token: 'glcbt-64_opaque-job-token-abcdefghijklmnopqrstu',
      allow_git_fetch: true,
      job_info: { id: JOB_ID_MARK, name: 'rspec unit 3/16', stage: 'test', project_id: 7, project_name: 'project', time_in_queue_seconds: 4.2 },
      git_info: {
        repo_url: 'https://gitlab-ci-token:[MASKED]@gitlab.example.com/group/project.git',
        ref: 'feature/job-telemetry',
        sha: '3f8a1c2d9e4b5a6f7081928374655647382910ab',
        before_sha: '0000000000000000000000000000000000000000',
        ref_type: 'branch',
        refspecs: [
          '+refs/pipelines/' + PIPELINE_ID_MARK + ':refs/pipelines/' + PIPELINE_ID_MARK,
          '+refs/heads/feature/job-telemetry:refs/remotes/origin/feature/job-telemetry',
        ],
        depth: 20,
      },
      runner_info: { timeout: 3600, runner_session_url: null },
      variables: variables(),
      steps: [
        { name: 'script', script: scriptLines(scriptLineCount), timeout: 3600, when: 'on_success', allow_failure: false },
        { name: 'after_script', script: ['bundle exec rake knapsack:report', 'echo done'], timeout: 3600, when: 'always', allow_failure: true },
      ],
      image: { name: 'registry.gitlab.example.com/group/project/ci:ruby-3.3-pg16', entrypoint: null, ports: [], pull_policy: ['if-not-present'] },
      services: [
        { name: 'postgres:16', alias: 'postgres', entrypoint: null, command: null, ports: [], variables: [{ key: 'POSTGRES_PASSWORD', value: 'ci-password' }] },
        { name: 'redis:7', alias: 'redis', entrypoint: null, command: null, ports: [] },
      ],
      artifacts: [
        { name: 'rspec', untracked: false, paths: ['rspec/', 'knapsack/'], when: 'always', expire_in: '7d', artifact_type: 'archive', artifact_format: 'zip' },
      ],
      cache: [{ key: 'ruby-3.3-gems', untracked: false, paths: ['vendor/bundle'], policy: 'pull', when: 'on_success', fallback_keys: [] }],
      credentials: [{ type: 'registry', url: 'registry.gitlab.example.com', username: 'gitlab-ci-token', password: 'glcbt-64_opaque-job-token' }],
      dependencies: [{ id: 4242, name: 'compile-assets', token: 'glcbt-dependency-token', artifacts_file: { filename: 'artifacts.zip', size: 1048576 } }],
      features: { trace_sections: true, failure_reasons: ['script_failure', 'runner_system_failure', 'job_execution_timeout'] },
    },
  });
  const withJob = (text: string) => {
    const segments = text.split(new RegExp(`(${JOB_ID_MARK}|${PIPELINE_ID_MARK})`));
    return (jobId: number): string => {
      const pipelineId = String(pipelineIdOf(jobId));
      const job = String(jobId);
      let body = '';
      for (let i = 0; i < segments.length; i++) {
        const segment = segments[i];
        body += i % 2 === 0 ? segment : segment === String(JOB_ID_MARK) ? job : pipelineId;
      }
      return body;
    };
  };
  const bodyFor = withJob(JSON.stringify(request));
  const { payload: _, ...runnerAndJob } = request;
  const changesBodyFor = withJob(JSON.stringify(runnerAndJob));
  return { bytes: Buffer.byteLength(bodyFor(1_000_000)), bodyFor, changesBytes: Buffer.byteLength(changesBodyFor(1_000_000)), changesBodyFor };
}
