import { randomSource } from '../helpers/seeded-random';
import fc from 'fast-check';

/**
 * A model of GitLab's scheduler (SPEC §12; issue 56), the reference the critical path is checked against: it runs
 * generated pipelines in simulated time as GitLab does and knows which dependency released each job.
 *
 * - Stages, and `needs:` that skip them: a job becomes ready when its last dependency finishes (a job without
 *   `needs:`, when every job of the stages before it has), then pending after GitLab's own delay (a few hundred ms).
 * - Parallel jobs (`name 1/3`…), each a job of its own.
 * - `when: manual` (a person plays it, seconds to hours after it became playable), `when: delayed` (pending
 *   `start_in` after it became ready).
 * - One `resource_group` shared by the whole trace and held by another project's job until a given time: a job of the
 *   group waits (`waiting_for_resource`) until the resource is free, holds it until it ends.
 * - Retries: `retry:` runs a failed attempt again at once (a new job, same name, `retries_count` + 1); a person
 *   re-runs a job after the root pipeline ended (the pipeline reopens and ends again).
 * - Child pipelines through a trigger job, with `strategy: depend` (the trigger lasts as its child, which holds its
 *   parent up) or without (the trigger succeeds as it creates the child, which may end after its parent).
 * - Limited runners per tag: a pending job waits for a free runner of its tag (first come, first served).
 *
 * Every time is a whole millisecond; the random delays come from a generated seed, the shape from fast-check, so a
 * failure shrinks to a small pipeline.
 */

export type When = 'on_success' | 'manual' | 'delayed';
export type WaitKind = 'gitlab' | 'manual' | 'retry' | 'delayed' | 'resource';

export interface JobShape {
  /** Stage index, from 0. */
  readonly stage: number;
  /** Indices of earlier jobs of the pipeline it needs; undefined: the stages before it. */
  readonly needs?: readonly number[];
  readonly parallel: number;
  readonly runSeconds: number;
  readonly tag: 0 | 1;
  readonly when: When;
  /** A manual job's play after it became playable, a delayed job's `start_in`. */
  readonly waitSeconds: number;
  readonly resourceGroup: boolean;
  /** Failed attempts before the one that passes (`retry:`). */
  readonly failures: number;
  /** Whether the pickup handed out GitLab's `queued_at` (else only the Job Hook's `build_queued_duration` says it). */
  readonly queuedAtAtPickup: boolean;
  /** A trigger job instead: its child pipeline. */
  readonly trigger?: { readonly depend: boolean; readonly child: PipelineShape };
}

export interface PipelineShape {
  readonly jobs: readonly JobShape[];
}

export interface SchedulerWorld {
  readonly root: PipelineShape;
  readonly runnersPerTag: readonly [number, number];
  /** Until when (seconds after the root's creation) another project's job holds the resource group. */
  readonly resourceHeldUntil: number;
  /** A job of the root pipeline re-run by a person this long after the root pipeline ended (index into its jobs). */
  readonly rerun?: { readonly job: number; readonly afterSeconds: number };
  readonly seed: number;
}

/** One run of a job (an attempt) or a trigger job, with GitLab's times (epoch ms). */
export interface ModelNode {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly name: string;
  readonly stage: string;
  readonly kind: 'job' | 'bridge';
  readonly attempt: number;
  readonly when: When;
  readonly resourceGroup: boolean;
  readonly tag: 0 | 1;
  readonly runMs: number;
  readonly queuedAtAtPickup: boolean;
  readonly status: 'success' | 'failed';
  /** Ready: the moment its dependencies let it go (for a trigger job, the moment it became pending). */
  ready: number;
  pending: number;
  started: number;
  end: number;
  /** What let it become pending: a node, the start of its pipeline, or something outside the trace. */
  releaser: ModelNode | 'pipeline' | 'outside';
  readonly waitKind: WaitKind;
  /** A trigger job: its child pipeline. */
  child?: ModelPipeline;
  readonly depend?: boolean;
}

export interface ModelPipeline {
  readonly pipelineId: number;
  readonly parent?: { readonly bridge: ModelNode };
  createdAt: number;
  end: number;
  readonly nodes: ModelNode[];
}

export interface ModelRun {
  readonly root: ModelPipeline;
  readonly pipelines: ModelPipeline[];
  readonly nodes: ModelNode[];
}

/** GitLab's small delays, a runner's pickup latency, from the world's seed. */
const random = randomSource;

const CREATED_AT = Date.parse('2026-12-01T10:00:00Z');

