import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { jobHook, pipelineAt, pipelineHook, WebhookJob, WebhookPipeline } from '../../simulator/gitlab-webhooks';

/**
 * A generated GitLab world for SPEC §11: one root pipeline with parallel jobs (some failing, allowed to fail, retried
 * automatically, long in the queue), child pipelines (with and without `strategy: depend`), a reopening (a manual job
 * played or a failed job retried after the pipeline ended), and the faults an operator meets. The world is turned
 * into a list of steps in the order the service receives them: pickups and exports in GitLab's real time, each hook
 * late by a generated delay, some redelivered, an old `running` hook replayed after the end.
 */

export type Status = 'success' | 'failed';

export interface JobSpec {
  readonly status: Status;
  readonly allowFailure: boolean;
  readonly queueLong: boolean;
  /** A first attempt failed and GitLab retried it at once (a new job id, the same name), inside the running pipeline. */
  readonly autoRetried: boolean;
  /** The runner's export split in two batches (stages first, then job_execution). */
  readonly split: boolean;
  /** The runner's last batch reaches the gateway only after the root's terminal hook. */
  readonly lastBatchLate: boolean;
  /** How many steps its hooks are late by. */
  readonly hookDelay: number;
  /** When, among its siblings, it starts. */
  readonly offset: number;
}

export interface ChildSpec {
  readonly depend: boolean;
  /** Without `strategy: depend` only: it runs and ends after its root ended. */
  readonly afterRoot: boolean;
  readonly jobs: readonly JobSpec[];
  readonly hookDelay: number;
}

export type Reopen = { readonly kind: 'manual'; readonly status: Status } | { readonly kind: 'retry'; readonly status: Status };

export type FaultKind = 'collector-down' | 'collector-unavailable' | 'collector-slow' | 'malformed-export' | 'redis-pause' | 'redis-restart' | 'crash';

export interface Fault {
  readonly kind: FaultKind;
  /** Where among the steps it starts (a fraction of the run) and how many steps it lasts. */
  readonly at: number;
  readonly length: number;
  readonly replica: number;
}

export interface World {
  readonly rootJobs: readonly JobSpec[];
  readonly children: readonly ChildSpec[];
  readonly slow: boolean;
  readonly rootDelay: number;
  readonly reopen: Reopen | null;
  readonly staleRunningReplay: boolean;
  /** Hooks (by index, modulo their count) GitLab delivers twice with the same X-Gitlab-Event-UUID. */
  readonly redeliver: readonly number[];
  readonly rate: 0 | 50 | 100;
  readonly rateChange: { readonly to: 0 | 50 | 100; readonly at: number } | null;
  readonly faults: readonly Fault[];
  /** Which replica receives each step (index modulo the replicas). */
  readonly routing: readonly number[];
  readonly newerGitlab: boolean;
}

/** What the policy of the run keeps (the toggle's variant payload). */
export const POLICY = { keep: { statuses: ['failed'], slower_than_seconds: 600, queued_longer_than_seconds: 300 }, when_no_outcome: 'keep' };

const jobSpec = (depth: 'root' | 'child') =>
  fc.record({
    status: fc.constantFrom<Status>('success', 'success', 'failed'),
    allowFailure: fc.boolean(),
    queueLong: depth === 'root' ? fc.boolean() : fc.constant(false),
    autoRetried: depth === 'root' ? fc.boolean() : fc.constant(false),
    split: fc.boolean(),
    lastBatchLate: fc.boolean(),
    hookDelay: fc.nat(4),
    offset: fc.nat(3),
  });

