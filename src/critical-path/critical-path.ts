import { FINISHED_STATUSES } from '../otlp/ci-identity';
import type { CollectedSpan as StoredSpan } from '../otlp/collected-spans';

/**
 * The critical path of a pipeline (SPEC §12), from its trace alone: pure, no Nest, no I/O, one way for the
 * endpoints, the CLI, the control plane's written path and whichever backend fetched the spans.
 *
 * GitLab makes a job pending when its last dependency finishes, so without knowing `needs:`, walking back from
 * the job that ended last, each job's blocker is the job of its pipeline whose end is latest at or before the job
 * became pending (where its job span starts: GitLab's `queued_at`, else its `started_at − queued_duration`; see
 * jobTimes in pipeline-span-model.ts). Every attempt of a retried job is a job of its own here: an earlier attempt still
 * blocked what became pending after it ended, and the wait before a later attempt is the retry's. A child
 * pipeline is reached through its bridge: a bridge found as a blocker is replaced by the job of its child pipeline
 * that ended last, and the first job of a child pipeline is blocked by what blocked its bridge; but a child that
 * ended after the root pipeline had ended was no `strategy: depend` child (a depend bridge holds its pipeline, and
 * so the root, open until its child ends), so it held nothing up: its bridge is no job of the walk (as when the
 * control plane wrote the path at the root's end, before the child's hook drew the bridge), and its jobs are not on
 * the root's path. GitLab sends no hook for trigger jobs, so the trace says no more of `strategy: depend`: a child
 * that ended before the root did is taken as depend, and timing decides.
 *
 * The path explains the root pipeline: it ends at the end of the root's last job (never after the root pipeline
 * span's end), and its time, from the root pipeline's creation, is split with nothing counted twice and nothing
 * left out: before each job, the wait since its blocker ended, named for its cause (GitLab's delay, a person
 * playing a manual job, a person or `retry:` retrying a job, a `when: delayed` timer, a `resource_group`); its
 * queue wait (pending → a runner took it); and its run, by the runner's stages (`job_execution`'s children), the
 * rest as `other`. Times are whole milliseconds, so the totals add up to the path's duration exactly.
 */

/** The runner's stages the path is split by (SPEC §12), and `other` for the rest of a job's run. */
export const RUNNER_PARTS = [
  'prepare_executor',
  'pull_image',
  'get_sources',
  'restore_cache',
  'step_script',
  'after_script',
  'archive_cache',
  'upload_artifacts',
  'other',
] as const;
export type RunnerPart = (typeof RUNNER_PARTS)[number];

/**
 * GitLab Runner's build stage names (`common/build.go`) as the parts above: the shell stages of a failed job
 * (`…_on_failure`), `download_artifacts` with the other transfers, a user script (`step_script`, `build_script`,
 * `step_run` of steps) with the script. What is not named here is `other`.
 */
export const STAGE_PARTS: Readonly<Record<string, RunnerPart>> = {
  prepare_executor: 'prepare_executor',
  prepare_script: 'prepare_executor',
  pull_image: 'pull_image',
  get_sources: 'get_sources',
  clear_worktree: 'get_sources',
  restore_cache: 'restore_cache',
  download_artifacts: 'restore_cache',
  step_script: 'step_script',
  build_script: 'step_script',
  step_run: 'step_script',
  after_script: 'after_script',
  archive_cache: 'archive_cache',
  archive_cache_on_failure: 'archive_cache',
  upload_artifacts: 'upload_artifacts',
  upload_artifacts_on_success: 'upload_artifacts',
  upload_artifacts_on_failure: 'upload_artifacts',
};

export function runnerPartOf(stageSpanName: string): RunnerPart {
  return STAGE_PARTS[stageSpanName] ?? 'other';
}

/**
 * What a job waited for between its blocker's end and becoming pending: GitLab's own delay, a person playing a manual
 * job, a retry (a person, or `retry:`, running the job again after an earlier attempt), the timer of a
 * `when: delayed` job, or a `resource_group` (GitLab's `waiting_for_resource`: another job held the resource).
 */
export type WaitingFor = 'gitlab' | 'manual' | 'retry' | 'delayed' | 'resource';

/**
 * Set (true) on a job's span or its queue wait when the job was started by a person (GitLab's `CI_JOB_MANUAL`):
 * the wait before it is a manual wait, not GitLab's delay.
 */
