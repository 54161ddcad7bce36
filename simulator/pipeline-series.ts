import { createHash } from 'node:crypto';
import { BUILD_STAGES, BuildStage } from './stock-runner';
import { randomSource } from './seeded-random';

/**
 * A series of pipelines on one ref, as GitLab would have scheduled them on one runner, for the reads across pipelines
 * (SPEC §13) to find what was planted in it: from one commit on, one job's `restore_cache` takes a minute longer.
 * Pure and seeded: the same options give the same pipelines, to the millisecond.
 *
 * GitLab's rules, as the critical path reads them: a job becomes pending a second after its stage's last job ended
 * (the first a second after the pipeline's creation); the runner, which runs one job at a time, takes the pending job
 * that became pending first (the lower id on a tie) a few seconds after it is free (it polls); the runner starts a
 * second after taking it, and GitLab marks it finished on the whole second after the runner's last stage and one
 * more. GitLab writes a Pipeline Hook's times to the second, so every time GitLab says falls on one.
 */

export interface SeriesJob {
  readonly id: number;
  readonly name: string;
  readonly stage: string;
  readonly status: 'success' | 'failed';
  readonly createdAt: Date;
  readonly pendingAt: Date;
  /** When the runner took it: GitLab's `started_at`. */
  readonly startedAt: Date;
  readonly finishedAt: Date;
  /** When the runner's first stage began (a second after it took the job). */
  readonly runnerStartedAt: Date;
  readonly stageSeconds: Readonly<Record<BuildStage, number>>;
  /** 1 for an automatic retry (`retry: 1`) of a failed attempt. */
  readonly retriesCount: number;
}

export interface SeriesPipeline {
  readonly id: number;
  /** The commit it ran: one per pipeline, each a push. */
  readonly sha: string;
  readonly createdAt: Date;
  readonly finishedAt: Date;
  readonly jobs: readonly SeriesJob[];
  /** Whether the planted slowdown is in it. */
  readonly slow: boolean;
}

export interface SeriesOptions {
  /** How many pipelines, one created every `everyMs`, the last `everyMs` before `endBefore`. */
  readonly count: number;
  readonly firstPipelineId: number;
  readonly everyMs: number;
  readonly endBefore: Date;
  /** The index of the first pipeline whose `slowJob` restores its cache `slowdownSeconds` longer. */
  readonly slowFrom: number;
  readonly slowJob: string;
  readonly slowdownSeconds: number;
  /** The index of a pipeline whose first job fails once (a flaky build) and is retried by `retry: 1`. */
  readonly flakyAt: number;
  readonly seed: number;
}

/**
 * Each job's stages (seconds) when nothing is wrong; in job id order, which on a tie is the order GitLab hands them
 * out: lint, the shorter, before test, so test waits for the one runner.
 */
const JOBS: ReadonlyArray<{ readonly name: string; readonly stage: string; readonly stageSeconds: Readonly<Record<BuildStage, number>> }> = [
  {
    name: 'build',
    stage: 'build',
    stageSeconds: { prepare_executor: 4, get_sources: 3, restore_cache: 6, step_script: 48, after_script: 1, archive_cache: 5, upload_artifacts: 3 },
  },
  {
    name: 'lint',
    stage: 'test',
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 1, step_script: 21, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
  },
  {
    name: 'test',
    stage: 'test',
    stageSeconds: { prepare_executor: 4, get_sources: 2, restore_cache: 7, step_script: 95, after_script: 1, archive_cache: 2, upload_artifacts: 4 },
  },
];
/** The flaky build's failed attempt: its script stops early, nothing is archived or uploaded. */
const FAILED_BUILD: Readonly<Record<BuildStage, number>> = {
  prepare_executor: 4,
  get_sources: 3,
  restore_cache: 6,
  step_script: 17,
  after_script: 1,
  archive_cache: 0,
  upload_artifacts: 0,
};
const SECOND = 1000;
/** Each stage varies by this share of its time (one standard deviation), at least a tenth of a second. */
const SPREAD = 0.06;

/** The planted commit and the others: 40 hex digits, stable for a pipeline id. */
export const commitOf = (pipelineId: number) => createHash('sha1').update(`demo commit of pipeline ${pipelineId}`).digest('hex');

const nextSecond = (ms: number) => Math.ceil(ms / SECOND) * SECOND;

export function pipelineSeries(options: SeriesOptions): SeriesPipeline[] {
  const random = randomSource(options.seed);
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const vary = (seconds: number) => (seconds === 0 ? 0 : Math.max(0.1, Math.round(seconds * (1 + SPREAD * normal()) * 10) / 10));
  // A runner polls: it takes a job two to four seconds after both are ready.
  const pollSeconds = () => 2 + Math.floor(random() * 3);

  const firstCreated = Math.floor((options.endBefore.getTime() - options.count * options.everyMs) / SECOND) * SECOND;
  let runnerFreeAt = 0;
  const pipelines: SeriesPipeline[] = [];
  for (let index = 0; index < options.count; index++) {
    const pipelineId = options.firstPipelineId + index;
    const created = firstCreated + index * options.everyMs;
    const slow = index >= options.slowFrom;
    const jobs: SeriesJob[] = [];
    const run = (
      id: number,
      name: string,
      stage: string,
      pendingAt: number,
      stageSeconds: Record<BuildStage, number>,
      status: 'success' | 'failed',
      retriesCount = 0,
    ) => {
      const startedAt = Math.max(pendingAt, runnerFreeAt) + pollSeconds() * SECOND;
      const runnerStartedAt = startedAt + SECOND;
      const runnerEnd = runnerStartedAt + Math.round(BUILD_STAGES.reduce((sum, part) => sum + stageSeconds[part], 0) * SECOND);
      const finishedAt = nextSecond(runnerEnd) + SECOND;
      runnerFreeAt = finishedAt;
      const job: SeriesJob = {
        id,
        name,
        stage,
        status,
        createdAt: new Date(created),
        pendingAt: new Date(pendingAt),
        startedAt: new Date(startedAt),
        finishedAt: new Date(finishedAt),
        runnerStartedAt: new Date(runnerStartedAt),
        stageSeconds,
        retriesCount,
      };
      jobs.push(job);
      return job;
    };
    const stagesOf = (job: (typeof JOBS)[number]) => {
      const varied = Object.fromEntries(BUILD_STAGES.map((part) => [part, vary(job.stageSeconds[part])])) as Record<BuildStage, number>;
      if (slow && job.name === options.slowJob) varied.restore_cache = Math.round((varied.restore_cache + options.slowdownSeconds) * 10) / 10;
      return varied;
    };

    const [build, ...tests] = JOBS;
    const jobId = (n: number) => pipelineId * 10 + n;
    const flaky = index === options.flakyAt;
    let built = run(jobId(1), build.name, build.stage, created + SECOND, flaky ? { ...FAILED_BUILD } : stagesOf(build), flaky ? 'failed' : 'success');
    // `retry: 1`: GitLab makes a new job as the attempt fails, pending a second later.
    if (flaky) built = run(jobId(JOBS.length + 1), build.name, build.stage, built.finishedAt.getTime() + SECOND, stagesOf(build), 'success', 1);
    const testsPending = built.finishedAt.getTime() + SECOND;
    tests.forEach((job, i) => run(jobId(i + 2), job.name, job.stage, testsPending, stagesOf(job), 'success'));
    const finishedAt = new Date(Math.max(...jobs.map((job) => job.finishedAt.getTime())) + SECOND);
    pipelines.push({ id: pipelineId, sha: commitOf(pipelineId), createdAt: new Date(created), finishedAt, jobs, slow });
  }
  return pipelines;
}
