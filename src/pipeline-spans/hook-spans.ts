import { gitlabPipelineSpanIdFor, gitlabTraceIdFor } from '../trace-context/trace-context';
import { ownedBy, TracedJob, TracedPipeline, tracedPipelineOf, TracedWorkStore } from '../traced-work/traced-work';
import { FinishedJob, PipelineEvent, WebhookEvent } from './pipeline-events';
import {
  BridgeJob,
  bridgeSpan,
  ControlPlaneSpan,
  NOT_FINISHED_STATUSES,
  pipelineSpan,
  pipelineSpanVersion,
  PipelineEnd,
  queueWaitSpan,
  reopenedPipelineEnd,
  SpanPlace,
} from './pipeline-span-model';
import { writtenCriticalPath } from './pipeline-critical-path';
import { appendTo, SpanDrawer } from './drawn-spans';
import type { CicdMetrics } from './cicd.metrics';
import { RUN_STATE_RANK, runStateOf } from './pipeline-runs';

/** Jobs of a hook's pipeline looked up when the pipeline's record is not found (one store read each, in parallel). */
const PIPELINE_JOBS_LOOKED_UP = 20;

/**
 * A chapter of a root pipeline's story (PipelineStoryStore): a job as its span was drawn, or a bridge as its child
 * pipeline's hook told it; what its critical path is computed from at the root pipeline's end.
 */
type Chapter =
  | { readonly kind: 'job'; readonly job: TracedJob; readonly end: FinishedJob; readonly toldBy: 'job_hook' | 'pipeline_hook' }
  | { readonly kind: 'bridge'; readonly place: SpanPlace; readonly bridge: BridgeJob; readonly child: PipelineEnd }
  /**
   * A job GitLab said was `waiting_for_resource` (its `resource_group` held): only a hook sent while it waited says so,
   * so it is kept until the root's end, where the job's span says it and the path names the wait a resource wait.
   */
  | { readonly kind: 'resource'; readonly jobId: number; readonly projectId: number };

/**
 * What a GitLab hook tells (SPEC §10 "Sources"): its spans, and the facts outcome sampling reads of it (SPEC §11).
 * The routing (pipeline-spans.service.ts) takes both where they go.
 */
export interface HookTold {
  readonly spans: ControlPlaneSpan[];
  /** A Pipeline Hook's pipeline, as its record (or its jobs, or its root) says; undefined for a Job Hook. */
  readonly pipeline?: TracedPipeline;
  /** A Job Hook's traced job and its status, when its pipeline is traced provisionally. */
  readonly jobStatuses: ReadonlyArray<{ readonly job: TracedJob; readonly statuses: readonly string[] }>;
  /**
   * A Job Hook's job the decorator did not trace (its pickup found the store away) that did not succeed: still its
   * pipeline's outcome (the Pipeline Hook lists only the last attempt of a retried job).
   */
  readonly untracedStatuses: ReadonlyArray<{ readonly pipelineId: number; readonly statuses: readonly string[] }>;
}

const TOLD_NOTHING: HookTold = { spans: [], jobStatuses: [], untracedStatuses: [] };

/**
 * The hooks' part of the control-plane spans: job spans closed by GitLab's account, pipeline spans in the versions
 * of their story, bridges drawn from their child pipelines, and the critical path written at the root's end.
 */
export class HookSpans {
  constructor(
    private readonly drawer: SpanDrawer,
    private readonly store: TracedWorkStore,
    private readonly scheme: 'keyed' | 'gitlab',
    private readonly runs: Pick<CicdMetrics, 'entered' | 'ended'>,
  ) {}