export const MANUAL_JOB_ATTRIBUTE = 'ci.job.manual';
/** GitLab's `when` of a job (`on_success`, `manual`, `delayed`, `always`, …), as the Pipeline Hook's `builds` say. */
export const JOB_WHEN_ATTRIBUTE = 'ci.job.when';
/** True on a job span when GitLab said the job was `waiting_for_resource` (its `resource_group` was held). */
export const WAITED_FOR_RESOURCE_ATTRIBUTE = 'ci.job.waited_for_resource';
/** GitLab's `retries_count` of a job (the Job Hook's): above 0, the job is a retry. */
export const RETRIES_COUNT_ATTRIBUTE = 'ci.job.retries_count';
/** Pending → picked up, in seconds, on the job span: GitLab's `queued_duration` where it said it, else the pickup's. */
export const QUEUED_DURATION_ATTRIBUTE = 'ci.job.queued_duration_seconds';

export interface PathElement {
  readonly job_id: number;
  readonly name: string | null;
  readonly stage: string | null;
  readonly pipeline_id: number | null;
  /** The job whose end let this one become pending; null for the first. */
  readonly blocked_by: number | null;
  readonly waiting_for: WaitingFor;
  /** The blocker's end (the pipeline's creation, for the first) → this job pending. */
  readonly delay_seconds: number;
  /** Pending → picked up by a runner. */
  readonly queue_seconds: number;
  /** Picked up → ended, by the runner's stages; all `other` when the runner exported nothing. */
  readonly parts: Readonly<Record<RunnerPart, number>>;
  /** Pending → ended: queue and run. */
  readonly duration_seconds: number;
  /** Which attempt of the job this is (same name, same pipeline): 1 for its first run, 2 for its first retry, … */
  readonly attempts: number;
  /** Whether the runner's `job_execution` span is in the trace; without it the run is GitLab's times only. */
  readonly runner_spans: boolean;
}

/** The path's time by part: the waits by cause, the queue, the runner's stages. */
export const PATH_TOTALS = ['delay', 'manual_wait', 'retry_wait', 'delayed_wait', 'resource_wait', 'queue', ...RUNNER_PARTS] as const;
export type PathTotals = Readonly<Record<(typeof PATH_TOTALS)[number], number>>;

/** Which part of `totals` the wait before a job goes to. */
export const WAIT_TOTAL: Readonly<Record<WaitingFor, 'delay' | 'manual_wait' | 'retry_wait' | 'delayed_wait' | 'resource_wait'>> = {
  gitlab: 'delay',
  manual: 'manual_wait',
  retry: 'retry_wait',
  delayed: 'delayed_wait',
  resource: 'resource_wait',
};

export interface CriticalPath {
  /** From the root pipeline's creation (or the first job pending) to the end of its job that ended last. */
  readonly duration_seconds: number;
  /** The path's time by part; they add up to `duration_seconds`. */
  readonly totals: PathTotals;
  /** Oldest first. */
  readonly path: PathElement[];
  /** Every job off the path, with how much longer it could have taken without delaying the pipeline; largest first. */
  readonly slack: Array<{ readonly job_id: number; readonly name: string | null; readonly slack_seconds: number }>;
}

/** Every part at zero: the totals of an empty path. */
export function emptyTotals(): PathTotals {
  return Object.fromEntries(PATH_TOTALS.map((part) => [part, 0])) as Record<(typeof PATH_TOTALS)[number], number>;
}

const JOB = 'job';
const BRIDGE = 'bridge';
const QUEUE_WAIT = 'queue_wait';
const JOB_EXECUTION = 'job_execution';
const PIPELINE = 'pipeline';

/** A job (or a bridge whose child pipeline is not in the trace) as the walk sees it; times in epoch ms. */
interface Node {
  readonly jobId: number;
  readonly name: string | null;
  readonly stage: string | null;
  readonly pipelineId: number | null;
  readonly pending: number;
  readonly pickedUp: number;
  end: number;
  /** A bridge: its child pipeline's id. */
  readonly bridgeOf?: number;
  /** A bridge whose child held its parent up (`strategy: depend`, as far as the trace tells): walked through. */
  holdsParent?: boolean;
  /** What its own facts say it waited for before becoming pending (a retry is found among the attempts). */
  readonly waitsFor: Exclude<WaitingFor, 'retry'>;
  /** GitLab said it is a retry (`retries_count` above 0). */
  readonly toldRetry: boolean;
  readonly parts: Record<RunnerPart, number>;
  readonly runnerSpans: boolean;
  /** Which attempt of its job it is (1 for the first), and whether a later attempt followed it. */
  attempt: number;
  superseded: boolean;
  /** The same-pipeline blocker, else for a child pipeline's first jobs what blocked its bridge (resolved). */
  blocker?: Node | null;
  /** The same-pipeline blocker only (for slack). */
  localBlocker?: Node | null;
  slackMs?: number;
}

