import { gitlabTime, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from '../../simulator/gitlab-webhooks';
import { jobSpan, pipelineSpanVersion } from '../pipeline-spans/pipeline-span-model';
import { collectedSpans } from '../otlp/collected-spans';
import type { TracedJob } from '../traced-work/traced-work';
import { parseGitlabTime, parseJobHook, parsePipelineHook, WebhookPayloadError } from './gitlab-webhook';

const RECEIVED = Date.UTC(2026, 10, 25, 12, 0, 0);
const at = (iso: string) => new Date(iso);

const pipeline: WebhookPipeline = {
  id: 31,
  projectId: 1,
  status: 'failed',
  createdAt: at('2016-08-12T15:23:28Z'),
  finishedAt: at('2016-08-12T15:26:29Z'),
  source: { pipelineId: 30, jobId: 3401 },
  jobs: [
    { id: 380, name: 'production', stage: 'deploy', status: 'skipped', createdAt: at('2016-08-12T15:23:28Z') },
    {
      id: 378,
      name: 'test-build',
      stage: 'test',
      status: 'failed',
      createdAt: at('2016-08-12T15:23:28Z'),
      startedAt: at('2016-08-12T15:26:12Z'),
      finishedAt: at('2016-08-12T15:26:29Z'),
      queuedSeconds: 196.5,
      failureReason: 'script_failure',
      runner: { id: 380987, runnerType: 'instance_type', description: 'shared-runners-manager-6.gitlab.com' },
    },
    { id: 379, name: 'staging', stage: 'deploy', status: 'created', createdAt: at('2016-08-12T15:23:28Z') },
  ],
};

describe('GitLab webhook payloads, as GitLab sends them (SPEC §10)', () => {
  it.each([
    ['2016-08-12 15:23:28 UTC', Date.UTC(2016, 7, 12, 15, 23, 28)],
    ['2021-02-23T02:41:37.886Z', Date.UTC(2021, 1, 23, 2, 41, 37, 886)],
    ['2021-04-28 21:50:00 +0200', Date.UTC(2021, 3, 28, 19, 50, 0)],
    ['2016-08-12T17:23:21+02:00', Date.UTC(2016, 7, 12, 15, 23, 21)],
  ])('reads the timestamp %s', (text, epoch) => {
    expect(parseGitlabTime(text, 'x')).toBe(epoch);
  });

  it('reads null as not happened, and refuses what is not a time', () => {
    expect(parseGitlabTime(null, 'finished_at')).toBeUndefined();
    expect(() => parseGitlabTime('yesterday', 'finished_at')).toThrow(new WebhookPayloadError('finished_at is not a GitLab timestamp (got "yesterday")'));
  });

  it('reads a finished child pipeline: its end, its trigger job, what failed, and only the jobs that finished', () => {
    const event = parsePipelineHook(pipelineHook(pipeline), RECEIVED);
    expect(event).toMatchObject({
      pipelineId: 31,
      projectId: 1,
      source: { pipelineId: 30, jobId: 3401, projectId: 1 },
      end: {
        status: 'failed',
        failureReason: 'test-build: script_failure',
        createdAt: Date.UTC(2016, 7, 12, 15, 23, 28),
        finishedAt: Date.UTC(2016, 7, 12, 15, 26, 29),
        ref: 'master',
        tag: false,
      },
    });
    expect(event.rootPipelineId).toBeUndefined();
    expect(event.finishedJobs.map((job) => [job.jobId, job.status, job.runnerId])).toEqual([
      [380, 'skipped', undefined],
      [378, 'failed', 380987],
    ]);
    // A job that never ran: null times, `runner: null`; its end is when GitLab told.
    expect(event.finishedJobs[0].finishedAt).toBe(RECEIVED);
  });

  it("says which finished jobs a person started (`when: manual`), not a timer's (`when: delayed`, which GitLab also calls manual)", () => {
    const played = { id: 381, name: 'deploy', stage: 'deploy', status: 'success', createdAt: at('2016-08-12T15:23:28Z'), manual: true };
    const body = pipelineHook({ ...pipeline, jobs: [...pipeline.jobs, played] });
    const builds = body.builds as Array<Record<string, unknown>>;
    builds.push({ ...builds[3], id: 382, name: 'later', when: 'delayed', manual: true });
    builds.push({ ...builds[3], id: 383, name: 'old-gitlab', when: undefined, manual: true });
    const manual = Object.fromEntries(parsePipelineHook(body, RECEIVED).finishedJobs.map((job) => [job.name, job.manual]));
    expect(manual).toEqual({ production: false, 'test-build': false, deploy: true, later: false, 'old-gitlab': true });
    // The Job Hook does not say: unknown, not false.
    expect(parseJobHook(jobHook(pipeline, played), RECEIVED).job?.manual).toBeUndefined();
  });

  it("reads GitLab's account of each job's times and waits (issue 56): queued duration, creation, when, retries, a resource group's wait", () => {
    const [, failed] = pipeline.jobs;
    const retried = { ...failed, id: 390, status: 'success', retriesCount: 1, queuedSeconds: 12.345678 };
    expect(parseJobHook(jobHook(pipeline, retried), RECEIVED).job).toMatchObject({
      jobId: 390,
      createdAt: Date.UTC(2016, 7, 12, 15, 23, 28),
      startedAt: Date.UTC(2016, 7, 12, 15, 26, 12),
      queuedDuration: 12.345678,
      retriesCount: 1,
    });
    // A job not started yet has no queue wait of its own (GitLab counts it up to now).
    const pending = parseJobHook(jobHook(pipeline, { ...failed, status: 'pending', startedAt: undefined, finishedAt: undefined }), RECEIVED);
    expect(pending).toEqual({ kind: 'job', jobId: 378, status: 'pending' });
    // The one word that a resource group made a job wait: its hook while it waited.
    const waiting = parseJobHook(jobHook(pipeline, { ...failed, status: 'waiting_for_resource', startedAt: undefined, finishedAt: undefined }), RECEIVED);
    expect(waiting.status).toBe('waiting_for_resource');

    const body = pipelineHook({ ...pipeline, status: 'running', finishedAt: undefined });
    const builds = body.builds as Array<Record<string, unknown>>;
    builds.push({ ...builds[1], id: 384, name: 'rollout', status: 'success', when: 'delayed', manual: true });
    builds.push({ ...builds[2], id: 385, name: 'deploy-prod', status: 'waiting_for_resource' });
    const event = parsePipelineHook(body, RECEIVED);
    expect(event).toMatchObject({ status: 'running', createdAt: Date.UTC(2016, 7, 12, 15, 23, 28), waitingForResourceJobIds: [385] });
    expect(event.activeJobIds).toContain(385);
    expect(event.finishedJobs.find((job) => job.jobId === 378)).toMatchObject({ when: 'on_success', queuedDuration: 196.5 });
    expect(event.finishedJobs.find((job) => job.jobId === 384)).toMatchObject({ when: 'delayed', manual: false });
  });

  it('uses root_pipeline_id when a newer GitLab sends it, and has no end while the pipeline runs', () => {
    const event = parsePipelineHook(pipelineHook({ ...pipeline, status: 'running', finishedAt: undefined, rootPipelineId: 30 }), RECEIVED);
    expect(event.rootPipelineId).toBe(30);
    expect(event.end).toBeUndefined();
  });

  it("reads a Job Hook's end with a fractional duration, and nothing for a job still running", () => {
    const [, failed] = pipeline.jobs;
    expect(parseJobHook(jobHook(pipeline, failed), RECEIVED).job).toMatchObject({
      jobId: 378,
      pipelineId: 31,
      status: 'failed',
      failureReason: 'script_failure',
      finishedAt: Date.UTC(2016, 7, 12, 15, 26, 29),
      runnerType: 'instance_type',
    });
    const running = parseJobHook(jobHook(pipeline, { ...failed, status: 'running', finishedAt: undefined }), RECEIVED);
    expect(running).toEqual({ kind: 'job', jobId: 378, status: 'running' });
  });

  it("reads the runner's tags from a Job Hook and a Pipeline Hook's builds: sorted, once each, bad ones left out, never a refusal", () => {
    const [, failed] = pipeline.jobs;
    const tagged = (tags: readonly unknown[]) => ({ ...failed, runner: { ...failed.runner!, tags } });
    expect(parseJobHook(jobHook(pipeline, tagged(['linux', 'docker', 'arm64', 'docker'])), RECEIVED).job).toMatchObject({
      runnerId: 380987,
      runnerTags: ['arm64', 'docker', 'linux'],
    });
    // Not strings, empty, or longer than 100 characters: left out; the rest kept.
    const odd = parseJobHook(jobHook(pipeline, tagged([42, null, '', '  ', 'x'.repeat(101), { name: 'gpu' }, 'x'.repeat(100), ' gpu '])), RECEIVED);
    expect(odd.job?.runnerTags).toEqual(['gpu', 'x'.repeat(100)]);
    // At most 50, the first 50 of the sorted set, whatever order GitLab sent them in.
    const many = Array.from({ length: 80 }, (_, i) => `tag-${String(i).padStart(2, '0')}`);
    const bounded = parseJobHook(jobHook(pipeline, tagged([...many].reverse())), RECEIVED).job?.runnerTags;
    expect(bounded).toEqual(many.slice(0, 50));
    // An untagged runner says so ([]); a payload without tags (an older GitLab) says nothing.
    expect(parseJobHook(jobHook(pipeline, tagged([])), RECEIVED).job?.runnerTags).toEqual([]);
    const withoutTags = jobHook(pipeline, failed);
    delete (withoutTags.runner as Record<string, unknown>).tags;
    expect(parseJobHook(withoutTags, RECEIVED).job?.runnerTags).toBeUndefined();
    expect(
      parseJobHook({ ...jobHook(pipeline, failed), runner: { ...(withoutTags.runner as object), tags: 'docker' } }, RECEIVED).job?.runnerTags,
    ).toBeUndefined();
    const fromBuilds = parsePipelineHook(pipelineHook({ ...pipeline, jobs: [pipeline.jobs[0], tagged(['b', 'a'])] }), RECEIVED);
    expect(fromBuilds.finishedJobs.find((job) => job.jobId === 378)?.runnerTags).toEqual(['a', 'b']);
  });

  it("reads whether a job was allowed to fail, from a Job Hook and a Pipeline Hook's builds", () => {
    const [, failed] = pipeline.jobs;
    expect(parseJobHook({ ...jobHook(pipeline, failed), build_allow_failure: true }, RECEIVED).job?.allowFailure).toBe(true);
    expect(parseJobHook(jobHook(pipeline, failed), RECEIVED).job?.allowFailure).toBe(false);
    const body = pipelineHook(pipeline);
    (body.builds as Array<Record<string, unknown>>)[1].allow_failure = true;
    expect(parsePipelineHook(body, RECEIVED).finishedJobs.find((job) => job.jobId === 378)?.allowFailure).toBe(true);
  });

  it('ends a canceled job without a finish time at its start plus its duration', () => {
    const body = { ...jobHook(pipeline, pipeline.jobs[1]), build_status: 'canceled', build_finished_at: null, build_duration: 2.5 };
    expect(parseJobHook(body, RECEIVED).job?.finishedAt).toBe(Date.UTC(2016, 7, 12, 15, 26, 14, 500));
  });

  it('refuses a payload without the ids it needs, naming the member', () => {
    expect(() => parsePipelineHook({ object_kind: 'pipeline' }, RECEIVED)).toThrow('a Pipeline Hook has object_attributes');
    expect(() => parseJobHook({ build_id: 'abc' }, RECEIVED)).toThrow('build_id must be a positive integer id');
  });
});

describe("a Pipeline Hook's end", () => {
  const T0 = Date.parse('2026-11-25T10:00:00Z');
  const at = (seconds: number) => T0 + seconds * 1000;
  const job = (id: number, status: string, finishedAt?: Date): WebhookJob => ({
    id,
    name: `job-${id}`,
    stage: 'test',
    status,
    createdAt: new Date(at(0)),
    startedAt: new Date(at(10)),
    finishedAt,
  });

  it("is never before a build's finish, and only the times GitLab wrote count (a redelivery gives the same version)", () => {
    const hook = pipelineHook({
      id: 501,
      projectId: 7,
      status: 'success',
      createdAt: new Date(at(0)),
      finishedAt: new Date(at(400)),
      jobs: [job(11, 'success', new Date(at(403))), job(12, 'manual'), { ...job(13, 'canceled'), startedAt: undefined }],
    });
    const first = parsePipelineHook(hook, at(500)).end!;
    const redelivered = parsePipelineHook(hook, at(9_000)).end!;
    expect(first.finishedAt).toBe(at(403));
    expect(pipelineSpanVersion(redelivered)).toBe(pipelineSpanVersion(first));
    expect(gitlabTime(new Date(first.finishedAt))).toBe('2026-11-25 10:06:43 UTC');
  });
});

describe("a job's span: the runner that ran it and the Job Hook's other facts (SPEC §13)", () => {
  const T0 = Date.parse('2026-11-25T10:00:00Z');
  const at = (seconds: number) => T0 + seconds * 1000;
  const hooked: WebhookPipeline = { id: 501, projectId: 7, status: 'running', createdAt: new Date(at(0)), jobs: [] };
  const ran = {
    id: 9001,
    name: 'build',
    stage: 'build',
    status: 'success',
    createdAt: new Date(at(-5)),
    startedAt: new Date(at(130)),
    finishedAt: new Date(at(160)),
    runner: { id: 380987, runnerType: 'instance_type', description: 'arm runner', tags: ['linux', 'arm64', 'docker', 'arm64'] },
  };
  const traced: TracedJob = {
    pipelineId: 501,
    rootPipelineId: 501,
    projectId: 7,
    traceId: 'a'.repeat(32),
    jobId: 9001,
    runnerId: 17,
    runnerType: 'project_type',
    pickedUpAt: at(130.2),
  };
  /** A Job Hook as GitLab sends it, through the parser and the span model, as the collector stores the span. */
  const storedJobSpan = (body: Record<string, unknown>) => {
    const end = parseJobHook(body, at(200)).job!;
    const span = jobSpan('gitlab-ci', { traceId: traced.traceId, spanId: 'c'.repeat(16) }, traced, end);
    return { sent: span.resourceSpans.scopeSpans[0].spans[0].attributes, stored: collectedSpans({ resourceSpans: [span.resourceSpans] })[0].attributes };
  };

  it('names the runner GitLab says ran the job (cicd.worker.id, a string) and its tags, sorted, as a string array', () => {
    const { sent, stored } = storedJobSpan(jobHook(hooked, ran));
    expect(sent).toContainEqual({ key: 'cicd.worker.id', value: { stringValue: '380987' } });
    expect(sent).toContainEqual({
      key: 'ci.runner.tags',
      value: { arrayValue: { values: [{ stringValue: 'arm64' }, { stringValue: 'docker' }, { stringValue: 'linux' }] } },
    });
    // Stored as the Collector's ClickHouse exporter stores an array: the JSON text of its values.
    expect(stored).toMatchObject({ 'cicd.worker.id': '380987', 'ci.runner.id': 380987, 'ci.runner.tags': '["arm64","docker","linux"]' });
  });

  it('writes an untagged runner as no tags, and nothing where GitLab did not say', () => {
    expect(storedJobSpan(jobHook(hooked, { ...ran, runner: { ...ran.runner, tags: [] } })).stored['ci.runner.tags']).toBe('[]');
    const older = jobHook(hooked, ran);
    delete (older.runner as Record<string, unknown>).tags;
    expect(storedJobSpan(older).stored['ci.runner.tags']).toBeUndefined();
  });

  it('says when GitLab created the job and whether it was allowed to fail', () => {
    const { stored } = storedJobSpan({ ...jobHook(hooked, ran), build_allow_failure: true });
    expect(stored).toMatchObject({ 'ci.job.created_at': new Date(at(-5)).toISOString(), 'ci.job.allow_failure': true });
  });
});