export function worldArbitrary(options: { replicas: number; storeFaults: boolean }): fc.Arbitrary<World> {
  const faultKinds: FaultKind[] = ['collector-down', 'collector-unavailable', 'collector-slow', 'malformed-export'];
  if (options.storeFaults) faultKinds.push('redis-pause', 'redis-restart', 'crash');
  // PROPERTY_WITHOUT=malformed-export,crash leaves kinds out, to hunt past a defect already found.
  const without = new Set((process.env.PROPERTY_WITHOUT ?? '').split(','));
  faultKinds.splice(0, faultKinds.length, ...faultKinds.filter((kind) => !without.has(kind)));
  return fc.record({
    rootJobs: fc.array(jobSpec('root'), { minLength: 1, maxLength: 3 }),
    children: fc.array(
      fc.record({ depend: fc.boolean(), afterRoot: fc.boolean(), jobs: fc.array(jobSpec('child'), { minLength: 1, maxLength: 2 }), hookDelay: fc.nat(4) }),
      { maxLength: 2 },
    ),
    slow: fc.boolean(),
    rootDelay: fc.nat(4),
    reopen: fc.option(
      fc.oneof(
        fc.record({ kind: fc.constant<'manual'>('manual'), status: fc.constantFrom<Status>('success', 'failed') }),
        fc.record({ kind: fc.constant<'retry'>('retry'), status: fc.constantFrom<Status>('success', 'failed') }),
      ),
      { nil: null },
    ),
    staleRunningReplay: fc.boolean(),
    redeliver: fc.array(fc.nat(40), { maxLength: 3 }),
    rate: fc.constantFrom<0 | 50 | 100>(0, 50, 100),
    rateChange: fc.option(fc.record({ to: fc.constantFrom<0 | 50 | 100>(0, 50, 100), at: fc.double({ min: 0, max: 1, noNaN: true }) }), { nil: null }),
    faults: fc.array(
      fc.record({
        kind: faultKinds.length === 0 ? fc.constant<FaultKind>('collector-slow') : fc.constantFrom(...faultKinds),
        at: fc.double({ min: 0, max: 1, noNaN: true }),
        length: fc.integer({ min: 1, max: 6 }),
        replica: fc.nat(options.replicas - 1),
      }),
      { maxLength: 3 },
    ),
    routing: fc.array(fc.nat(options.replicas - 1), { minLength: 1, maxLength: 8 }),
    newerGitlab: fc.boolean(),
  });
}

// ── Steps ──

export interface JobRef {
  readonly jobId: number;
  readonly pipelineId: number;
  readonly rootPipelineId: number;
  readonly name: string;
  readonly hook: WebhookJob;
  readonly queuedAt: Date;
  /** Picked up in the reopened part of the pipeline's story. */
  readonly epoch: 1 | 2;
}

export type Step =
  | { readonly kind: 'pickup'; readonly job: JobRef; readonly replica: number }
  | { readonly kind: 'export'; readonly job: JobRef; readonly batch: 'all' | 'stages' | 'last'; readonly replica: number; readonly malformed?: boolean }
  | {
      readonly kind: 'hook';
      readonly event: 'Pipeline Hook' | 'Job Hook';
      readonly body: Record<string, unknown>;
      readonly uuid: string;
      readonly replica: number;
      /** What the model reads from it. */
      readonly fact: HookFact;
    }
  | { readonly kind: 'rate'; readonly to: number }
  | { readonly kind: 'collector'; readonly mode: 'up' | 'down' | 'unavailable' | 'slow' }
  | { readonly kind: 'redis'; readonly action: 'pause' | 'resume' | 'restart' }
  | { readonly kind: 'crash'; readonly replica: number };

export type HookFact =
  | {
      readonly about: 'root';
      readonly status: string;
      readonly terminal: boolean;
      readonly epoch: 1 | 2;
      readonly failedBuild: boolean;
      readonly stale: boolean;
    }
  | { readonly about: 'child'; readonly status: string; readonly terminal: boolean }
  | { readonly about: 'job'; readonly status: string; readonly child: boolean; readonly epoch: 1 | 2 };

export interface Timeline {
  readonly rootPipelineId: number;
  readonly steps: Step[];
  readonly jobs: JobRef[];
}

const STAGE_SECONDS = 1;
const at = (base: number, seconds: number) => new Date(base + seconds * 1000);

/**
 * The world as the service receives it. Every key is a point in GitLab's real time; a hook is delivered `delay`
 * steps after it was sent, so hooks overtake each other; the reopened part starts after the first end was delivered.
 */