const ms = (nanos: bigint) => Number((nanos + 500_000n) / 1_000_000n);
const seconds = (millis: number) => millis / 1000;

function numberAttribute(span: StoredSpan, key: string): number | null {
  const raw = span.attributes[key] ?? span.resource[key];
  if (raw === undefined || raw === '') return null;
  const value = Number(raw);
  return Number.isSafeInteger(value) ? value : null;
}

function textAttribute(span: StoredSpan | undefined, key: string): string | null {
  const raw = span?.attributes[key];
  return typeof raw === 'string' && raw !== '' ? raw : null;
}

function emptyParts(): Record<RunnerPart, number> {
  return Object.fromEntries(RUNNER_PARTS.map((part) => [part, 0])) as Record<RunnerPart, number>;
}

/**
 * A run split by the runner's stages: each stage clipped to the run and to the stages before it (so an overlap is
 * counted once, for the earlier stage), the rest `other`. Whole milliseconds adding up to `end − from`.
 */
export function runParts(stages: readonly StoredSpan[], from: number, end: number): Record<RunnerPart, number> {
  const ordered = [...stages].sort((a, b) => (a.startNanos < b.startNanos ? -1 : a.startNanos > b.startNanos ? 1 : 0));
  const triples: number[] = [];
  for (const stage of ordered) triples.push(RUNNER_PARTS.indexOf(runnerPartOf(stage.name)), ms(stage.startNanos), ms(stage.endNanos));
  const values = stagedParts(triples, 0, triples.length / 3, from, end, new Float64Array(RUNNER_PARTS.length));
  const parts = emptyParts();
  for (const [i, part] of RUNNER_PARTS.entries()) parts[part] = values[i];
  return parts;
}

/**
 * `runParts` over stages already in start order, given as `count` triples from `at` on: the part's index in
 * RUNNER_PARTS, the stage's start and its end (ms, on any one origin `from` and `end` share); into `parts` (zeros, in
 * RUNNER_PARTS' order). What ClickHouse's rows hand a read (src/reads/clickhouse-job-runs.ts), so the rule is written
 * once.
 */
export function stagedParts(triples: ArrayLike<number>, at: number, count: number, from: number, end: number, parts: Float64Array): Float64Array {
  let covered = from;
  let counted = 0;
  for (let i = at; i < at + 3 * count; i += 3) {
    const start = Math.max(triples[i + 1], covered);
    const stop = Math.min(triples[i + 2], end);
    if (stop <= start) continue;
    parts[triples[i]] += stop - start;
    counted += stop - start;
    covered = stop;
  }
  parts[OTHER] += Math.max(0, end - from - counted);
  return parts;
}

const OTHER = RUNNER_PARTS.indexOf('other');

/** The spans of a trace, indexed for the walk. */
class TraceIndex {
  readonly byId = new Map<string, StoredSpan>();
  readonly children = new Map<string, StoredSpan[]>();

  constructor(spans: readonly StoredSpan[]) {
    for (const span of spans) {
      this.byId.set(span.spanId, span);
      if (span.parentSpanId === '') continue;
      const siblings = this.children.get(span.parentSpanId);
      if (siblings === undefined) this.children.set(span.parentSpanId, [span]);
      else siblings.push(span);
    }
  }

  childrenOf(spanId: string, name?: string): StoredSpan[] {
    const found = this.children.get(spanId) ?? [];
    return name === undefined ? found : found.filter((span) => span.name === name);
  }
}

/** The latest-ending of `spans`, for a job whose runner exported more than once (a retried export). */
const lastEnding = (spans: readonly StoredSpan[]) =>
  spans.reduce<StoredSpan | undefined>((last, span) => (last === undefined || span.endNanos > last.endNanos ? span : last), undefined);

/** What a job's own facts say it waited for: its span's, else its queue wait's. */
function waitOf(job: StoredSpan | undefined, queue: StoredSpan | undefined): Exclude<WaitingFor, 'retry'> {
  const told = (key: string) => job?.attributes[key] ?? queue?.attributes[key];
  const when = told(JOB_WHEN_ATTRIBUTE);
  if (when === 'manual' || told(MANUAL_JOB_ATTRIBUTE) === true) return 'manual';
  if (when === 'delayed') return 'delayed';
  if (told(WAITED_FOR_RESOURCE_ATTRIBUTE) === true) return 'resource';
  return 'gitlab';
}