/** A logical job of a pipeline (its parallel instance): its attempts, and when it was done (its last attempt's end). */
interface Job {
  readonly shape: JobShape;
  readonly name: string;
  readonly pipeline: ModelPipeline;
  readonly index: number;
  deps: Job[];
  attempts: ModelNode[];
  done?: number;
  /** The node whose end made it done (its last attempt, or a trigger job). */
  doneBy?: ModelNode;
  released: boolean;
}

export function simulate(world: SchedulerWorld): ModelRun {
  const rand = random(world.seed);
  const gitlabDelay = () => 1 + Math.floor(rand() * 400);
  const latency = () => Math.floor(rand() * 300);
  let nextJobId = 1000;
  let nextPipelineId = 500;
  let sequence = 0;
  const events: Array<{ at: number; seq: number; run: () => void }> = [];
  const schedule = (at: number, run: () => void) => {
    events.push({ at, seq: sequence++, run });
  };
  const nodes: ModelNode[] = [];
  const pipelines: ModelPipeline[] = [];
  const jobsOf = new Map<ModelPipeline, Job[]>();
  const queues: [ModelNode[], ModelNode[]] = [[], []];
  const runnerFree: [number[], number[]] = [Array(world.runnersPerTag[0]).fill(0), Array(world.runnersPerTag[1]).fill(0)];
  const resourceWaiters: Array<{ job: Job; ready: number; releaser: ModelNode | 'pipeline' | 'outside' }> = [];
  let resourceHolder: ModelNode | null = null;
  let resourceFreedBy: ModelNode | 'outside' = 'outside';
  let resourceFreeAt = CREATED_AT + world.resourceHeldUntil * 1000;
  const nodeOf = new Map<ModelNode, Job>();
  // eslint-disable-next-line prefer-const -- assigned once the closures that read it are made
  let root: ModelPipeline;

  const newPipeline = (createdAt: number, parent?: ModelNode): ModelPipeline => {
    const pipeline: ModelPipeline = {
      pipelineId: nextPipelineId++,
      createdAt,
      end: NaN,
      nodes: [],
      ...(parent === undefined ? {} : { parent: { bridge: parent } }),
    };
    pipelines.push(pipeline);
    return pipeline;
  };

  const waitKindOf = (shape: JobShape, attempt: number): WaitKind =>
    attempt > 1 ? 'retry' : shape.when === 'manual' ? 'manual' : shape.when === 'delayed' ? 'delayed' : shape.resourceGroup ? 'resource' : 'gitlab';

  const newNode = (job: Job, attempt: number, ready: number, releaser: ModelNode['releaser']): ModelNode => {
    const { shape } = job;
    // A job of the resource group runs once (its retry would hold the resource again: not modelled).
    const failed = shape.trigger === undefined && !shape.resourceGroup && attempt <= shape.failures;
    const node: ModelNode = {
      jobId: nextJobId++,
      pipelineId: job.pipeline.pipelineId,
      name: job.name,
      stage: `stage-${shape.stage}`,
      kind: shape.trigger === undefined ? 'job' : 'bridge',
      attempt,
      when: shape.when,
      resourceGroup: shape.resourceGroup,
      tag: shape.tag,
      runMs: shape.runSeconds * 1000 + Math.floor(rand() * 1000),
      queuedAtAtPickup: shape.queuedAtAtPickup,
      status: failed ? 'failed' : 'success',
      ready,
      pending: NaN,
      started: NaN,
      end: NaN,
      releaser,
      waitKind: shape.trigger === undefined ? waitKindOf(shape, attempt) : 'gitlab',
      ...(shape.trigger === undefined ? {} : { depend: shape.trigger.depend }),
    };
    nodes.push(node);
    job.pipeline.nodes.push(node);
    job.attempts.push(node);
    nodeOf.set(node, job);
    return node;
  };

  const dispatch = (tag: 0 | 1, now: number) => {
    const queue = queues[tag];
    queue.sort((a, b) => a.pending - b.pending || a.jobId - b.jobId);
    const free = runnerFree[tag];
    while (queue.length > 0) {
      const runner = free.findIndex((at) => at <= now);
      if (runner < 0) return;
      const node = queue.shift()!;
      node.started = Math.max(now, node.pending) + latency();
      node.end = node.started + node.runMs;
      free[runner] = node.end;
      schedule(node.end, () => finished(node));
    }
  };

  const becomesPending = (node: ModelNode, at: number) => {
    schedule(at, () => {
      node.pending = at;
      if (node.kind === 'bridge') return startChild(node, at);
      queues[node.tag].push(node);
      dispatch(node.tag, at);
    });
  };

  const tryResource = (now: number) => {
    if (resourceHolder !== null || now < resourceFreeAt || resourceWaiters.length === 0) return;
    resourceWaiters.sort((a, b) => a.ready - b.ready);
    const waiter = resourceWaiters.shift()!;
    // Free when it became ready: released by its dependency; else by whoever freed the resource.
    const releaser =
      waiter.ready >= resourceFreeAt
        ? waiter.releaser
        : resourceFreedBy !== 'outside' && resourceFreedBy.pipelineId === waiter.job.pipeline.pipelineId
          ? resourceFreedBy
          : 'outside';
    const node = newNode(waiter.job, 1, waiter.ready, releaser);
    resourceHolder = node;
    becomesPending(node, now + gitlabDelay());
  };

  /** All of a job's dependencies are done at `at`: it becomes pending as its `when` and resource group say. */
  const release = (job: Job, at: number, releaser: ModelNode['releaser']) => {
    job.released = true;
    const { shape } = job;
    if (shape.resourceGroup && shape.trigger === undefined) {
      resourceWaiters.push({ job, ready: at, releaser });
      tryResource(at);
      return;
    }
    const node = newNode(job, 1, at, releaser);
    const wait = shape.when === 'on_success' || shape.trigger !== undefined ? gitlabDelay() : shape.waitSeconds * 1000 + gitlabDelay();
    becomesPending(node, at + wait);
  };

  const startPipeline = (pipeline: ModelPipeline, shape: PipelineShape) => {
    const jobs: Job[] = [];
    for (const [index, jobShape] of shape.jobs.entries()) {
      for (let instance = 1; instance <= jobShape.parallel; instance++) {
        const base = `${jobShape.trigger === undefined ? 'job' : 'trigger'}-${index}`;
        jobs.push({
          shape: jobShape,
          name: jobShape.parallel === 1 ? base : `${base} ${instance}/${jobShape.parallel}`,
          pipeline,
          index,
          deps: [],
          attempts: [],
          released: false,
        });
      }
    }
    for (const job of jobs) {
      job.deps =
        job.shape.needs !== undefined
          ? jobs.filter((other) => job.shape.needs!.includes(other.index) && other.index < job.index)
          : jobs.filter((other) => other.shape.stage < job.shape.stage);
    }
    jobsOf.set(pipeline, jobs);
    // The pipeline's first jobs: released by its creation (a child's, by its trigger job becoming pending).
    for (const job of jobs) if (job.deps.length === 0) release(job, pipeline.createdAt, 'pipeline');
  };

  const startChild = (bridge: ModelNode, at: number) => {
    const shape = nodeOf.get(bridge)!.shape.trigger!;
    const child = newPipeline(at, bridge);
    bridge.child = child;
    bridge.started = at;
    startPipeline(child, shape.child);
    // Without `strategy: depend` the trigger job succeeds as it creates its child.
    if (!shape.depend) {
      bridge.end = at;
      schedule(at, () => done(nodeOf.get(bridge)!, bridge, at));
    }
  };

  const done = (job: Job, by: ModelNode, at: number) => {
    job.done = at;
    job.doneBy = by;
    const jobs = jobsOf.get(job.pipeline)!;
    for (const other of jobs) {
      if (other.released || other.deps.some((dep) => dep.done === undefined)) continue;
      const last = other.deps.reduce((found, dep) => (dep.done! > found.done! ? dep : found));
      release(other, at, last.doneBy!);
    }
    if (jobs.every((other) => other.done !== undefined)) pipelineDone(job.pipeline, at);
  };

  const pipelineDone = (pipeline: ModelPipeline, at: number) => {
    pipeline.end = at + gitlabDelay();
    if (pipeline === root && world.rerun !== undefined) rerunAfter(world.rerun);
    const bridge = pipeline.parent?.bridge;
    if (bridge !== undefined && bridge.depend === true) {
      bridge.end = pipeline.end;
      schedule(pipeline.end, () => done(nodeOf.get(bridge)!, bridge, pipeline.end));
    }
  };

  /** A person re-runs a job of the root pipeline after it ended (the end released it); the pipeline ends again after it. */
  const rerunAfter = (rerun: NonNullable<SchedulerWorld['rerun']>) => {
    const rerunnable = jobsOf.get(root)!.filter((job) => job.shape.trigger === undefined && !job.shape.resourceGroup);
    if (rerunnable.length === 0) return;
    const job = rerunnable[rerun.job % rerunnable.length];
    const at = root.end + rerun.afterSeconds * 1000;
    const releaser = lastNodeOf(root);
    schedule(at, () => {
      rerunNode = newNode(job, job.attempts.length + 1, at, releaser);
      becomesPending(rerunNode, at);
    });
  };
  let rerunNode: ModelNode | undefined;

  const finished = (node: ModelNode) => {
    const job = nodeOf.get(node)!;
    dispatch(node.tag, node.end);
    if (node === rerunNode) root.end = Math.max(root.end, node.end) + gitlabDelay();
    if (node === resourceHolder) {
      resourceHolder = null;
      resourceFreedBy = node;
      resourceFreeAt = node.end;
      tryResource(node.end);
    }
    if (node.status === 'failed') {
      // `retry:`: a new job of the same name, pending at once.
      const retry = newNode(job, node.attempt + 1, node.end, node);
      becomesPending(retry, node.end + gitlabDelay());
      return;
    }
    if (job.done === undefined) done(job, node, node.end);
  };

  const drain = () => {
    while (events.length > 0) {
      events.sort((x, y) => x.at - y.at || x.seq - y.seq);
      events.shift()!.run();
    }
  };
  root = newPipeline(CREATED_AT);
  startPipeline(root, world.root);
  schedule(resourceFreeAt, () => tryResource(resourceFreeAt));
  drain();
  return { root, pipelines, nodes };
}