  /**
   * Throws StoreUnavailableError when the store is down. A Pipeline Hook tells only of its own project's pipeline
   * (SPEC §12 "Trust"): a record of another project with the same id, a job of another project, or a root of another
   * project is never taken for it, and its span never hangs on another project's.
   */
  async told(event: WebhookEvent): Promise<HookTold> {
    if (event.kind === 'job') {
      if (event.status === 'waiting_for_resource') await this.waitingForResource([event.jobId]);
      return event.job === undefined ? TOLD_NOTHING : this.finishedJobSpans([event.job], 'job_hook');
    }
    if (event.waitingForResourceJobIds !== undefined && event.waitingForResourceJobIds.length > 0)
      await this.waitingForResource(event.waitingForResourceJobIds);
    const upstream = await this.bridgeOfUpstreamProject(event);
    const recorded = ownedBy(await this.store.findTracedPipeline(event.pipelineId), event.projectId);
    // Found through its jobs or its root instead, its record was written just now.
    const pipeline = recorded ?? (await this.pipelineOfItsJobs(event));
    if (pipeline === null) return { ...TOLD_NOTHING, spans: upstream };
    // A pipeline lives as long as GitLab still tells of it (untraced jobs, a manual gate): its record with it.
    if (recorded !== null) await this.store.recordTracedPipelines([{ value: pipeline, ttlMs: this.drawer.rememberMs }]);
    return { spans: [...upstream, ...(await this.pipelineEventSpans(event, pipeline))], pipeline, jobStatuses: [], untracedStatuses: [] };
  }

  /** Jobs GitLab says wait for their resource group, noted in their root pipeline's story (traced jobs only). */
  private async waitingForResource(jobIds: readonly number[]): Promise<void> {
    if (this.scheme !== 'keyed') return;
    const traced = await Promise.all(jobIds.map((jobId) => this.store.findTracedJob(jobId)));
    const chapters = new Map<number, Array<{ key: string; text: string }>>();
    for (const job of traced) {
      if (job === null) continue;
      const chapter: Chapter = { kind: 'resource', jobId: job.jobId, projectId: job.projectId };
      appendTo(chapters, job.rootPipelineId, { key: `resource:${job.jobId}`, text: JSON.stringify(chapter) });
    }
    await Promise.all([...chapters].map(([root, told]) => this.store.recordTraceStory(root, told, this.drawer.rememberMs)));
  }

  /**
   * A multi-project downstream pipeline's hook (its `source_pipeline` names another project's pipeline and trigger
   * job) draws that trigger job, the bridge, in the upstream project's trace when it is traced: the upstream's own job,
   * with its status and times (it lasts while its downstream runs) and a pointer to the downstream pipeline
   * (`ci.downstream_pipeline.id`, `ci.downstream_project.id`), whose own trace is its project's. Nothing of the
   * downstream's (its jobs, names, failure reasons, ref, URLs) is written into the upstream's trace.
   */
  private async bridgeOfUpstreamProject(event: PipelineEvent): Promise<ControlPlaneSpan[]> {
    const source = event.source;
    if (this.scheme !== 'keyed' || event.end === undefined || source?.jobId === undefined || !fromAnotherProject(event)) return [];
    const upstream = ownedBy(await this.store.findTracedPipeline(source.pipelineId), source.projectId!);
    if (upstream === null) return [];
    const place = {
      traceId: upstream.traceId,
      spanId: this.drawer.jobSpanId(source.jobId),
      parentSpanId: this.drawer.pipelineSpanId(source.pipelineId),
      tracestate: upstream.tracestate,
    };
    const bridge = {
      jobId: source.jobId,
      pipelineId: source.pipelineId,
      projectId: upstream.projectId,
      downstreamPipelineId: event.pipelineId,
      downstreamProjectId: event.projectId,
    };
    const own: PipelineEnd = { status: event.end.status, createdAt: event.end.createdAt, finishedAt: event.end.finishedAt };
    // The downstream pipeline's own version: whichever of its spans tells of it first counts its run's end.
    const spans = await this.drawer.newerVersion(
      'pipeline_hook',
      event.pipelineId,
      own,
      [bridgeSpan(this.drawer.serviceName, place, bridge, own)],
      this.runEnded(event),
    );
    if (spans.length > 0) {
      const chapter: Chapter = { kind: 'bridge', place, bridge, child: own };
      await this.store.recordTraceStory(
        upstream.rootPipelineId,
        [{ key: `bridge:${event.pipelineId}`, text: JSON.stringify(chapter) }],
        this.drawer.rememberMs,
      );
    }
    return spans;
  }