function jobNode(index: TraceIndex, job: StoredSpan | undefined, queue: StoredSpan | undefined, execution: StoredSpan | undefined): Node | null {
  const identified = job ?? execution ?? queue;
  const jobId = identified === undefined ? null : numberAttribute(identified, 'ci.job.id');
  if (jobId === null) return null;
  // A job's end is GitLab's (its job span); while the job span is not there, its runner's.
  const ender = job ?? execution;
  if (ender === undefined) return null;
  const end = ms(ender.endNanos);
  // Pending: where the job span starts (GitLab's started_at − queued_duration where it said them, else the pickup's
  // queued_at); picked up: the job span's queued duration after that, else the queue wait's end, else the runner's.
  const pending = Math.min(end, job !== undefined ? ms(job.startNanos) : queue !== undefined ? ms(queue.startNanos) : ms(execution!.startNanos));
  const queued = job?.attributes[QUEUED_DURATION_ATTRIBUTE];
  const pickedUpAt =
    typeof queued === 'number' && Number.isFinite(queued)
      ? pending + Math.round(queued * 1000)
      : queue !== undefined
        ? ms(queue.endNanos)
        : execution !== undefined
          ? ms(execution.startNanos)
          : pending;
  const pickedUp = Math.min(end, Math.max(pending, pickedUpAt));
  const stages = execution === undefined ? [] : index.childrenOf(execution.spanId);
  return {
    jobId,
    name: textAttribute(job, 'cicd.pipeline.task.name'),
    stage: textAttribute(job, 'ci.job.stage'),
    pipelineId: numberAttribute(identified!, 'ci.pipeline.id'),
    pending,
    pickedUp,
    end,
    waitsFor: waitOf(job, queue),
    toldRetry: (numberAttribute(job ?? identified!, RETRIES_COUNT_ATTRIBUTE) ?? 0) > 0,
    parts: runParts(stages, pickedUp, end),
    runnerSpans: execution !== undefined,
    attempt: 1,
    superseded: false,
  };
}

/** A pipeline's span, its end when GitLab said it ended (a terminal status: a reopened one has none). */
interface PipelineFacts {
  readonly start: number;
  readonly end: number | null;
}

function pipelinesOf(spans: readonly StoredSpan[]): { pipelines: Map<number, PipelineFacts>; rootPipelineId: number | null } {
  const pipelines = new Map<number, PipelineFacts>();
  let rootPipelineId: number | null = null;
  for (const span of spans) {
    if (span.name !== PIPELINE) continue;
    const pipelineId = numberAttribute(span, 'ci.pipeline.id');
    if (pipelineId === null) continue;
    const status = span.attributes['ci.pipeline.status'] ?? span.attributes['ci.pipeline.worst_job_status'];
    pipelines.set(pipelineId, { start: ms(span.startNanos), end: FINISHED_STATUSES.has(String(status)) ? ms(span.endNanos) : null });
    if (span.parentSpanId === '') rootPipelineId = pipelineId;
  }
  return { pipelines, rootPipelineId };
}

/**
 * Jobs, by the job span id their queue wait and runner spans name as parent, and bridges (by their child pipeline's
 * id). A bridge whose child ended after the root pipeline had ended did not hold it up (no `strategy: depend`): it is
 * no job of the walk, as at the root's end, when the control plane writes the path, its child's hook has not come.
 */
