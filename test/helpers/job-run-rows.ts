import type { JobRunRow } from '../../src/across/job-run';
import { RUNNER_PARTS, RunnerPart } from '../../src/critical-path/critical-path';
import { randomSource } from './seeded-random';

/**
 * Generated job-run rows (SPEC §13) for the reads across pipelines: a project of stage-ordered pipelines whose jobs
 * take log-normal times around their medians, and a fleet of runners replayed first in, first out. The tests, the
 * benches and the demo build their worlds here; every world is the same for the same seed.
 */

/** A job of the generated project: its stage and the median of each runner stage, ms (0: the job has no such stage). */
export interface GeneratedJob {
  readonly name: string;
  readonly stage: string;
  readonly partsMs: Partial<Record<RunnerPart, number>>;
  readonly tags?: string;
  readonly runnerType?: string;
}

export interface ProjectOptions {
  readonly seed: number;
  readonly pipelines?: number;
  readonly jobs?: readonly GeneratedJob[];
  /** σ of the log-normal noise on every time (0.15: about ±15 %). */
  readonly noise?: number;
  /** A step: from the pipeline at this index on, the job's part takes this much longer. */
  readonly step?: { readonly job: string; readonly part: RunnerPart; readonly fromPipeline: number; readonly addMs: number };
  /** Share of runs that fail and are retried once in the same pipeline (a flaky job). */
  readonly retryRate?: number;
  /** Share of pipelines that run the commit of the pipeline before them again. */
  readonly rerunRate?: number;
  /** Share of runs whose runner said whether its cache hit (the rest leave it to inference). */
  readonly cacheKnownRate?: number;
  /** Share of cache restores that miss: a restore of a twentieth of the usual time. */
  readonly cacheMissRate?: number;
  /** Adjusted counts (SPEC §11) drawn per pipeline. */
  readonly adjustedCounts?: readonly number[];
  readonly firstPipelineId?: number;
  readonly startAt?: number;
  /** Between pipeline creations, ms. */
  readonly intervalMs?: number;
}

/** A project of four stages in which `integration` (stage `test`) holds the pipeline up. */
export const DEFAULT_JOBS: readonly GeneratedJob[] = [
  {
    name: 'compile',
    stage: 'build',
    partsMs: {
      prepare_executor: 3000,
      pull_image: 8000,
      get_sources: 4000,
      restore_cache: 20000,
      step_script: 120000,
      archive_cache: 10000,
      upload_artifacts: 5000,
      other: 1000,
    },
  },
  {
    name: 'unit',
    stage: 'test',
    partsMs: { prepare_executor: 3000, pull_image: 8000, get_sources: 4000, restore_cache: 15000, step_script: 150000, archive_cache: 8000, other: 1000 },
  },
  { name: 'lint', stage: 'test', partsMs: { prepare_executor: 3000, pull_image: 5000, get_sources: 4000, step_script: 40000, other: 500 } },
  {
    name: 'integration',
    stage: 'test',
    partsMs: {
      prepare_executor: 3000,
      pull_image: 12000,
      get_sources: 4000,
      restore_cache: 20000,
      step_script: 300000,
      after_script: 2000,
      archive_cache: 10000,
      upload_artifacts: 4000,
      other: 1000,
    },
    tags: 'docker,large',
  },
  {
    name: 'image',
    stage: 'package',
    partsMs: { prepare_executor: 3000, pull_image: 6000, get_sources: 4000, step_script: 90000, upload_artifacts: 3000, other: 800 },
  },
  { name: 'deploy', stage: 'deploy', partsMs: { prepare_executor: 2000, get_sources: 3000, step_script: 30000, other: 500 }, runnerType: 'project_type' },
];

/** A standard normal draw (Box–Muller). */
export function normalSource(random: () => number): () => number {
  return () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
}

interface Run {
  readonly job: GeneratedJob;
  readonly attempt: number;
  readonly retried: boolean;
  readonly status: string;
  readonly pendingAt: number;
  readonly waitMs: number;
  readonly waitingFor: JobRunRow['waitingFor'];
  readonly queueMs: number;
  readonly partsMs: Record<RunnerPart, number>;
  readonly cacheResult: 'hit' | 'miss' | null;
  readonly end: number;
  onPath: boolean;
  slackMs: number;
}

/**
 * Pipelines of stages: a stage's jobs become pending together when the stage before it ended (after a GitLab delay),
 * wait in the queue, and run their stages; a retried job's second attempt becomes pending after its first ended.
 * The critical path is, per stage, the job that ended last (both attempts when it was retried), so the on-path rows'
 * wait, queue and run add up to the pipeline's duration exactly.
 */
