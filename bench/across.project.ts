/**
 * The one project of the across bench raised to thousands of pipelines (issue 58's "5,000 pipelines of 40 jobs"),
 * written as the control plane and runners would write them: each pipeline a PipelineTrace (the control plane's spans
 * from the real span model, the runner's `job_execution` and its build stages as GitLab Runner exports them), then
 * the job and pipeline spans again with the critical path the control plane writes at the root's end
 * (withCriticalPathAttributes). ClickHouse gets them through the Collector exporter's emulation, so the materialized
 * view fills `otel.ci_job_runs` from real rows; the embedded files get the same exports a line each, as the embedded
 * collector writes them.
 *
 * Seeded per pipeline: the same index gives the same pipeline on both backends and in every run.
 */
import type { OtlpResourceSpans } from '../src/pipeline-spans/pipeline-span-model';
import { withCriticalPathAttributes } from '../test/helpers/critical-path-attributes';
import { normalSource } from '../test/helpers/job-run-rows';
import { JobFacts, PipelineTrace, Stages } from '../test/helpers/pipeline-trace';
import { randomSource } from '../test/helpers/seeded-random';

export const RAISED_JOBS_PER_PIPELINE = 40;
const STAGES = ['build', 'test', 'package', 'deploy'] as const;
/** The job whose restore_cache grows by a minute partway through the month: a regression for the read to find. */
export const SLOWER_JOB = 'test-3';
export const SLOWER_BY_SECONDS = 60;
/** The first pipeline index of the step: three fifths into the month. */
export const slowerFrom = (pipelines: number): number => Math.floor(pipelines * 0.6);
/** Share of jobs that fail and are retried once in the same pipeline, and of pipelines that run their commit again. */
const RETRY_RATE = 0.015;
const RERUN_RATE = 0.03;

/** Runner fleets by the tags GitLab's Job Hook reports for them: ids, type, tags. */
const FLEETS = {
  build: { firstId: 1, runners: 8, type: 'instance_type', tags: ['docker', 'linux'] },
  test: { firstId: 11, runners: 6, type: 'instance_type', tags: ['docker', 'large'] },
  package: { firstId: 1, runners: 8, type: 'instance_type', tags: ['docker', 'linux'] },
  deploy: { firstId: 21, runners: 2, type: 'project_type', tags: ['deploy'] },
} as const;

export interface RaisedProject {
  readonly projectId: number;
  readonly pipelines: number;
  /** Epoch ms the first pipeline was created, and between two creations. */
  readonly firstCreatedAt: number;
  readonly spacingMs: number;
  readonly seed: number;
}

export interface RaisedPipeline {
  readonly pipelineId: number;
  readonly createdAt: number;
  readonly ref: string;
  /** Every export of the pipeline as the collector receives it, the control plane's later versions included. */
  readonly exports: OtlpResourceSpans[];
}

export const raisedPipelineId = (index: number): number => 3_000_000 + index;

/** The ref of pipeline `index`: main for four pipelines in five, else one of four merge-request branches. */
export const raisedRef = (index: number): string => (index % 5 === 4 ? `feature/${['cache', 'docs', 'arm', 'deps'][index % 4]}` : 'main');

/** Pipeline `index` of the project: four stages of ten jobs, each stage pending once the one before ended. */
export function raisedPipeline(project: RaisedProject, index: number): RaisedPipeline {
  const random = randomSource(project.seed * 1_000_003 + index);
  const normal = normalSource(random);
  const logNormal = (median: number, sigma: number) => Math.max(0.001, Math.round(median * Math.exp(sigma * normal()) * 1000) / 1000);
  const pipelineId = raisedPipelineId(index);
  const createdAt = project.firstCreatedAt + index * project.spacingMs;
  const ref = raisedRef(index);
  const trace = new PipelineTrace(project.projectId, pipelineId, createdAt);
  const slower = index >= slowerFrom(project.pipelines);
  let nextJob = 0;
  let stageStart = 0;
  for (const [stageIndex, stage] of STAGES.entries()) {
    const pending = stageStart + logNormal(2, 0.5);
    let stageEnd = pending;
    for (let k = 0; k < RAISED_JOBS_PER_PIPELINE / STAGES.length; k++) {
      const name = `${stage}-${k}`;
      const fleet = FLEETS[stage];
      const attempt = (queuedAt: number, status: 'success' | 'failed', retriesCount?: number): number => {
        const stages: Stages = [
          ['prepare_executor', logNormal(3, 0.2)],
          ['get_sources', logNormal(4, 0.2)],
          // A cache miss in one restore of twenty: nothing to download.
          ['restore_cache', (random() < 0.05 ? logNormal(1, 0.3) : logNormal(15, 0.25)) + (slower && name === SLOWER_JOB ? SLOWER_BY_SECONDS : 0)],
          ['step_script', status === 'failed' ? logNormal(20, 0.5) : logNormal(60 + 25 * ((k * 7 + stageIndex * 3) % 10), 0.15)],
          ['after_script', logNormal(1, 0.2)],
          ['archive_cache', logNormal(5, 0.3)],
          ['upload_artifacts', logNormal(2, 0.3)],
        ];
        const pickedUpAt = queuedAt + logNormal(8, 0.6);
        const finishedAt = pickedUpAt + stages.reduce((sum, [, seconds]) => sum + seconds, 0) + 0.5;
        const facts: JobFacts = {
          jobId: pipelineId * 100 + nextJob++,
          name,
          stage,
          status,
          queuedAt,
          pickedUpAt,
          finishedAt,
          stages,
          runner: { id: fleet.firstId + Math.floor(random() * fleet.runners), type: fleet.type, tags: fleet.tags },
          ...(retriesCount === undefined ? {} : { retriesCount }),
        };
        trace.job(facts);
        return finishedAt;
      };
      let end = random() < RETRY_RATE ? attempt(pending, 'failed') : null;
      // A person retries the failed job a little later; its second attempt passes.
      end = end === null ? attempt(pending, 'success') : attempt(end + logNormal(40, 0.5), 'success', 1);
      stageEnd = Math.max(stageEnd, end);
    }
    stageStart = stageEnd;
  }
  trace.pipeline(pipelineId, {
    status: 'success',
    finishedAt: stageStart + 1,
    ref,
    sha: shaOf(project, index),
    source: ref === 'main' ? 'push' : 'merge_request_event',
  });
  return { pipelineId, createdAt, ref, exports: withCriticalPathAttributes(trace.resourceSpans()) };
}

/** The commit pipeline `index` ran: its own, or (a rerun) the one of the pipeline before it. */
function shaOf(project: RaisedProject, index: number): string {
  let at = index;
  while (at > 0 && randomSource(project.seed * 7919 + at)() < RERUN_RATE) at -= 1;
  return `${project.projectId.toString(16).padStart(8, '0')}${at.toString(16).padStart(32, '0')}`;
}