function nodesOf(index: TraceIndex, spans: readonly StoredSpan[], rootEnd: number | null): { nodes: Node[]; bridges: Map<number, Node> } {
  const jobSpanIds = new Set<string>();
  for (const span of spans) {
    if (span.name === JOB) jobSpanIds.add(span.spanId);
    else if ((span.name === QUEUE_WAIT || span.name === JOB_EXECUTION) && span.parentSpanId !== '') jobSpanIds.add(span.parentSpanId);
  }
  const nodes: Node[] = [];
  for (const jobSpanId of jobSpanIds) {
    const job = index.byId.get(jobSpanId);
    if (job !== undefined && job.name !== JOB) continue;
    const queue = lastEnding(index.childrenOf(jobSpanId, QUEUE_WAIT));
    const execution = lastEnding(index.childrenOf(jobSpanId, JOB_EXECUTION));
    const node = jobNode(index, job, queue, execution);
    if (node !== null) nodes.push(node);
  }
  const bridges = new Map<number, Node>();
  for (const span of spans) {
    if (span.name !== BRIDGE) continue;
    const jobId = numberAttribute(span, 'ci.job.id');
    const child = Number(span.attributes['ci.downstream_pipeline.id']);
    if (jobId === null || !Number.isSafeInteger(child)) continue;
    const pipelineId = numberAttribute(span, 'ci.pipeline.id');
    const start = ms(span.startNanos);
    const end = Math.max(start, ms(span.endNanos));
    // A depend bridge holds its pipeline open until its child ends, and so the root: a child ending after it did not.
    const holdsParent = rootEnd === null || end <= rootEnd;
    const parts = emptyParts();
    parts.other = end - start;
    const node: Node = {
      jobId,
      name: textAttribute(span, 'cicd.pipeline.task.name'),
      stage: textAttribute(span, 'ci.job.stage'),
      pipelineId,
      pending: start,
      pickedUp: start,
      end,
      bridgeOf: child,
      holdsParent,
      waitsFor: 'gitlab',
      toldRetry: false,
      parts,
      runnerSpans: false,
      attempt: 1,
      superseded: false,
    };
    bridges.set(child, node);
    if (holdsParent) nodes.push(node);
  }
  return { nodes, bridges };
}

/**
 * Numbers the attempts of retried jobs (same pipeline, same name, in the order they became pending): each attempt
 * stays a job of the walk, as it blocked what became pending after it ended; a later attempt waited for its retry.
 * Jobs without a name (no webhook told it) are each their own.
 */
function numberAttempts(nodes: readonly Node[]): void {
  const byJob = new Map<string, Node[]>();
  for (const node of nodes) {
    if (node.name === null || node.bridgeOf !== undefined) continue;
    const key = `${node.pipelineId ?? ''}\u0000${node.name}`;
    const attempts = byJob.get(key);
    if (attempts === undefined) byJob.set(key, [node]);
    else attempts.push(node);
  }
  for (const attempts of byJob.values()) {
    attempts.sort((a, b) => a.pending - b.pending || a.jobId - b.jobId);
    for (const [i, node] of attempts.entries()) {
      node.attempt = i + 1;
      node.superseded = i < attempts.length - 1;
    }
  }
}

const byEnd = (a: Node, b: Node) => a.end - b.end || a.pending - b.pending || a.jobId - b.jobId;

/**
 * Each node's blocker within its pipeline: the node ending latest at or before it became pending (binary search
 * over the pipeline's nodes by end).
 */
function assignLocalBlockers(pipelines: ReadonlyMap<number | null, Node[]>): void {
  for (const members of pipelines.values()) {
    members.sort(byEnd);
    for (const node of members) {
      let low = 0;
      let high = members.length - 1;
      let found = -1;
      while (low <= high) {
        const middle = (low + high) >> 1;
        if (members[middle].end <= node.pending) {
          found = middle;
          low = middle + 1;
        } else {
          high = middle - 1;
        }
      }
      while (found >= 0 && members[found] === node) found -= 1;
      node.localBlocker = found >= 0 ? members[found] : null;
    }
  }
}

/**
 * Computes the critical path of one trace (a root pipeline with its child pipelines, or a child pipeline's
 * subtree). `spans` are each span once in its latest version. A pipeline still running gives the path so far.
 * Null when the trace holds no job that ended.
 */
export function criticalPath(spans: readonly StoredSpan[]): CriticalPath | null {
  return criticalPathWalk(spans).path;
}

/**
 * One job of the walk (SPEC §13's rows), on the path or off it: what blocked it and how long it waited, queued and
 * ran, as whole milliseconds. For a job on the path these are the path's own (clamped where clocks disagree), so the
 * path's jobs add up to its duration exactly; for a job off it, its own times against the blocker the walk finds for
 * it (the job of its pipeline that ended last before it became pending, through a bridge for a child's first jobs).
 */
