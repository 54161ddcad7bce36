import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import { PipelineTrace, Stages } from './pipeline-trace';
import { randomSource } from './seeded-random';

/**
 * One project's pipelines with one cause injected into the last (issue 59's scripted agent): 24 pipelines on main,
 * one an hour, six jobs over four stages joined by `needs:`, noise on every part (GitLab's delay, the queue wait,
 * each runner stage), and in the last pipeline exactly one cause, chosen by the seed: a runner stage of one job much
 * slower, one job's tag set short of runners (a long queue wait), or one job failed and retried. What the seed draws
 * (the project's shape, the noise, the cause and its size) is drawn whether or not the cause is injected, so the
 * world without it (`inject: false`) is the same world, the control a test compares with.
 *
 * The cause lands on a job of the last pipeline's critical path: a job off the path that gets slower without
 * becoming critical makes no pipeline slower, so it is no cause to find. The project is shaped so that noise alone
 * cannot move the path (the two test jobs share their other stages, and one's script is at least twice the other's).
 */

export type CauseKind = 'stage' | 'queue' | 'retry';

/** What a person reading the pipelines would name as why the last one was slower. */
export interface InjectedCause {
  readonly kind: CauseKind;
  readonly job: string;
  /** The part of the path it shows in: the runner stage, `queue`, or `retry`. */
  readonly part: string;
  /** The tag set of the runner that took the job, in the reads' form (sorted, joined by ','). */
  readonly tags: string;
  /** What was added (the stage's or queue's extra seconds; for a retry, the failed attempt from its pending to the retry's pending). */
  readonly seconds: number;
  /** For a retry: a person retried it (a wait before the retry), or GitLab's `retry:` did at once. */
  readonly retriedBy?: 'person' | 'retry_keyword';
}

export interface InjectedCauseWorld {
  readonly seed: number;
  readonly projectId: number;
  readonly pipelineIds: readonly number[];
  /** The last pipeline: the one asked about. */
  readonly target: { readonly pipelineId: number; readonly createdAt: string };
  /** Null when built with `inject: false`; what would have been injected is then in `wouldInject`. */
  readonly cause: InjectedCause | null;
  readonly wouldInject: InjectedCause;
  readonly traces: readonly PipelineTrace[];
  /** Each export as the collector received it. */
  readonly exports: OtlpResourceSpans[];
}

export interface InjectedCauseOptions {
  readonly projectId: number;
  readonly inject: boolean;
  /** The last pipeline is created an hour before this (epoch ms). */
  readonly now?: number;
}

export const PIPELINES = 24;
/** The smallest and largest injected change, seconds: what a person would call the cause against ±10 % noise. */
export const INJECTED_SECONDS = { min: 45, max: 120 } as const;

const HOUR = 3_600_000;
const RUNNER_STAGES = ['prepare_executor', 'pull_image', 'get_sources', 'restore_cache', 'step_script', 'archive_cache', 'upload_artifacts'] as const;
type RunnerStage = (typeof RUNNER_STAGES)[number];
/** Stages a slowdown is injected into: the ones that grow in practice (a cold cache, a bigger image, a slower test). */
const SLOWER_STAGES: readonly RunnerStage[] = ['pull_image', 'get_sources', 'restore_cache', 'step_script', 'upload_artifacts'];

interface JobShape {
  readonly name: string;
  readonly stage: string;
  readonly needs: readonly string[];
  readonly tags: readonly string[];
  readonly runnerId: number;
  /** Typical seconds per runner stage. */
  readonly stages: Readonly<Record<RunnerStage, number>>;
}

interface ProjectShape {
  readonly jobs: readonly JobShape[];
  /** Typical queue wait per tag set (key: the reads' form) and GitLab's typical delay, seconds. */
  readonly queue: ReadonlyMap<string, number>;
  readonly delay: number;
  /** The jobs on every pipeline's critical path, in order. */
  readonly path: readonly string[];
}

export const tagsKey = (tags: readonly string[]): string => [...tags].sort().join(',');

type Random = () => number;
const between = (random: Random, low: number, high: number) => low + (high - low) * random();
const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)];
const tenth = (seconds: number) => Math.round(seconds * 10) / 10;