  /**
   * A pipeline whose record is not in the store yet, known from one of its jobs the decorator enabled: the traced job
   * is written with its grant, before the pickup's answer, while the pipeline's record waits in its replica's pickup
   * batch for PICKUP_LINGER_MS. So a hook that reaches another replica within that window still finds its pipeline.
   */
  private async pipelineOfItsJobs(event: PipelineEvent): Promise<TracedPipeline | null> {
    const jobIds = [...event.finishedJobs.map((job) => job.jobId), ...event.activeJobIds].slice(0, PIPELINE_JOBS_LOOKED_UP);
    const jobs = await Promise.all(jobIds.map((jobId) => this.store.findTracedJob(jobId)));
    const job = jobs.find((found) => found !== null && found.pipelineId === event.pipelineId && found.projectId === event.projectId);
    const pipeline = job === undefined || job === null ? await this.childOfTracedRoot(event) : tracedPipelineOf(job, event.pipelineId);
    if (pipeline === null) return null;
    await this.store.recordTracedPipelines([{ value: pipeline, ttlMs: this.drawer.rememberMs }]);
    return pipeline;
  }

  /**
   * A child pipeline none of whose jobs was traced (their pickups found the store away), of a root pipeline that is:
   * it is in its root's trace under its root's head decision, so its hooks still tell (a child failing keeps the
   * whole pipeline, SPEC §11). Found through the hook's root pipeline id, else the pipeline that triggered it.
   */
  private async childOfTracedRoot(event: PipelineEvent): Promise<TracedPipeline | null> {
    const rootId = event.rootPipelineId ?? event.source?.pipelineId;
    if (rootId === undefined || rootId === event.pipelineId) return null;
    // Only a root of its own project: a multi-project downstream pipeline is not in its upstream's trace.
    const root = ownedBy(await this.store.findTracedPipeline(rootId), event.projectId);
    if (root === null) return null;
    const { asRoot: _guess, ...child } = root;
    return { ...child, pipelineId: event.pipelineId };
  }

  /** Job spans for the finished jobs the decorator enabled; the others are not ours to tell of. */
  private async finishedJobSpans(finished: readonly FinishedJob[], toldBy: 'job_hook' | 'pipeline_hook'): Promise<HookTold> {
    if (this.scheme !== 'keyed' || finished.length === 0) return TOLD_NOTHING;
    const traced = await Promise.all(finished.map((job) => this.store.findTracedJob(job.jobId)));
    // One pass gathers what the hook tells, one write per trace or pipeline:
    // - a provisional pipeline's job that failed keeps it even when the pipeline succeeds (allowed to fail), so a Job
    //   Hook's statuses are told (a Pipeline Hook's are told with its pipeline);
    // - each job's chapter of its root pipeline's story, while its record is there to tell it: one per kind of hook,
    //   as they tell different things (the Job Hook's times to the millisecond, the Pipeline Hook's whether manual);
    // - a job the decorator did not trace (its pickup found the store away) still tells its pipeline's outcome: the
    //   Pipeline Hook lists only the last attempt of a retried job, so a Job Hook may be the only word of a failure.
    const statuses = new Map<string, { job: TracedJob; statuses: string[] }>();
    const chapters = new Map<number, Array<{ key: string; text: string }>>();
    const untraced = new Map<number, string[]>();
    for (const [i, end] of finished.entries()) {
      const job = traced[i];
      if (job === null) {
        if (toldBy === 'job_hook' && end.status !== 'success') appendTo(untraced, end.pipelineId, end.status);
        continue;
      }
      if (toldBy === 'job_hook' && job.outcomePolicy !== undefined) {
        const known = statuses.get(job.traceId);
        if (known === undefined) statuses.set(job.traceId, { job, statuses: [end.status] });
        else known.statuses.push(end.status);
      }
      const chapter: Chapter = { kind: 'job', job, end, toldBy };
      appendTo(chapters, job.rootPipelineId, { key: `job:${job.jobId}:${toldBy}`, text: JSON.stringify(chapter) });
    }
    await Promise.all([...chapters].map(([root, told]) => this.store.recordTraceStory(root, told, this.drawer.rememberMs)));
    return {
      spans: finished.flatMap((end, i) => {
        const job = traced[i];
        return job === null ? [] : [this.drawer.jobSpanOf(job, end)];
      }),
      jobStatuses: [...statuses.values()],
      untracedStatuses: [...untraced].map(([pipelineId, seen]) => ({ pipelineId, statuses: seen })),
    };
  }