export interface WalkedJob {
  readonly jobId: number;
  readonly pipelineId: number | null;
  readonly name: string | null;
  readonly stage: string | null;
  /** When it became pending, a runner took it, and it ended (epoch ms, its own times, unclamped). */
  readonly pendingMs: number;
  readonly pickedUpMs: number;
  readonly endMs: number;
  /** The job whose end let it become pending; null when none did (the wait is then since its pipeline's creation). */
  readonly blockedBy: number | null;
  readonly waitingFor: WaitingFor;
  readonly waitMs: number;
  readonly queueMs: number;
  readonly partsMs: Readonly<Record<RunnerPart, number>>;
  readonly runnerSpans: boolean;
  /** 1 for the first run of its name in its pipeline, 2 for its first retry, …; and whether a later attempt followed. */
  readonly attempt: number;
  readonly superseded: boolean;
  readonly onPath: boolean;
  /** How much longer it could have taken without delaying the root pipeline: 0 on the path; null without a path. */
  readonly slackMs: number | null;
}

export interface CriticalPathWalk {
  /** As {@link criticalPath} gives it. */
  readonly path: CriticalPath | null;
  /** Every job of the trace the walk knows (bridges are not jobs), in no particular order. */
  readonly jobs: WalkedJob[];
}

/**
 * The walk behind {@link criticalPath}, with every job's blocker, wait, queue and run, not only the path's: the path
 * is found first and is the same whatever is asked of the other jobs after it.
 */
