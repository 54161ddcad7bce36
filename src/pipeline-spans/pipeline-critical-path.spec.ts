import { loadConfig } from '../config/app-config';
import { pipelineSpansServiceOn } from '../../test/helpers/pipeline-spans-service';
import { runMs } from '../across/job-run';
import { jobRunsOfTrace } from '../across/job-runs-of-trace';
import { criticalPath } from '../critical-path/critical-path';
import { CollectedSpan, collectedSpans } from '../otlp/collected-spans';
import { MemoryTracedWorkStore } from '../traced-work/memory-traced-work-store';
import { TracedJob } from '../traced-work/traced-work';
import { MemoryOutboxStore } from '../outbox/memory-outbox-store';
import { JOB_FIGURES } from './pipeline-critical-path';
import { FinishedJob, PipelineEvent } from './pipeline-events';
import { PipelineSpansService } from './pipeline-spans.service';
import { SPAN_VERSION_ATTRIBUTE } from './pipeline-span-model';

/**
 * SPEC §12: the critical path the control plane writes on the spans it emits when the root pipeline ends, from GitLab's
 * Job and Pipeline Hooks as parsed (src/pipeline-spans/pipeline-events.ts). What a user reads is what the collector
 * keeps: each span's latest version. Times are seconds after the root pipeline was created.
 */

const T0 = Date.parse('2026-11-25T10:00:00Z');
const at = (seconds: number) => T0 + seconds * 1000;
const ROOT = 500;
const PROJECT = 7;
const TRACE = 'c'.repeat(32);

interface PlannedJob {
  readonly jobId: number;
  readonly name: string;
  readonly stage?: string;
  readonly pipelineId?: number;
  readonly queuedAt: number;
  readonly pickedUpAt: number;
  readonly finishedAt: number;
  readonly status?: string;
  readonly manual?: boolean;
}

/** One traced root pipeline told to the service as GitLab would: pickups, Job Hooks, then Pipeline Hooks. */
class PipelineStory {
  readonly store = new MemoryTracedWorkStore();
  readonly outbox = new MemoryOutboxStore();
  readonly service: PipelineSpansService;

  constructor() {
    const config = loadConfig({ GITLAB_WEBHOOK_SECRET_FILE: '/dev/null' });
    this.service = pipelineSpansServiceOn(config, { store: this.store, outbox: this.outbox });
  }

  async pipelines(...pipelineIds: number[]): Promise<void> {
    await this.store.recordTracedPipelines(
      pipelineIds.map((pipelineId) => ({ value: { pipelineId, rootPipelineId: ROOT, projectId: 7, traceId: TRACE }, ttlMs: 3_600_000 })),
    );
  }

  /** The job picked up and, as GitLab sends it, its Job Hook (which never says whether it is manual). */
  async jobEnds(job: PlannedJob): Promise<FinishedJob> {
    const traced: TracedJob = {
      jobId: job.jobId,
      pipelineId: job.pipelineId ?? ROOT,
      rootPipelineId: ROOT,
      projectId: 7,
      runnerId: 17,
      runnerType: 'project_type',
      traceId: TRACE,
      queuedAt: at(job.queuedAt),
      pickedUpAt: at(job.pickedUpAt),
    };
    this.store.rememberTracedJob(traced, Date.now() + 3_600_000);
    const finished: FinishedJob = {
      jobId: job.jobId,
      pipelineId: traced.pipelineId,
      status: job.status ?? 'success',
      startedAt: at(job.pickedUpAt),
      finishedAt: at(job.finishedAt),
      name: job.name,
      stage: job.stage ?? job.name,
    };
    await this.service.handleWebhook({ kind: 'job', jobId: job.jobId, job: finished });
    return finished;
  }