  private async pipelineEventSpans(event: PipelineEvent, pipeline: TracedPipeline): Promise<ControlPlaneSpan[]> {
    const { spans } = await this.finishedJobSpans(event.finishedJobs, 'pipeline_hook');
    if (event.end === undefined) return [...spans, ...(await this.reopened(event, pipeline))];
    const root = event.rootPipelineId ?? pipeline.rootPipelineId;
    const serviceName = this.drawer.serviceName;
    if (this.scheme === 'gitlab') {
      // Rails emits the job spans under a pipeline parent it never emits: only the root's is ours.
      if (event.pipelineId !== root) return spans;
      const place = { traceId: gitlabTraceIdFor(root), spanId: gitlabPipelineSpanIdFor(root) };
      await this.ended(event, place);
      return this.drawer.newerVersion(
        'pipeline_hook',
        event.pipelineId,
        event.end,
        [pipelineSpan(serviceName, place, pipeline, event.end)],
        this.runEnded(event),
      );
    }
    const place = { traceId: pipeline.traceId, spanId: this.drawer.pipelineSpanId(event.pipelineId), tracestate: pipeline.tracestate };
    if (event.pipelineId === root) {
      await this.ended(event, place);
      const rootEnd = await this.rootEndSpans(event, pipeline, place);
      return [...spans, ...(await this.drawer.newerVersion('pipeline_hook', event.pipelineId, event.end, rootEnd, this.runEnded(event)))];
    }
    // A pipeline hangs only on its own project's spans: a multi-project downstream pipeline whose jobs named their
    // upstream's root is the top of its project's part of the trace (its bridge is drawn for the upstream, above).
    if (fromAnotherProject(event) || !(await this.rootOfItsProject(root, pipeline))) {
      await this.ended(event, place);
      return [
        ...spans,
        ...(await this.drawer.newerVersion(
          'pipeline_hook',
          event.pipelineId,
          event.end,
          [pipelineSpan(serviceName, place, pipeline, event.end)],
          this.runEnded(event),
        )),
      ];
    }
    const parent = await this.childPipelineParent(event, pipeline, root);
    const childPlace = { ...place, parentSpanId: parent.spanId };
    await this.ended(event, childPlace);
    const child = pipelineSpan(serviceName, childPlace, pipeline, event.end);
    const emitted = await this.drawer.newerVersion('pipeline_hook', event.pipelineId, event.end, [...parent.spans, child], this.runEnded(event));
    if (emitted.length > 0 && parent.chapter !== undefined) {
      await this.store.recordTraceStory(root, [{ key: `bridge:${event.pipelineId}`, text: JSON.stringify(parent.chapter) }], this.drawer.rememberMs);
    }
    return [...spans, ...emitted];
  }

  /** Whether `root`, as far as the store knows it, is a pipeline of `pipeline`'s project (unknown: taken as such). */
  private async rootOfItsProject(root: number, pipeline: TracedPipeline): Promise<boolean> {
    const record = await this.store.findTracedPipeline(root);
    return record === null || record.projectId === pipeline.projectId;
  }

  /** A pipeline's end as its span is drawn, kept for a hook that says it runs again. */
  private async ended(event: PipelineEvent, place: SpanPlace): Promise<void> {
    const ended = { place, end: { ...event.end! }, finishedJobIds: event.finishedJobs.map((job) => job.jobId) };
    await this.store.recordPipelineEnd(event.pipelineId, ended, this.drawer.rememberMs);
  }