export function criticalPathWalk(spans: readonly StoredSpan[]): CriticalPathWalk {
  const index = new TraceIndex(spans);
  const { pipelines: pipelineSpans, rootPipelineId } = pipelinesOf(spans);
  const root = rootPipelineId === null ? undefined : pipelineSpans.get(rootPipelineId);
  const { nodes, bridges } = nodesOf(index, spans, root?.end ?? null);
  if (nodes.length === 0) return { path: null, jobs: [] };
  numberAttempts(nodes);

  const pipelines = new Map<number | null, Node[]>();
  for (const node of nodes) {
    const members = pipelines.get(node.pipelineId);
    if (members === undefined) pipelines.set(node.pipelineId, [node]);
    else members.push(node);
  }
  assignLocalBlockers(pipelines);

  /** The last-ending node of a depend bridge's child pipeline, through nested bridges; the bridge itself when its child has none. */
  const throughBridges = (node: Node | null, seen = new Set<Node>()): Node | null => {
    let current = node;
    while (current?.bridgeOf !== undefined && current.holdsParent === true && !seen.has(current)) {
      seen.add(current);
      const members = pipelines.get(current.bridgeOf);
      if (members === undefined || members.length === 0) break;
      current = members[members.length - 1];
    }
    return current;
  };

  const resolving = new Set<Node>();
  const blockerOf = (node: Node): Node | null => {
    if (node.blocker !== undefined) return node.blocker;
    if (resolving.has(node)) return null;
    resolving.add(node);
    let blocker: Node | null = node.localBlocker ?? null;
    if (blocker === null && node.pipelineId !== null) {
      const bridge = bridges.get(node.pipelineId);
      if (bridge !== undefined && bridge !== node) blocker = blockerOf(bridge);
    } else {
      blocker = throughBridges(blocker);
    }
    node.blocker = blocker;
    resolving.delete(node);
    return blocker;
  };

  // The path explains the root pipeline: it starts from the root's job that ended last (a child's, through a depend
  // bridge), never from a job of a child that could not hold the root up: a root none of whose jobs held it up (its
  // one trigger's child outlived it) has no path. Without a root pipeline span (no hook yet), from the job that ended
  // last of the pipelines no bridge in the trace started.
  const candidates =
    rootPipelineId !== null ? (pipelines.get(rootPipelineId) ?? []) : nodes.filter((node) => node.pipelineId === null || !bridges.has(node.pipelineId));
  /** Every job off the path (or all of them, without a path): its own times against the blocker the walk finds for it. */
  const walkedJobs = (onPath: ReadonlyMap<Node, WalkedJob>, withSlack: boolean): WalkedJob[] =>
    nodes
      .filter((node) => node.bridgeOf === undefined)
      .map((node) => {
        const walked = onPath.get(node);
        if (walked !== undefined) return walked;
        const blocker = blockerOf(node);
        // Without a blocker, since its pipeline was created: a child's, whose span may not be there yet (the control
        // plane writes the path at the root's end with its bridge, not its span), when its trigger job was.
        const created = node.pipelineId === null ? undefined : (pipelineSpans.get(node.pipelineId)?.start ?? bridges.get(node.pipelineId)?.pending);
        const origin = blocker?.end ?? created ?? root?.start ?? node.pending;
        return {
          ...walkedFacts(node),
          blockedBy: blocker?.jobId ?? null,
          waitingFor: waitingForOf(node),
          waitMs: Math.max(0, node.pending - origin),
          queueMs: node.pickedUp - node.pending,
          partsMs: node.parts,
          onPath: false,
          slackMs: withSlack ? (node.slackMs ?? null) : null,
        };
      });

  if (candidates.length === 0) return { path: null, jobs: walkedJobs(new Map(), false) };
  const last = throughBridges(candidates.reduce((found, node) => (byEnd(node, found) > 0 ? node : found)))!;
  const walk: Node[] = [];
  const onPath = new Set<Node>();
  for (let node: Node | null = last; node !== null && !onPath.has(node); node = blockerOf(node)) {
    walk.push(node);
    onPath.add(node);
  }
  walk.reverse();

  const first = walk[0];
  const start = Math.min(first.pending, root === undefined ? first.pending : root.start);
  // Never past the end of the pipeline it explains, whatever rounding GitLab's times had.
  const pathEnd = root === undefined || root.end === null ? Infinity : Math.max(start, root.end);

  const totals: Record<keyof PathTotals, number> = { ...emptyTotals() };
  const path: PathElement[] = [];
  const walkedOnPath = new Map<Node, WalkedJob>();
  let previousEnd = start;
  for (const [i, node] of walk.entries()) {
    const blocker = i === 0 ? null : walk[i - 1];
    // Each element covers (previous end, its end]: clamped so that clocks that disagree never count time twice.
    const end = Math.min(pathEnd, Math.max(node.end, previousEnd));
    const pending = Math.min(end, Math.max(previousEnd, node.pending));
    const pickedUp = Math.min(end, Math.max(pending, node.pickedUp));
    const delay = pending - previousEnd;
    const queue = pickedUp - pending;
    const parts = end - pickedUp === node.end - node.pickedUp ? node.parts : runPartsScaled(node.parts, end - pickedUp);
    const waitingFor = waitingForOf(node);
    totals[WAIT_TOTAL[waitingFor]] += delay;
    totals.queue += queue;
    for (const part of RUNNER_PARTS) totals[part] += parts[part];
    path.push({
      job_id: node.jobId,
      name: node.name,
      stage: node.stage,
      pipeline_id: node.pipelineId,
      blocked_by: blocker?.jobId ?? null,
      waiting_for: waitingFor,
      delay_seconds: seconds(delay),
      queue_seconds: seconds(queue),
      parts: Object.fromEntries(RUNNER_PARTS.map((part) => [part, seconds(parts[part])])) as Record<RunnerPart, number>,
      duration_seconds: seconds(end - pending),
      attempts: node.attempt,
      runner_spans: node.runnerSpans,
    });
    if (node.bridgeOf === undefined) {
      walkedOnPath.set(node, {
        ...walkedFacts(node),
        blockedBy: blocker?.jobId ?? null,
        waitingFor,
        waitMs: delay,
        queueMs: queue,
        partsMs: parts,
        onPath: true,
        slackMs: 0,
      });
    }
    previousEnd = end;
  }

  // An attempt a later one replaced is off the path without slack: it cannot take longer now.
  const slack = slackOf(pipelines, bridges, onPath, previousEnd)
    .filter((node) => !onPath.has(node) && node.bridgeOf === undefined && !node.superseded)
    .map((node) => ({ job_id: node.jobId, name: node.name, slack_seconds: seconds(node.slackMs ?? 0) }))
    .sort((a, b) => b.slack_seconds - a.slack_seconds || a.job_id - b.job_id);

  return {
    path: {
      duration_seconds: seconds(previousEnd - start),
      totals: Object.fromEntries(Object.entries(totals).map(([key, value]) => [key, seconds(value)])) as PathTotals,
      path,
      slack,
    },
    jobs: walkedJobs(walkedOnPath, true),
  };
}

/** What a job waited for before becoming pending: a retry when it is a later attempt or GitLab says so, else its own facts. */
const waitingForOf = (node: Node): WaitingFor => (node.attempt > 1 || node.toldRetry ? 'retry' : node.waitsFor);

const walkedFacts = (node: Node) => ({
  jobId: node.jobId,
  pipelineId: node.pipelineId,
  name: node.name,
  stage: node.stage,
  pendingMs: node.pending,
  pickedUpMs: node.pickedUp,
  endMs: node.end,
  runnerSpans: node.runnerSpans,
  attempt: node.attempt,
  superseded: node.superseded,
});