/** The node whose end ended a pipeline: its last-ending job or depend trigger job (true ends). */
export function lastNodeOf(pipeline: ModelPipeline): ModelNode {
  const holding = pipeline.nodes.filter((node) => node.kind === 'job' || node.depend === true);
  return holding.reduce((found, node) => (node.end > found.end ? node : found));
}

const jobShape = (stages: number, earlier: number, child?: fc.Arbitrary<PipelineShape>): fc.Arbitrary<JobShape> =>
  fc
    .record(
      {
        stage: fc.integer({ min: 0, max: stages - 1 }),
        needs: fc.option(fc.uniqueArray(fc.integer({ min: 0, max: Math.max(0, earlier - 1) }), { maxLength: 2 }), { nil: undefined }),
        parallel: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 2, max: 3 }) }),
        runSeconds: fc.integer({ min: 1, max: 60 }),
        tag: fc.constantFrom<0 | 1>(0, 1),
        when: fc.oneof(
          { weight: 6, arbitrary: fc.constant<When>('on_success') },
          { weight: 1, arbitrary: fc.constant<When>('manual') },
          { weight: 1, arbitrary: fc.constant<When>('delayed') },
        ),
        waitSeconds: fc.integer({ min: 1, max: 600 }),
        resourceGroup: fc
          .boolean()
          .chain((held) => (held ? fc.boolean() : fc.constant(false)))
          .chain((held) => (held ? fc.boolean() : fc.constant(false))),
        failures: fc.oneof({ weight: 4, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 2 }) }),
        queuedAtAtPickup: fc.boolean(),
        trigger: child === undefined ? fc.constant(undefined) : fc.option(fc.record({ depend: fc.boolean(), child }), { nil: undefined, freq: 4 }),
      },
      { requiredKeys: ['stage', 'parallel', 'runSeconds', 'tag', 'when', 'waitSeconds', 'resourceGroup', 'failures', 'queuedAtAtPickup'] },
    )
    // A job of the resource group starts as its dependencies and the resource let it (not manual, not delayed).
    .map((job) => (job.resourceGroup ? { ...job, when: 'on_success' as const } : job));