  /**
   * A pipeline that had ended runs again (SPEC §10 the final story, §12 "final"): a retried job (a new job id) or a
   * played manual job (one that had not finished) is pending or running. Its span is drawn again at once as a newer,
   * running version, so reads say it is not final until it ends again. The version sits just above the end it
   * reopens (that end's time plus 1 ms), never above the end to come (GitLab's later finish), whatever clocks say. A
   * running hook whose active jobs had all finished by the end is an old one delivered late: it reopens nothing.
   * (Outcome sampling reads the same rule, runsAgain in outcome-decision.ts, for its own reopening.)
   */
  private async reopened(event: PipelineEvent, pipeline: TracedPipeline): Promise<ControlPlaneSpan[]> {
    const [ended] = await Promise.all([this.store.pipelineEnd(event.pipelineId), this.runStateTold(event, pipeline)]);
    if (ended === null) return [];
    const finished = new Set(ended.finishedJobIds);
    if (!event.activeJobIds.some((jobId) => !finished.has(jobId))) return [];
    const previous = ended.end as unknown as PipelineEnd;
    // Drawn as of 1 ms after the end it follows, so its version is above it whatever the statuses; GitLab's next end is later.
    const status = event.status !== undefined && NOT_FINISHED_STATUSES.has(event.status) ? event.status : 'running';
    const running = reopenedPipelineEnd({ ...previous, finishedAt: previous.finishedAt + 1 }, status);
    const span = pipelineSpan(this.drawer.serviceName, ended.place as SpanPlace, pipeline, running);
    const version = pipelineSpanVersion(running);
    return this.drawer.newerVersion('pipeline_hook', event.pipelineId, running, [span], () => this.runs.entered(event, 'executing', version));
  }

  /**
   * The run state (pending, executing) an unfinished pipeline's hook says, raised as its span's version (below every
   * drawn version, see RUN_STATE_RANK): counted active by the replica that told it first, never by a hook repeated,
   * delivered after a later state, or after the run's end. Only for a pipeline whose end is told here too (in the
   * `gitlab` scheme, a root's), or it would stay active.
   */
  private async runStateTold(event: PipelineEvent, pipeline: TracedPipeline): Promise<void> {
    const state = runStateOf(event.status);
    if (state === undefined) return;
    if (this.scheme === 'gitlab' && event.pipelineId !== (event.rootPipelineId ?? pipeline.rootPipelineId)) return;
    const told = RUN_STATE_RANK[state];
    const { before } = await this.store.raisePipelineSpanVersion(event.pipelineId, told, this.drawer.rememberMs);
    if (before < told) this.runs.entered(event, state, told);
  }

  /** What counts a run's end (CI/CD metrics), given to the raise of its pipeline span's version. */
  private runEnded(event: PipelineEvent): (before: number) => void {
    return (before) => this.runs.ended(event, before);
  }