/** A run's parts when its start had to move later (clocks that disagree): cut from `other` first, then from the start. */
export function runPartsScaled(parts: Readonly<Record<RunnerPart, number>>, runMs: number): Record<RunnerPart, number> {
  const scaled = { ...parts };
  let excess = RUNNER_PARTS.reduce((sum, part) => sum + parts[part], 0) - runMs;
  for (const part of ['other', ...RUNNER_PARTS] as RunnerPart[]) {
    if (excess <= 0) break;
    const cut = Math.min(excess, scaled[part]);
    scaled[part] -= cut;
    excess -= cut;
  }
  return scaled;
}

/**
 * How much longer each job could have taken without delaying the pipeline. Without `needs:`, a job that ended
 * before another became pending may be what that one waited for; so a job's slack is the least, over every job of
 * its pipeline pending after it ended, of (when that job's own blocker ended + that job's slack − this job's end),
 * and at most the time to the pipeline's end (a child pipeline's: its last job's end plus its bridge's slack).
 * Jobs are taken latest end first, with a Fenwick tree of minima over the pipeline's jobs ordered by pending:
 * n log n per pipeline. Jobs on the path have none.
 */
function slackOf(pipelines: ReadonlyMap<number | null, Node[]>, bridges: ReadonlyMap<number, Node>, onPath: ReadonlySet<Node>, pathEnd: number): Node[] {
  const done = new Set<number | null>();
  const result: Node[] = [];
  // A bridge whose child pipeline the path went through is on the path too.
  for (const node of onPath) {
    let pipeline = node.pipelineId;
    const seen = new Set<number>();
    while (pipeline !== null && bridges.has(pipeline) && !seen.has(pipeline)) {
      seen.add(pipeline);
      const bridge = bridges.get(pipeline)!;
      bridge.slackMs = 0;
      pipeline = bridge.pipelineId;
    }
  }
  const visit = (pipelineId: number | null, horizon: number) => {
    if (done.has(pipelineId)) return;
    done.add(pipelineId);
    const members = pipelines.get(pipelineId) ?? [];
    const byPending = [...members].sort((a, b) => a.pending - b.pending);
    const position = new Map(byPending.map((node, i) => [node, i]));
    const size = byPending.length;
    // Suffix minima: tree over reversed positions, so a prefix of it is a suffix of byPending.
    const tree = new Array<number>(size + 1).fill(Infinity);
    const update = (i: number, value: number) => {
      for (let at = size - i; at <= size; at += at & -at) tree[at] = Math.min(tree[at], value);
    };
    const suffixMin = (i: number) => {
      let found = Infinity;
      for (let at = size - i; at > 0; at -= at & -at) found = Math.min(found, tree[at]);
      return found;
    };
    const descending = [...members].sort((a, b) => b.end - a.end || b.pending - a.pending);
    for (const node of descending) {
      // The first job of the pipeline pending at or after this one's end.
      let low = 0;
      let high = size;
      while (low < high) {
        const middle = (low + high) >> 1;
        if (byPending[middle].pending >= node.end) high = middle;
        else low = middle + 1;
      }
      const bound = Math.min(horizon, low < size ? suffixMin(low) : Infinity);
      if (onPath.has(node) || node.slackMs === 0) node.slackMs = 0;
      else node.slackMs = Math.max(0, bound - node.end);
      if (node.localBlocker) update(position.get(node)!, node.localBlocker.end + node.slackMs);
      result.push(node);
    }
    for (const node of members) {
      if (node.bridgeOf === undefined) continue;
      const child = pipelines.get(node.bridgeOf) ?? [];
      const childEnd = child.length === 0 ? node.end : child.reduce((end, member) => Math.max(end, member.end), -Infinity);
      // A child that held its parent up may end as late as its bridge could; one that did not, as late as itself.
      visit(node.bridgeOf, childEnd + (node.holdsParent === true ? (node.slackMs ?? 0) : 0));
    }
  };
  const lastEnd = (pipelineId: number | null) => (pipelines.get(pipelineId) ?? []).reduce((end, member) => Math.max(end, member.end), -Infinity);
  const roots = [...pipelines.keys()].filter((pipelineId) => pipelineId === null || !bridges.has(pipelineId));
  for (const pipelineId of roots) visit(pipelineId, Math.max(pathEnd, lastEnd(pipelineId)));
  // Pipelines reached by no bridge visited above (a child whose bridge is missing from the trace): to their own end.
  for (const pipelineId of pipelines.keys()) visit(pipelineId, lastEnd(pipelineId));
  return result;
}