  /** The pipeline's terminal Pipeline Hook, its `builds` saying which jobs are manual. */
  async pipelineEnds(
    pipelineId: number,
    jobs: readonly PlannedJob[],
    end: { createdAt: number; finishedAt: number; status?: string },
    source?: PipelineEvent['source'],
  ): Promise<void> {
    const finishedJobs = jobs.map((job) => ({
      jobId: job.jobId,
      pipelineId,
      status: job.status ?? 'success',
      startedAt: at(job.pickedUpAt),
      finishedAt: at(job.finishedAt),
      name: job.name,
      stage: job.stage ?? job.name,
      manual: job.manual ?? false,
    }));
    await this.service.handleWebhook({
      kind: 'pipeline',
      pipelineId,
      projectId: 7,
      rootPipelineId: ROOT,
      source,
      end: { status: end.status ?? 'success', createdAt: at(end.createdAt), finishedAt: at(end.finishedAt) },
      finishedJobs,
      activeJobIds: [],
    });
  }

  /** Everything the collector would keep: every version sent, and each span in its latest. */
  async collected(): Promise<{ sent: CollectedSpan[]; latest: CollectedSpan[] }> {
    const claimed = await this.outbox.claim(10_000, 60_000);
    const sent = collectedSpans({ resourceSpans: claimed.map((entry) => JSON.parse(entry.body.toString()) as Record<string, unknown>) });
    const version = (span: CollectedSpan) => Number(span.attributes[SPAN_VERSION_ATTRIBUTE] ?? 0);
    const latest = new Map<string, CollectedSpan>();
    for (const span of sent) if (version(span) >= version(latest.get(span.spanId) ?? span)) latest.set(span.spanId, span);
    return { sent, latest: [...latest.values()] };
  }

  close(): void {
    this.store.close();
    this.outbox.close();
  }
}

/** By job name: what the latest job span says of the path. */
function pathAttributes(latest: readonly CollectedSpan[]): Record<string, Record<string, unknown>> {
  const jobs = latest.filter((span) => span.name === 'job');
  return Object.fromEntries(
    jobs.map((span) => [
      `${String(span.attributes['cicd.pipeline.task.name'])}#${String(span.attributes['ci.job.id'])}`,
      Object.fromEntries(Object.entries(span.attributes).filter(([key]) => PATH_KEYS.includes(key))),
    ]),
  );
}
const PATH_KEYS = ['ci.job.critical_path', 'ci.job.critical_path_seconds', 'ci.job.slack_seconds'];

/** By job name: the walk's figures the latest job span carries (SPEC §13), as a row of the reads would hold them. */
function writtenFigures(latest: readonly CollectedSpan[]): Record<string, unknown> {
  const seconds = (value: unknown) => (typeof value === 'number' ? Math.round(value * 1000) : null);
  return Object.fromEntries(
    latest
      .filter((span) => span.name === 'job')
      .map((span) => {
        const told = span.attributes;
        const onPath = told['ci.job.critical_path'] === true;
        return [
          `${String(told['cicd.pipeline.task.name'])}#${String(told['ci.job.id'])}`,
          {
            waitMs: seconds(told[JOB_FIGURES.wait]),
            waitingFor: told[JOB_FIGURES.waitingFor],
            queueMs: seconds(told[JOB_FIGURES.queue]),
            runMs: seconds(told[JOB_FIGURES.run]),
            attempt: told[JOB_FIGURES.attempt],
            retried: told[JOB_FIGURES.retried],
            onCriticalPath: onPath,
            slackMs: onPath ? 0 : seconds(told['ci.job.slack_seconds']),
          },
        ];
      }),
  );
}

/** The same, as the reads compute each job's row from the whole trace (src/across/job-runs-of-trace.ts). */
function rowFigures(latest: readonly CollectedSpan[]): Record<string, unknown> {
  return Object.fromEntries(
    jobRunsOfTrace(latest, PROJECT).map((row) => [
      `${row.name}#${row.jobId}`,
      {
        waitMs: row.waitMs,
        waitingFor: row.waitingFor,
        queueMs: row.queueMs,
        runMs: runMs(row),
        attempt: row.attempt,
        retried: row.retried,
        onCriticalPath: row.onCriticalPath,
        slackMs: row.slackMs,
      },
    ]),
  );
}