function stagesOf(random: Random, script: number): Record<RunnerStage, number> {
  return {
    prepare_executor: between(random, 2, 6),
    pull_image: between(random, 5, 25),
    get_sources: between(random, 3, 12),
    restore_cache: between(random, 5, 30),
    step_script: script,
    archive_cache: between(random, 3, 15),
    upload_artifacts: between(random, 2, 10),
  };
}

/** The project's jobs, tags and typical times, drawn once per seed. */
function projectShape(random: Random): ProjectShape {
  const linux = ['docker', 'linux'];
  const other = pick(random, [
    ['docker', 'arm64'],
    ['docker', 'gpu'],
    ['docker', 'large'],
  ]);
  const deployTags = pick(random, [['deploy'], ['deploy', 'production'], ['kubernetes']]);
  // The two test jobs run on the same images and caches; one's script is at most half the other's.
  const longTest = stagesOf(random, between(random, 120, 240));
  const shortTest = { ...longTest, step_script: longTest.step_script * between(random, 0.3, 0.5) };
  const unitLonger = random() < 0.5;
  const jobs: JobShape[] = [
    { name: 'lint', stage: 'test', needs: [], tags: linux, runnerId: 31, stages: stagesOf(random, between(random, 20, 50)) },
    { name: 'build', stage: 'build', needs: [], tags: linux, runnerId: 31, stages: stagesOf(random, between(random, 60, 180)) },
    { name: 'unit', stage: 'test', needs: ['build'], tags: linux, runnerId: 31, stages: unitLonger ? longTest : shortTest },
    { name: 'integration', stage: 'test', needs: ['build'], tags: other, runnerId: 41, stages: unitLonger ? shortTest : longTest },
    { name: 'package', stage: 'package', needs: ['unit', 'integration'], tags: linux, runnerId: 31, stages: stagesOf(random, between(random, 30, 90)) },
    { name: 'deploy', stage: 'deploy', needs: ['package'], tags: deployTags, runnerId: 51, stages: stagesOf(random, between(random, 20, 60)) },
  ];
  const queue = new Map([linux, other, deployTags].map((tags) => [tagsKey(tags), between(random, 2, 12)]));
  return { jobs, queue, delay: between(random, 1, 4), path: ['build', unitLonger ? 'unit' : 'integration', 'package', 'deploy'] };
}

/** What the seed injects into the last pipeline; drawn in full whatever the kind, so every seed draws the same count. */
interface Injection {
  readonly kind: CauseKind;
  readonly job: JobShape;
  /** The added seconds of a slower stage or a longer queue. */
  readonly extra: number;
  readonly stage: RunnerStage;
  /** Where the failed attempt stopped, as a fraction of its script. */
  readonly failedAt: number;
  readonly retriedBy: 'person' | 'retry_keyword';
  /** Seconds from the failure to the retry becoming pending. */
  readonly retryWait: number;
}

function chooseInjection(random: Random, shape: ProjectShape): Injection {
  const kind = pick<CauseKind>(random, ['stage', 'queue', 'retry']);
  const name = pick(random, shape.path);
  const job = shape.jobs.find((candidate) => candidate.name === name)!;
  const extra = tenth(between(random, INJECTED_SECONDS.min, INJECTED_SECONDS.max));
  const stage = pick(random, SLOWER_STAGES);
  const failedAt = between(random, 0.3, 0.95);
  // GitLab's `retry:` makes the next attempt pending at once; a person clicks Retry a while later.
  const retriedBy = random() < 0.5 ? 'person' : 'retry_keyword';
  const retryWait = retriedBy === 'person' ? between(random, 20, 90) : between(random, 0.5, 2);
  return { kind, job, extra, stage, failedAt, retriedBy, retryWait };
}

