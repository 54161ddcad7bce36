import { ownedBy, RunnerJobEnd, TracedJob, tracedPipelineOf, TracedWorkStore } from '../traced-work/traced-work';
import { ControlPlaneSpan, pipelineSeenFromJobs, pipelineSpan } from './pipeline-span-model';
import { SpanDrawer } from './drawn-spans';

/**
 * Without webhooks (SPEC §10 "Sources"), a job span is closed from what the gateway saw: the end and `ci.job.status`
 * of the runner's `job_execution` span; and each trace still gets its root, drawn from its traced jobs' runner ends.
 */
export class RunnerSpans {
  constructor(
    private readonly drawer: SpanDrawer,
    private readonly store: TracedWorkStore,
  ) {}

  /** The job's span closed at its runner's end, and its pipelines' spans as the runners have told them so far. */
  async closed(job: TracedJob, end: { endMs: number; status?: string }): Promise<ControlPlaneSpan[]> {
    const status = end.status ?? 'success';
    const closed = this.drawer.jobSpanOf(job, { status, finishedAt: end.endMs, failureReason: status === 'failed' ? 'failed' : undefined });
    const runnerEnd = { jobId: job.jobId, queuedAt: job.queuedAt ?? job.pickedUpAt, finishedAt: end.endMs, status };
    return [closed, ...(await this.pipelineSpansSeenFromRunners(job, runnerEnd))];
  }

  /**
   * The job's pipeline's span, and its root pipeline's when it is a child's (hung on the root, as nothing tells of
   * its trigger job), drawn from the ends of the traced jobs its runners have reported so far, the root's from all of
   * its pipelines' jobs. The root's only when its record is of the job's project: a job of a multi-project downstream
   * pipeline naming another project's pipeline as its root never draws (nor adds its end to) that pipeline's span.
   */
  private async pipelineSpansSeenFromRunners(job: TracedJob, end: RunnerJobEnd): Promise<ControlPlaneSpan[]> {
    const rootOfItsProject = job.pipelineId !== job.rootPipelineId && ownedBy(await this.store.findTracedPipeline(job.rootPipelineId), job.projectId) !== null;
    const pipelineIds = rootOfItsProject ? [job.pipelineId, job.rootPipelineId] : [job.pipelineId];
    const seen = await Promise.all(pipelineIds.map((pipelineId) => this.store.recordRunnerJobEnd(pipelineId, end, this.drawer.rememberMs)));
    const spans: ControlPlaneSpan[] = [];
    for (const [i, pipelineId] of pipelineIds.entries()) {
      const facts = pipelineSeenFromJobs(seen[i]);
      if (facts === undefined) continue;
      const place = {
        traceId: job.traceId,
        spanId: this.drawer.pipelineSpanId(pipelineId),
        tracestate: job.tracestate,
        ...(pipelineId === job.rootPipelineId ? {} : { parentSpanId: this.drawer.pipelineSpanId(job.rootPipelineId) }),
      };
      const pipeline = pipelineSpan(this.drawer.serviceName, place, tracedPipelineOf(job, pipelineId), facts);
      spans.push(...(await this.drawer.newerVersion('runner', pipelineId, facts, [pipeline])));
    }
    return spans;
  }
}