export function generatedProject(options: ProjectOptions): JobRunRow[] {
  const random = randomSource(options.seed);
  const normal = normalSource(random);
  const noise = options.noise ?? 0.15;
  const jobs = options.jobs ?? DEFAULT_JOBS;
  const stages = [...new Set(jobs.map((job) => job.stage))];
  const pipelines = options.pipelines ?? 60;
  const firstPipelineId = options.firstPipelineId ?? 1000;
  const startAt = options.startAt ?? Date.UTC(2026, 10, 2, 8);
  const intervalMs = options.intervalMs ?? 20 * 60_000;
  const logNormal = (median: number, sigma = noise) => (median <= 0 ? 0 : Math.max(1, Math.round(median * Math.exp(sigma * normal()))));
  const rows: JobRunRow[] = [];
  let jobId = firstPipelineId * 100;
  let sha = '';

  for (let index = 0; index < pipelines; index++) {
    const pipelineId = firstPipelineId + index;
    if (sha === '' || random() >= (options.rerunRate ?? 0.05))
      sha = Math.floor(random() * 2 ** 48)
        .toString(16)
        .padStart(12, '0');
    const createdAt = startAt + index * intervalMs + Math.round(random() * intervalMs * 0.5);
    const adjustedCount = options.adjustedCounts === undefined ? 1 : options.adjustedCounts[Math.floor(random() * options.adjustedCounts.length)];
    const runs: Run[] = [];
    let previousEnd = createdAt;
    for (const stage of stages) {
      const pendingAt = previousEnd + logNormal(1500, 0.5);
      const stageRuns: Run[][] = [];
      for (const job of jobs.filter((candidate) => candidate.stage === stage)) {
        const attemptRun = (attempt: number, pending: number, waitStart: number, fails: boolean): Run => {
          const partsMs = Object.fromEntries(RUNNER_PARTS.map((part) => [part, logNormal(job.partsMs[part] ?? 0)])) as Record<RunnerPart, number>;
          let cacheResult: Run['cacheResult'] = null;
          if (partsMs.restore_cache > 0) {
            const miss = random() < (options.cacheMissRate ?? 0.1);
            if (miss) partsMs.restore_cache = Math.max(1, Math.round(partsMs.restore_cache / 20));
            if (random() < (options.cacheKnownRate ?? 0.5)) cacheResult = miss ? 'miss' : 'hit';
          }
          if (options.step !== undefined && options.step.job === job.name && index >= options.step.fromPipeline)
            partsMs[options.step.part] += options.step.addMs;
          const queueMs = logNormal(3000, 0.6);
          const run = RUNNER_PARTS.reduce((sum, part) => sum + partsMs[part], 0);
          return {
            job,
            attempt,
            retried: fails,
            status: fails ? 'failed' : 'success',
            pendingAt: pending,
            waitMs: pending - waitStart,
            waitingFor: attempt > 1 ? 'retry' : 'gitlab',
            queueMs,
            partsMs,
            cacheResult,
            end: pending + queueMs + run,
            onPath: false,
            slackMs: 0,
          };
        };
        const first = attemptRun(1, pendingAt, previousEnd, random() < (options.retryRate ?? 0.05));
        const attempts = [first];
        if (first.retried) attempts.push(attemptRun(2, first.end + logNormal(30000, 0.5), first.end, false));
        stageRuns.push(attempts);
      }
      const stageEnd = Math.max(...stageRuns.map((attempts) => attempts[attempts.length - 1].end));
      const last = stageRuns.find((attempts) => attempts[attempts.length - 1].end === stageEnd)!;
      for (const attempts of stageRuns) {
        for (const run of attempts) {
          run.onPath = attempts === last;
          run.slackMs = run.onPath || run.retried ? 0 : stageEnd - run.end;
          runs.push(run);
        }
      }
      previousEnd = stageEnd;
    }
    for (const run of runs) {
      const tags = run.job.tags ?? 'docker,linux';
      jobId += 1;
      rows.push({
        projectId: 7,
        pipelineId,
        rootPipelineId: pipelineId,
        ref: 'main',
        sha,
        source: 'push',
        pipelineCreatedAt: createdAt,
        pipelineFinishedAt: previousEnd,
        pipelineStatus: 'success',
        jobId,
        name: run.job.name,
        stage: run.job.stage,
        attempt: run.attempt,
        retried: run.retried,
        status: run.status,
        failureReason: run.status === 'failed' ? 'script_failure' : null,
        allowFailure: false,
        runnerId: 1 + Math.floor(random() * 4) + (tags === 'docker,linux' ? 0 : 10),
        runnerType: run.job.runnerType ?? 'instance_type',
        runnerTags: tags,
        createdAt,
        pendingAt: run.pendingAt,
        startedAt: run.pendingAt + run.queueMs,
        finishedAt: run.end,
        waitMs: run.waitMs,
        waitingFor: run.waitingFor,
        queueMs: run.queueMs,
        partsMs: run.partsMs,
        runnerSpans: true,
        cacheResult: run.cacheResult,
        onCriticalPath: run.onPath,
        slackMs: run.slackMs,
        adjustedCount,
      });
    }
  }
  return rows;
}