  /**
   * The root pipeline's span at its end with its critical path written on it and on each job span of
   * the trace (SPEC §12), the job spans again as a newer version: the root pipeline's. Computed from the story told so
   * far (every job and bridge of the trace whose hook has come), with the jobs this hook names as it tells them.
   */
  private async rootEndSpans(event: PipelineEvent, pipeline: TracedPipeline, place: SpanPlace): Promise<ControlPlaneSpan[]> {
    const end = event.end!;
    const serviceName = this.drawer.serviceName;
    // Only its project's: a job of another project naming this pipeline as its root is not on its path (SPEC §12 "Trust").
    const chapters = (await this.store.traceStory(event.pipelineId))
      .map((text) => JSON.parse(text) as Chapter)
      .filter((chapter) => chapterProject(chapter) === pipeline.projectId);
    const waitedForResource = new Set(chapters.flatMap((chapter) => (chapter.kind === 'resource' ? [chapter.jobId] : [])));
    // A job as its Job Hook told it (its times to the millisecond), else as a Pipeline Hook did; manual and `when` as the
    // latter says (the Job Hook says neither), and whether it waited for its resource group as any hook said.
    const told = new Map<number, { job: TracedJob; end: FinishedJob }>();
    for (const chapter of chapters) {
      if (chapter.kind !== 'job') continue;
      const other = told.get(chapter.job.jobId);
      const [byJobHook, byPipelineHook] = chapter.toldBy === 'job_hook' ? [chapter, other] : [other, chapter];
      const manual = byPipelineHook?.end.manual;
      const when = byPipelineHook?.end.when;
      const end = byJobHook?.end ?? byPipelineHook!.end;
      told.set(chapter.job.jobId, {
        job: chapter.job,
        end: {
          ...end,
          ...(manual === undefined ? {} : { manual }),
          ...(when === undefined ? {} : { when }),
          ...(waitedForResource.has(chapter.job.jobId) ? { waitedForResource: true } : {}),
        },
      });
    }
    const jobs = [...told.values()];
    const drawn: ControlPlaneSpan[] = [pipelineSpan(serviceName, place, pipeline, end)];
    for (const chapter of chapters) if (chapter.kind === 'bridge') drawn.push(bridgeSpan(serviceName, chapter.place, chapter.bridge, chapter.child));
    for (const { job, end: jobEnd } of jobs) {
      drawn.push(this.drawer.jobSpanOf(job, jobEnd));
      if (job.queuedAt !== undefined) {
        const queuePlace = { traceId: job.traceId, spanId: this.drawer.queueSpanId(job.jobId), parentSpanId: this.drawer.jobSpanId(job.jobId) };
        drawn.push(queueWaitSpan(serviceName, queuePlace, { ...job, queuedAt: job.queuedAt }));
      }
    }
    const written = writtenCriticalPath(drawn);
    if (written === null) return [drawn[0]];
    const version = pipelineSpanVersion(end);
    return [
      pipelineSpan(serviceName, place, pipeline, end, written.pipeline),
      // An earlier attempt of a retried job is neither on the path nor beside it: not on it.
      ...jobs.map(({ job, end: jobEnd }) =>
        this.drawer.jobSpanOf(job, jobEnd, { attributes: written.jobs.get(job.jobId) ?? { 'ci.job.critical_path': false }, version }),
      ),
    ];
  }

  /**
   * A child pipeline hangs on the trigger job that started it, when that job's pipeline is traced in the
   * same trace; the trigger job's span is emitted from here, since GitLab sends no Job Hook for it.
   * Otherwise (source unknown, or not traced) it hangs on the root pipeline's span.
   */
  private async childPipelineParent(
    event: PipelineEvent,
    pipeline: TracedPipeline,
    root: number,
  ): Promise<{ spanId: string; spans: ControlPlaneSpan[]; chapter?: Chapter }> {
    const source = event.source;
    const upstream = source?.jobId === undefined ? null : ownedBy(await this.store.findTracedPipeline(source.pipelineId), pipeline.projectId);
    if (source?.jobId === undefined || upstream === null || upstream.traceId !== pipeline.traceId)
      return { spanId: this.drawer.pipelineSpanId(root), spans: [] };
    const place = {
      traceId: pipeline.traceId,
      spanId: this.drawer.jobSpanId(source.jobId),
      parentSpanId: this.drawer.pipelineSpanId(source.pipelineId),
      tracestate: pipeline.tracestate,
    };
    const job = {
      jobId: source.jobId,
      pipelineId: source.pipelineId,
      projectId: source.projectId ?? upstream.projectId,
      downstreamPipelineId: event.pipelineId,
    };
    const bridge = bridgeSpan(this.drawer.serviceName, place, job, event.end!);
    return { spanId: bridge.spanId, spans: [bridge], chapter: { kind: 'bridge', place, bridge: job, child: event.end! } };
  }
}

/**
 * Whether a hook's pipeline was triggered from another project's pipeline (GitLab's multi-project pipelines: its
 * `source_pipeline.project.id` is not its own project's id).
 */
function fromAnotherProject(event: PipelineEvent): boolean {
  return event.source?.projectId !== undefined && event.source.projectId !== event.projectId;
}

/** The project a chapter of a root pipeline's story belongs to: only its own project's are on its path. */
function chapterProject(chapter: Chapter): number {
  switch (chapter.kind) {
    case 'job':
      return chapter.job.projectId;
    case 'bridge':
      return chapter.bridge.projectId;
    case 'resource':
      return chapter.projectId;
    default: {
      const unreachable: never = chapter;
      throw new Error(`unhandled chapter ${JSON.stringify(unreachable)}`);
    }
  }
}