/** Jobs in stage order (a job's `needs:` name earlier jobs only, as GitLab's DAG has no cycles). */
function pipelineShape(maxJobs: number, child?: fc.Arbitrary<PipelineShape>): fc.Arbitrary<PipelineShape> {
  return fc
    .integer({ min: 1, max: 4 })
    .chain((stages) => fc.integer({ min: 1, max: maxJobs }).chain((count) => fc.tuple(...Array.from({ length: count }, (_, i) => jobShape(stages, i, child)))))
    .map((jobs) => ({ jobs: [...jobs].sort((a, b) => a.stage - b.stage).map((job, i) => ({ ...job, needs: job.needs?.filter((need) => need < i) })) }));
}

export const schedulerWorld: fc.Arbitrary<SchedulerWorld> = fc.record(
  {
    root: pipelineShape(6, pipelineShape(3)),
    runnersPerTag: fc.tuple(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 3 })),
    resourceHeldUntil: fc.integer({ min: 0, max: 300 }),
    rerun: fc.option(fc.record({ job: fc.nat(10), afterSeconds: fc.integer({ min: 1, max: 600 }) }), { nil: undefined }),
    seed: fc.integer(),
  },
  { requiredKeys: ['root', 'runnersPerTag', 'resourceHeldUntil', 'seed'] },
);