/** A run's parts: those given, the rest 0. */
export const partsOf = (given: Partial<Record<RunnerPart, number>> = {}): Record<RunnerPart, number> =>
  Object.fromEntries(RUNNER_PARTS.map((part) => [part, given[part] ?? 0])) as Record<RunnerPart, number>;

/** A job run with every field a test does not care about at a plain value. */
export function jobRunRow(overrides: Partial<JobRunRow> = {}): JobRunRow {
  const partsMs = partsOf();
  return {
    projectId: 7,
    pipelineId: 1,
    rootPipelineId: 1,
    ref: 'main',
    sha: 'a1b2c3',
    source: 'push',
    pipelineCreatedAt: 0,
    pipelineFinishedAt: 100_000,
    pipelineStatus: 'success',
    jobId: 1,
    name: 'test',
    stage: 'test',
    attempt: 1,
    retried: false,
    status: 'success',
    failureReason: null,
    allowFailure: false,
    runnerId: 1,
    runnerType: 'instance_type',
    runnerTags: 'docker,linux',
    createdAt: 0,
    pendingAt: 0,
    startedAt: 0,
    finishedAt: 0,
    waitMs: 0,
    waitingFor: 'gitlab',
    queueMs: 0,
    partsMs,
    runnerSpans: true,
    cacheResult: null,
    onCriticalPath: true,
    slackMs: 0,
    adjustedCount: 1,
    ...overrides,
  };
}

export interface FleetOptions {
  readonly seed: number;
  /** Runners of the tag set, each taking one job at a time. */
  readonly runners: number;
  readonly jobs: number;
  /** Offered load: mean run time × arrival rate ÷ runners. */
  readonly utilization?: number;
  readonly medianRunMs?: number;
  readonly tags?: string;
  /** GitLab's pickup latency, drawn uniformly in [min, max] ms per job: the least a job waits with a runner free. */
  readonly pickupLatencyMs?: readonly [min: number, max: number];
  readonly jobsPerPipeline?: number;
  readonly firstPipelineId?: number;
  readonly startAt?: number;
}

/**
 * A fleet's recording: jobs arriving at random (a Poisson process) with log-normal run times (σ 0.5), taken first in,
 * first out by the first of `runners` slots to come free, after the pickup latency. Pending, started and finished
 * as GitLab records them; each pipeline's first job on its critical path.
 */
export function recordedFleet(options: FleetOptions): JobRunRow[] {
  const random = randomSource(options.seed);
  const normal = normalSource(random);
  const medianRunMs = options.medianRunMs ?? 5 * 60_000;
  const meanRunMs = medianRunMs * Math.exp(0.5 ** 2 / 2);
  const meanGapMs = meanRunMs / ((options.utilization ?? 0.9) * options.runners);
  const [latencyMin, latencyMax] = options.pickupLatencyMs ?? [0, 0];
  const perPipeline = options.jobsPerPipeline ?? 4;
  const firstPipelineId = options.firstPipelineId ?? 5000;
  const free = new Array<number>(options.runners).fill(0);
  const rows: JobRunRow[] = [];
  let arrival = options.startAt ?? Date.UTC(2026, 10, 2);
  let pipelineCreatedAt = arrival;
  for (let i = 0; i < options.jobs; i++) {
    arrival += Math.round(-Math.log(1 - random()) * meanGapMs);
    if (i % perPipeline === 0) pipelineCreatedAt = arrival;
    const runMs = Math.max(1000, Math.round(medianRunMs * Math.exp(0.5 * normal())));
    const latency = Math.round(latencyMin + random() * (latencyMax - latencyMin));
    // The earliest-free runner, by a plain scan: the recording is made without the replay's heap.
    let slot = 0;
    for (let s = 1; s < free.length; s++) if (free[s] < free[slot]) slot = s;
    const startedAt = Math.max(arrival + latency, free[slot]);
    free[slot] = startedAt + runMs;
    const pipelineId = firstPipelineId + Math.floor(i / perPipeline);
    rows.push(
      jobRunRow({
        pipelineId,
        rootPipelineId: pipelineId,
        pipelineCreatedAt,
        pipelineFinishedAt: startedAt + runMs,
        jobId: firstPipelineId * 100 + i,
        name: `job ${i % perPipeline}`,
        runnerId: slot + 1,
        runnerTags: options.tags ?? 'docker,arm64',
        createdAt: arrival,
        pendingAt: arrival,
        startedAt,
        finishedAt: startedAt + runMs,
        waitMs: arrival - pipelineCreatedAt,
        queueMs: startedAt - arrival,
        partsMs: partsOf({ step_script: runMs }),
        onCriticalPath: i % perPipeline === 0,
        slackMs: i % perPipeline === 0 ? 0 : null,
      }),
    );
  }
  return rows;
}