/** Builds the seed's world: the traces and, when injected, what was injected. */
export function injectedCauseWorld(seed: number, options: InjectedCauseOptions): InjectedCauseWorld {
  const random = randomSource(seed);
  const shape = projectShape(random);
  const chosen = chooseInjection(random, shape);
  const now = options.now ?? Date.now();
  const firstCreated = Math.floor((now - PIPELINES * HOUR) / 1000) * 1000;
  const projectId = options.projectId;

  const traces: PipelineTrace[] = [];
  let wouldInject: InjectedCause | undefined;
  for (let index = 0; index < PIPELINES; index += 1) {
    const pipelineId = projectId * 1000 + index;
    const last = index === PIPELINES - 1;
    const trace = new PipelineTrace(projectId, pipelineId, firstCreated + index * HOUR);
    const noisy = (seconds: number) => tenth(seconds * between(random, 0.9, 1.1));
    const ends = new Map<string, number>();
    let nextJobId = pipelineId * 10;
    for (const job of shape.jobs) {
      const tags = tagsKey(job.tags);
      const stages = Object.fromEntries(RUNNER_STAGES.map((stage) => [stage, noisy(job.stages[stage])])) as Record<RunnerStage, number>;
      let queue = noisy(shape.queue.get(tags)!);
      let pendingAt = tenth(Math.max(0, ...job.needs.map((need) => ends.get(need)!)) + noisy(shape.delay));
      const injectedHere = last && job === chosen.job;
      const runner = { id: job.runnerId, type: 'instance_type', tags: job.tags };
      let retriesCount: number | undefined;
      if (injectedHere && chosen.kind === 'stage') {
        wouldInject = { kind: 'stage', job: job.name, part: chosen.stage, tags, seconds: chosen.extra };
        if (options.inject) stages[chosen.stage] = tenth(stages[chosen.stage] + chosen.extra);
      } else if (injectedHere && chosen.kind === 'queue') {
        wouldInject = { kind: 'queue', job: job.name, part: 'queue', tags, seconds: chosen.extra };
        if (options.inject) queue = tenth(queue + chosen.extra);
      } else if (injectedHere && chosen.kind === 'retry') {
        // The first attempt fails part way through its script; the retry runs as the job always does.
        const failedStages: Stages = RUNNER_STAGES.slice(0, RUNNER_STAGES.indexOf('step_script') + 1).map(
          (stage) => [stage, stage === 'step_script' ? tenth(stages.step_script * chosen.failedAt) : stages[stage]] as const,
        );
        const failedQueue = noisy(shape.queue.get(tags)!);
        const failedEnd = tenth(pendingAt + failedQueue + failedStages.reduce((sum, [, seconds]) => sum + seconds, 0));
        const retryPending = tenth(failedEnd + chosen.retryWait);
        wouldInject = { kind: 'retry', job: job.name, part: 'retry', tags, seconds: tenth(retryPending - pendingAt), retriedBy: chosen.retriedBy };
        if (options.inject) {
          trace.job({
            jobId: nextJobId++,
            name: job.name,
            stage: job.stage,
            status: 'failed',
            queuedAt: pendingAt,
            pickedUpAt: tenth(pendingAt + failedQueue),
            finishedAt: failedEnd,
            stages: failedStages,
            runner,
          });
          pendingAt = retryPending;
          retriesCount = 1;
        }
      }
      const pickedUpAt = tenth(pendingAt + queue);
      const runStages: Stages = RUNNER_STAGES.map((stage) => [stage, stages[stage]] as const);
      const finishedAt = tenth(pickedUpAt + runStages.reduce((sum, [, seconds]) => sum + seconds, 0));
      trace.job({
        jobId: nextJobId++,
        name: job.name,
        stage: job.stage,
        queuedAt: pendingAt,
        pickedUpAt,
        finishedAt,
        stages: runStages,
        runner,
        ...(retriesCount === undefined ? {} : { retriesCount }),
      });
      ends.set(job.name, finishedAt);
    }
    const finishedAt = tenth(Math.max(...ends.values()) + 1);
    trace.pipeline(pipelineId, { status: 'success', finishedAt, ref: 'main', sha: shaOf(projectId, index), source: 'push' });
    traces.push(trace);
  }
  const target = traces[traces.length - 1];
  return {
    seed,
    projectId,
    pipelineIds: traces.map((trace) => trace.rootPipelineId),
    target: { pipelineId: target.rootPipelineId, createdAt: new Date(target.createdAt).toISOString() },
    cause: options.inject ? wouldInject! : null,
    wouldInject: wouldInject!,
    traces,
    exports: traces.flatMap((trace) => trace.resourceSpans()),
  };
}

const shaOf = (projectId: number, index: number) => `${projectId.toString(16).padStart(8, '0')}${index.toString(16).padStart(32, '0')}`;