export function timelineOf(world: World, ids: { root: number }, replicas: number): Timeline {
  const keyed: Array<{ key: number; order: number; step: Step }> = [];
  let order = 0;
  let routed = 0;
  const replica = () => world.routing[routed++ % world.routing.length] % replicas;
  const push = (key: number, step: Step) => keyed.push({ key, order: order++, step });
  /** Last batches that reach the gateway only after the first end: not before their own pickup. */
  const late: Array<{ start: number; step: Step }> = [];
  const jobs: JobRef[] = [];
  // A minute ago: the decorator measures a job's queue wait from its `queued_at` to the pickup (now), so every
  // time of the story is recent; a long queue wait is 400 s before its start, a slow root was created 900 s ago.
  const base = Math.floor(Date.now() / 1000 - 60) * 1000;
  const rootId = ids.root;
  const project = 7;
  const allowFailure = new Set<number>();
  let nextJobId = rootId * 100;

  const withAllowFailure = (body: Record<string, unknown>): Record<string, unknown> => {
    if (Array.isArray(body.builds)) {
      body.builds = (body.builds as Array<Record<string, unknown>>).map((build) => ({ ...build, allow_failure: allowFailure.has(Number(build.id)) }));
    }
    if (typeof body.build_id === 'number') body.build_allow_failure = allowFailure.has(body.build_id);
    return body;
  };
  const pipelineBody = (pipeline: WebhookPipeline, child?: { source: { pipelineId: number; jobId: number } }) =>
    withAllowFailure(
      pipelineHook({ ...pipeline, ...(child === undefined ? {} : { source: child.source }), ...(world.newerGitlab ? { rootPipelineId: rootId } : {}) }),
    );

  /** One job's life: pickup, its runner's export, its terminal Job Hook; returns the key it ended at. */
  const runJob = (
    spec: JobSpec,
    pipeline: number,
    start: number,
    createdAt: number,
    epoch: 1 | 2,
    child: boolean,
    name: string,
    attempt: Status,
    retries: number,
  ) => {
    const jobId = nextJobId++;
    if (spec.allowFailure && attempt === 'failed') allowFailure.add(jobId);
    const queueSeconds = spec.queueLong && retries === (spec.autoRetried ? 1 : 0) ? 400 : 5;
    const queuedAt = at(base, createdAt + 5 - queueSeconds);
    const startedAt = at(base, createdAt + 5);
    const hook: WebhookJob = {
      id: jobId,
      name,
      stage: name,
      status: attempt,
      createdAt: queuedAt,
      startedAt,
      finishedAt: at(base, createdAt + 5 + STAGE_SECONDS * 7),
      queuedSeconds: queueSeconds,
      retriesCount: retries,
      runner: { id: 17, runnerType: 'project_type', description: 'runner-17' },
      ...(attempt === 'failed' ? { failureReason: 'script_failure' } : {}),
    };
    const job: JobRef = { jobId, pipelineId: pipeline, rootPipelineId: rootId, name, hook, queuedAt, epoch };
    jobs.push(job);
    push(start, { kind: 'pickup', job, replica: replica() });
    if (spec.split) {
      push(start + 0.1, { kind: 'export', job, batch: 'stages', replica: replica() });
      const last: Step = { kind: 'export', job, batch: 'last', replica: replica() };
      if (spec.lastBatchLate) late.push({ start, step: last });
      else push(start + 0.2, last);
    } else {
      const all: Step = { kind: 'export', job, batch: 'all', replica: replica() };
      if (spec.lastBatchLate) late.push({ start, step: all });
      else push(start + 0.2, all);
    }
    return job;
  };

  const jobHookStep = (job: JobRef, key: number, pipeline: WebhookPipeline, child: boolean, epoch: 1 | 2) =>
    push(key, {
      kind: 'hook',
      event: 'Job Hook',
      body: withAllowFailure(jobHook(pipeline, job.hook)),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'job', status: job.hook.status, child, epoch },
    });

  // Epoch 1: the root's jobs in parallel, then its end.
  const rootCreated = world.slow ? -900 : world.rootJobs.some((spec) => spec.queueLong) ? -400 : 0;
  const latest = new Map<string, JobRef>();
  const rootRunning = (jobsNow: WebhookJob[]) => pipelineAt(rootId, project, 'running', at(base, rootCreated), jobsNow);
  push(0, {
    kind: 'hook',
    event: 'Pipeline Hook',
    body: pipelineBody(rootRunning([])),
    uuid: randomUUID(),
    replica: replica(),
    fact: { about: 'root', status: 'running', terminal: false, epoch: 1, failedBuild: false, stale: false },
  });
  let lastKey = 1;
  world.rootJobs.forEach((spec, index) => {
    const name = `job-${index}`;
    let key = 1 + spec.offset;
    let createdAt = 1 + spec.offset;
    let retries = 0;
    if (spec.autoRetried) {
      const first = runJob(spec, rootId, key, createdAt, 1, false, name, 'failed', retries++);
      jobHookStep(first, key + 0.5 + spec.hookDelay, rootRunning([]), false, 1);
      key += 1;
      createdAt += 5 + STAGE_SECONDS * 7 + 1;
    }
    const job = runJob(spec, rootId, key, createdAt, 1, false, name, spec.status, retries);
    latest.set(name, job);
    jobHookStep(job, key + 0.5 + spec.hookDelay, rootRunning([]), false, 1);
    lastKey = Math.max(lastKey, key + 1);
  });

  // Child pipelines: each triggered by a bridge job of the root; with depend, the root ends after them.
  const children = world.children.map((spec, index) => ({ spec, id: rootId + 1 + index, bridge: nextJobId++ }));
  let childFailedDepend = false;
  for (const { spec, id, bridge } of children) {
    const afterRoot = !spec.depend && spec.afterRoot;
    const startKey = afterRoot ? 100 : 1;
    const created = afterRoot ? 30 : 2;
    const childJobs = spec.jobs.map((jobSpecOfChild, index) =>
      runJob(jobSpecOfChild, id, startKey + jobSpecOfChild.offset, created + 1, 1, true, `child-${index}`, jobSpecOfChild.status, 0),
    );
    const childPipeline = (status: string) =>
      pipelineAt(
        id,
        project,
        status,
        at(base, created),
        childJobs.map((job) => job.hook),
      );
    const failed = childJobs.some((job) => job.hook.status === 'failed' && !allowFailure.has(job.jobId));
    if (spec.depend && failed) childFailedDepend = true;
    const status = failed ? 'failed' : 'success';
    const source = { source: { pipelineId: rootId, jobId: bridge } };
    push(startKey, {
      kind: 'hook',
      event: 'Pipeline Hook',
      body: pipelineBody(childPipeline('running'), source),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'child', status: 'running', terminal: false },
    });
    const ended = startKey + 4.6;
    childJobs.forEach((job, index) => jobHookStep(job, startKey + spec.jobs[index].offset + 0.5 + spec.hookDelay, childPipeline('running'), true, 1));
    push(ended + spec.hookDelay, {
      kind: 'hook',
      event: 'Pipeline Hook',
      body: pipelineBody(childPipeline(status), source),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'child', status, terminal: true },
    });
    if (!afterRoot) lastKey = Math.max(lastKey, ended + 1);
  }

  // The manual job, shown as `manual` until someone plays it.
  const manualId = world.reopen?.kind === 'manual' ? nextJobId++ : undefined;
  const manualHook: WebhookJob | undefined =
    manualId === undefined ? undefined : { id: manualId, name: 'deploy', stage: 'deploy', status: 'manual', createdAt: at(base, 1) };

  const rootJobsNow = () => [...latest.values()].map((job) => job.hook).concat(manualHook === undefined ? [] : [manualHook]);
  const rootFailed = () => [...latest.values()].some((job) => job.hook.status === 'failed' && !allowFailure.has(job.jobId)) || childFailedDepend;
  const firstStatus = rootFailed() ? 'failed' : 'success';
  const firstEnd = pipelineAt(rootId, project, firstStatus, at(base, rootCreated), rootJobsNow());
  const terminalKey = lastKey + world.rootDelay;
  push(terminalKey, {
    kind: 'hook',
    event: 'Pipeline Hook',
    body: pipelineBody(firstEnd),
    uuid: randomUUID(),
    replica: replica(),
    fact: {
      about: 'root',
      status: firstStatus,
      terminal: true,
      epoch: 1,
      failedBuild: rootJobsNow().some((job) => job.status === 'failed'),
      stale: false,
    },
  });
  if (world.staleRunningReplay) {
    // GitLab delivers an old `running` hook (a retried delivery, a slow worker) after the pipeline's end.
    push(terminalKey + 0.6, {
      kind: 'hook',
      event: 'Pipeline Hook',
      body: pipelineBody(rootRunning([])),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'root', status: 'running', terminal: false, epoch: 1, failedBuild: false, stale: true },
    });
  }

  // Epoch 2: the pipeline reopened (a manual job played, a failed job retried), then ends again.
  const reopenFailedJob = [...latest.values()].find((job) => job.hook.status === 'failed');
  const reopen = world.reopen?.kind === 'retry' && reopenFailedJob === undefined ? null : world.reopen;
  if (reopen !== null) {
    const replayed = reopen.kind === 'manual' ? 'deploy' : reopenFailedJob!.name;
    const spec: JobSpec = {
      status: reopen.status,
      allowFailure: false,
      queueLong: false,
      autoRetried: false,
      split: false,
      lastBatchLate: false,
      hookDelay: 0,
      offset: 0,
    };
    if (reopen.kind === 'manual') latest.delete('deploy');
    const waiting: WebhookJob = {
      id: nextJobId,
      name: replayed,
      stage: replayed,
      status: 'pending',
      createdAt: at(base, 45),
    };
    if (reopen.kind === 'retry') latest.delete(replayed);
    const before = [...latest.values()].map((job) => job.hook);
    push(1000, {
      kind: 'hook',
      event: 'Pipeline Hook',
      body: pipelineBody(pipelineAt(rootId, project, 'running', at(base, rootCreated), [...before, waiting])),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'root', status: 'running', terminal: false, epoch: 2, failedBuild: false, stale: false },
    });
    const job = runJob(spec, rootId, 1001, 45, 2, false, replayed, reopen.status, reopen.kind === 'retry' ? 1 : 0);
    latest.set(replayed, job);
    jobHookStep(job, 1002, pipelineAt(rootId, project, 'running', at(base, rootCreated), [...before, waiting]), false, 2);
    const secondStatus =
      [...latest.values()].some((each) => each.hook.status === 'failed' && !allowFailure.has(each.jobId)) || childFailedDepend ? 'failed' : 'success';
    const secondJobs = [...latest.values()].map((each) => each.hook);
    push(1003, {
      kind: 'hook',
      event: 'Pipeline Hook',
      body: pipelineBody(pipelineAt(rootId, project, secondStatus, at(base, rootCreated), secondJobs)),
      uuid: randomUUID(),
      replica: replica(),
      fact: { about: 'root', status: secondStatus, terminal: true, epoch: 2, failedBuild: secondJobs.some((each) => each.status === 'failed'), stale: false },
    });
  }

  // Late last batches arrive right after the first end was delivered.
  for (const { start, step } of late) push(Math.max(terminalKey + 0.3, start + 0.2), step);

  // Redeliveries: the same hook, the same UUID, a little later.
  const hooks = keyed.filter((entry) => entry.step.kind === 'hook');
  for (const index of world.redeliver) {
    const original = hooks[index % hooks.length];
    if (original === undefined) continue;
    const step = original.step as Extract<Step, { kind: 'hook' }>;
    const again = original.key + 0.7;
    // A redelivery of an epoch-1 hook stays in epoch 1, where GitLab's retries of it happen.
    push(original.key < 1000 && again >= 1000 ? 999 : again, { ...step, replica: replica() });
  }

  keyed.sort((a, b) => a.key - b.key || a.order - b.order);
  const steps = keyed.map((entry) => entry.step);

  // Faults and the rate change at fractions of the run; each fault ends `length` steps later.
  const inserts: Array<{ position: number; order: number; step: Step }> = [];
  const position = (fraction: number) => Math.floor(fraction * steps.length);
  for (const fault of world.faults) {
    const start = position(fault.at);
    const end = start + fault.length;
    switch (fault.kind) {
      case 'collector-down':
      case 'collector-unavailable':
      case 'collector-slow':
        inserts.push({
          position: start,
          order: 0,
          step: { kind: 'collector', mode: fault.kind === 'collector-down' ? 'down' : fault.kind === 'collector-unavailable' ? 'unavailable' : 'slow' },
        });
        inserts.push({ position: end, order: 1, step: { kind: 'collector', mode: 'up' } });
        break;
      case 'malformed-export': {
        // A program inside the job exports a span the Collector cannot decode, through the job's own endpoint.
        const job = jobs[Math.floor(fault.at * jobs.length) % jobs.length];
        const pickedAt = steps.findIndex((step) => step.kind === 'pickup' && step.job === job);
        inserts.push({
          position: Math.max(start, pickedAt + 1),
          order: 0,
          step: { kind: 'export', job, batch: 'all', replica: fault.replica % replicas, malformed: true },
        });
        break;
      }
      case 'redis-pause':
        inserts.push({ position: start, order: 0, step: { kind: 'redis', action: 'pause' } });
        inserts.push({ position: end, order: 1, step: { kind: 'redis', action: 'resume' } });
        break;
      case 'redis-restart':
        inserts.push({ position: start, order: 0, step: { kind: 'redis', action: 'restart' } });
        break;
      case 'crash':
        inserts.push({ position: start, order: 0, step: { kind: 'crash', replica: fault.replica % replicas } });
        break;
    }
  }
  if (world.rateChange !== null) inserts.push({ position: position(world.rateChange.at), order: 0, step: { kind: 'rate', to: world.rateChange.to } });
  inserts.sort((a, b) => b.position - a.position || b.order - a.order);
  for (const insert of inserts) steps.splice(Math.min(insert.position, steps.length), 0, insert.step);
  return { rootPipelineId: rootId, steps, jobs };
}