const rootParts = (latest: readonly CollectedSpan[]) => {
  const root = latest.find((span) => span.name === 'pipeline' && span.parentSpanId === '')!;
  return Object.fromEntries(
    Object.entries(root.attributes)
      .filter(([key]) => key.startsWith('ci.pipeline.critical_path.'))
      .map(([key, seconds]) => [key.slice('ci.pipeline.critical_path.'.length, -'_seconds'.length), seconds]),
  );
};

describe('the critical path the control plane writes at the root pipeline end (SPEC §12)', () => {
  let story: PipelineStory;
  beforeEach(async () => {
    story = new PipelineStory();
    await story.pipelines(ROOT);
  });
  afterEach(() => story.close());

  it('stages in sequence: every job on the path with its time on it, the root pipeline with the time by part, the same path the reads find', async () => {
    const jobs = [
      { jobId: 5001, name: 'build', queuedAt: 2, pickedUpAt: 12, finishedAt: 70 },
      { jobId: 5002, name: 'test', queuedAt: 71, pickedUpAt: 81, finishedAt: 200 },
      { jobId: 5003, name: 'deploy', queuedAt: 203, pickedUpAt: 204, finishedAt: 260 },
    ];
    for (const job of jobs) await story.jobEnds(job);
    await story.pipelineEnds(ROOT, jobs, { createdAt: 0, finishedAt: 261 });
    const { latest } = await story.collected();

    expect(pathAttributes(latest)).toEqual({
      'build#5001': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 68 },
      'test#5002': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 129 },
      'deploy#5003': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 57 },
    });
    // 2 s before build was pending, 1 s and 3 s between jobs; 10 + 10 + 1 s waiting for runners; the rest running.
    expect(rootParts(latest)).toEqual({ delay: 6, manual_wait: 0, retry_wait: 0, delayed_wait: 0, resource_wait: 0, queue: 21, run: 233 });
    // What the reads compute from the same spans: the same jobs, the same time.
    const read = criticalPath(latest)!;
    expect(read.path.map((element) => element.job_id)).toEqual([5001, 5002, 5003]);
    expect(read.duration_seconds).toBe(260);
  });

  it('parallel jobs: the longer is on the path, the shorter is not and has the difference as slack', async () => {
    const jobs = [
      { jobId: 5001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 60 },
      { jobId: 5002, name: 'test', stage: 'test', queuedAt: 61, pickedUpAt: 62, finishedAt: 180 },
      { jobId: 5003, name: 'lint', stage: 'test', queuedAt: 61, pickedUpAt: 62, finishedAt: 90 },
    ];
    for (const job of jobs) await story.jobEnds(job);
    await story.pipelineEnds(ROOT, jobs, { createdAt: 0, finishedAt: 181 });
    const { latest } = await story.collected();

    expect(pathAttributes(latest)).toEqual({
      'build#5001': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 60 },
      'test#5002': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 119 },
      'lint#5003': { 'ci.job.critical_path': false, 'ci.job.slack_seconds': 90 },
    });
  });

  it('a manual job played an hour later: its span says it is manual, and the hour is a manual wait, not GitLab delaying the pipeline', async () => {
    const jobs = [
      { jobId: 5001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 60 },
      { jobId: 5002, name: 'deploy', queuedAt: 3660, pickedUpAt: 3662, finishedAt: 3700, manual: true },
    ];
    for (const job of jobs) await story.jobEnds(job);
    await story.pipelineEnds(ROOT, jobs, { createdAt: 0, finishedAt: 3701 });
    const { latest } = await story.collected();

    const deploy = latest.find((span) => span.attributes['ci.job.id'] === 5002)!;
    expect(deploy.attributes).toMatchObject({ 'ci.job.manual': true, 'ci.job.critical_path': true });
    expect(latest.find((span) => span.attributes['ci.job.id'] === 5001)!.attributes['ci.job.manual']).toBe(false);
    expect(rootParts(latest)).toMatchObject({ delay: 0, manual_wait: 3600, queue: 3 });
    expect(criticalPath(latest)!.path[1]).toMatchObject({ job_id: 5002, waiting_for: 'manual', delay_seconds: 3600 });
  });

  it('a job retried to success after the pipeline failed: the path follows the pipeline story, both attempts on it, the wait between them a retry, each version sent once', async () => {
    const build = { jobId: 5001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 60 };
    const failed = { jobId: 5002, name: 'test', queuedAt: 61, pickedUpAt: 62, finishedAt: 90, status: 'failed' };
    await story.jobEnds(build);
    await story.jobEnds(failed);
    await story.pipelineEnds(ROOT, [build, failed], { createdAt: 0, finishedAt: 91, status: 'failed' });
    const first = await story.collected();
    expect(pathAttributes(first.latest)['test#5002']).toEqual({ 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 29 });

    // Someone retries test ten minutes later; it passes and the pipeline finishes again. Builds list the last attempt.
    const retried = { jobId: 5003, name: 'test', queuedAt: 691, pickedUpAt: 700, finishedAt: 800 };
    await story.jobEnds(retried);
    await story.pipelineEnds(ROOT, [build, retried], { createdAt: 0, finishedAt: 801 });
    const second = await story.collected();

    expect(pathAttributes(second.latest)).toEqual({
      'build#5001': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 60 },
      // The failed attempt ran on the path: the retry waited for it to end, then for the person (issue 56, 5b).
      'test#5002': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 29 },
      'test#5003': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 109 },
    });
    expect(rootParts(second.latest)).toMatchObject({ retry_wait: 601, queue: 11 });
    // Each job span carries the walk's figures, the same as the reads' rows of the trace (SPEC §13).
    expect(writtenFigures(second.latest)['test#5003']).toEqual({
      waitMs: 601_000,
      waitingFor: 'retry',
      queueMs: 9_000,
      runMs: 100_000,
      attempt: 2,
      retried: false,
      onCriticalPath: true,
      slackMs: 0,
    });
    expect(writtenFigures(second.latest)['test#5002']).toMatchObject({ attempt: 1, retried: true, onCriticalPath: true });
    expect(writtenFigures(second.latest)).toEqual(rowFigures(second.latest));
    // Each span once per version, never an older one after a newer: versions only grow.
    const sent = [...first.sent, ...second.sent];
    const copies = new Map<string, number[]>();
    for (const span of sent) copies.set(span.spanId, [...(copies.get(span.spanId) ?? []), Number(span.attributes[SPAN_VERSION_ATTRIBUTE] ?? 0)]);
    for (const versions of copies.values()) {
      expect(new Set(versions).size).toBe(versions.length);
      expect([...versions].sort((a, b) => a - b)).toEqual(versions);
    }
  });

  it('a child pipeline through its bridge: its jobs are on the path, written at the root pipeline end', async () => {
    await story.pipelines(600);
    const build = { jobId: 5001, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 };
    const child = { jobId: 6001, name: 'child-test', pipelineId: 600, queuedAt: 33, pickedUpAt: 35, finishedAt: 120 };
    const deploy = { jobId: 5003, name: 'deploy', queuedAt: 122, pickedUpAt: 123, finishedAt: 150 };
    await story.jobEnds(build);
    await story.jobEnds(child);
    await story.pipelineEnds(600, [child], { createdAt: 31, finishedAt: 121 }, { pipelineId: ROOT, jobId: 5002, projectId: 7 });
    await story.jobEnds(deploy);
    await story.pipelineEnds(ROOT, [build, deploy], { createdAt: 0, finishedAt: 151 });
    const { latest } = await story.collected();

    expect(pathAttributes(latest)).toEqual({
      'build#5001': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 30 },
      'child-test#6001': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 87 },
      'deploy#5003': { 'ci.job.critical_path': true, 'ci.job.critical_path_seconds': 28 },
    });
    expect(criticalPath(latest)!.path.map((element) => [element.job_id, element.pipeline_id])).toEqual([
      [5001, ROOT],
      [6001, 600],
      [5003, ROOT],
    ]);
    // The child's job waited for the bridge's blocker (build), through the child pipeline's creation: as the reads say.
    expect(writtenFigures(latest)['child-test#6001']).toMatchObject({ waitMs: 3_000, queueMs: 2_000, runMs: 85_000 });
    expect(writtenFigures(latest)).toEqual(rowFigures(latest));
  });
});