// ── The model's verdict ──

/**
 * `either`: the root's end came before any of its jobs was traced, so whether the service heard it depends on when it
 * handled the hook (a hook the store could not take is spooled and handled later): kept whole, or nothing.
 */
export type Expected = 'whole' | 'whole-after-reopen' | 'nothing' | 'either';

/**
 * What SPEC §11 (with issue 35's rules) says must reach the collector, from what the service was told in the order
 * it was told: head-sampled (the first pickup's answer, kept for the pipeline's life) → whole; provisional → decided
 * at each terminal root hook from the facts delivered before it (a child pipeline's failure counts whenever it comes);
 * a keep stays a keep; a drop is reconsidered only when a newer `running` hook reopens the pipeline.
 */
export function expectedOf(timeline: Timeline, delivered: Step[], headSampled: boolean | undefined): { expected: Expected; reasons: string[] } {
  if (headSampled === undefined) return { expected: 'nothing', reasons: ['no job of the pipeline was traced'] };
  if (headSampled) return { expected: 'whole', reasons: ['head-sampled at its first pickup'] };
  const hooks = delivered.filter((step): step is Extract<Step, { kind: 'hook' }> => step.kind === 'hook');
  // What the service can know: queue waits of the jobs it traced (a degraded pickup, the store away, tells nothing),
  // and a root pipeline's end only once one of its jobs was traced (before, it has no record of the pipeline).
  const traced = new Set(delivered.flatMap((step) => (step.kind === 'pickup' ? [step.job.jobId] : [])));
  const tracedBefore = (hook: Step) => delivered.slice(0, delivered.indexOf(hook)).some((step) => step.kind === 'pickup');
  const tracedPipelines = new Set(delivered.flatMap((step) => (step.kind === 'pickup' ? [step.job.pipelineId] : [])));
  const pipelineOf = (hook: Extract<Step, { kind: 'hook' }>) => Number((hook.body.object_attributes as Record<string, unknown> | undefined)?.id);
  // A child pipeline the service knows of (one of its jobs traced, or its hook came after its root's first traced
  // pickup) tells its status and its jobs' (a failed job allowed to fail is listed as failed); a failed job of a child
  // tells through its Job Hook if its pipeline is known, whether or not the job itself was traced.
  const childKnown = (hook: Extract<Step, { kind: 'hook' }>) => hook.fact.about === 'child' && (tracedPipelines.has(pipelineOf(hook)) || tracedBefore(hook));
  const knownChildren = new Set(hooks.filter(childKnown).map(pipelineOf));
  const listsFailed = (hook: Extract<Step, { kind: 'hook' }>) =>
    ((hook.body.builds as Array<{ status?: string }> | undefined) ?? []).some((build) => build.status === 'failed');
  const childFailed = hooks.some(
    (hook) =>
      (childKnown(hook) && (hook.fact.status === 'failed' || listsFailed(hook))) ||
      (hook.fact.about === 'job' &&
        hook.fact.child &&
        hook.fact.status === 'failed' &&
        (traced.has(Number(hook.body.build_id)) || knownChildren.has(Number(hook.body.pipeline_id)))),
  );
  const longQueue = timeline.jobs.some((job) => traced.has(job.jobId) && (job.hook.queuedSeconds ?? 0) > POLICY.keep.queued_longer_than_seconds);
  const reasons: string[] = [];
  // A failed job (an allowed-to-fail one, an attempt retried) keeps its pipeline whichever order its Job Hook and the
  // root's terminal hook come in (issue 35: facts decide even after the root ended, within OUTCOME_SAMPLING_LATE_CHILD_SECONDS,
  // which the driver sets so that every hook of a run falls within it): for the first end, the failures of the first
  // run; for the end after a reopening, any. Traced or not: a job whose pickup found the store away still failed, and
  // its Job Hook is what tells of a retried attempt (the Pipeline Hook lists the last one only).
  const jobFailed = (epochs: readonly number[]) =>
    hooks.some((hook) => hook.fact.about === 'job' && !hook.fact.child && hook.fact.status === 'failed' && epochs.includes(hook.fact.epoch));
  const decisions: boolean[] = [];
  for (const hook of hooks) {
    const fact = hook.fact;
    if (fact.about === 'root' && fact.terminal && tracedBefore(hook)) {
      const failedSeen = jobFailed(fact.epoch === 1 ? [1] : [1, 2]);
      const slow =
        fact.epoch === 1 && hook.body.object_attributes !== undefined && Number((hook.body.object_attributes as Record<string, unknown>).duration) > 600;
      const keep = (decisions.at(-1) ?? false) || fact.status === 'failed' || fact.failedBuild || failedSeen || childFailed || slow || longQueue;
      if (keep && !(decisions.at(-1) ?? false)) {
        reasons.push(
          `kept at the epoch-${fact.epoch} end: ${[fact.status === 'failed' || fact.failedBuild || failedSeen ? 'a failure' : '', childFailed ? 'a child pipeline failed' : '', slow ? 'slow' : '', longQueue ? 'a long queue wait' : ''].filter(Boolean).join(', ')}`,
        );
      }
      if (decisions.length === 0 || fact.epoch === 2) decisions.push(keep);
    }
  }
  const endBeforeTraced = hooks.some((hook) => hook.fact.about === 'root' && hook.fact.terminal && !tracedBefore(hook));
  if (endBeforeTraced && traced.size > 0 && !decisions.some(Boolean))
    return { expected: 'either', reasons: [...reasons, "the root's end came before any of its jobs was traced"] };
  if (decisions[0]) return { expected: 'whole', reasons };
  if (decisions.some(Boolean)) return { expected: 'whole-after-reopen', reasons: [...reasons, 'dropped first, then reopened'] };
  return { expected: 'nothing', reasons: ['provisional, and nothing the policy keeps'] };
}
