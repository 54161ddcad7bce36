import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import type { TraceReads } from '../../src/reads/trace-reads';
import { collectedSpans } from '../../src/otlp/collected-spans';
import { carriesId } from '../../src/otlp/span-identity';
import { PipelineTrace, Stages } from '../helpers/pipeline-trace';
import { randomSource } from '../helpers/seeded-random';
import { ReadsApp, ReadsBackend, startReadsApp } from '../helpers/reads-cases';

/**
 * SPEC §13's endpoints, written once and run on each backend of the read port (the embedded files in
 * test/http/reads.spec.ts, ClickHouse's ci_job_runs in test/e2e/reads-clickhouse.e2e-spec.ts): a project's 30
 * pipelines on main, one an hour, whose `test` job's restore_cache takes 60 s longer from the 16th on, and another
 * project whose own `test` got far slower earlier. Every answer is checked against openapi/openapi.yaml.
 */

const HOUR = 3_600_000;
export const ACROSS_PROJECT = 71;
const OTHER_PROJECT = 72;
const PIPELINES = 30;
/** The index of the first pipeline whose restore_cache is 60 s longer. */
const SLOWER_FROM = 15;
const base = (projectId: number) => projectId * 1000;
const shaOf = (projectId: number, index: number) => `${projectId.toString(16).padStart(8, '0')}${index.toString(16).padStart(32, '0')}`;

const sum = (stages: Stages) => stages.reduce((total, [, seconds]) => total + seconds, 0);

function project(projectId: number, firstCreated: number, slowerFrom: number, extraSeconds: number): PipelineTrace[] {
  const random = randomSource(projectId);
  const noisy = (seconds: number) => Math.round(seconds * (0.9 + 0.2 * random()));
  const traces: PipelineTrace[] = [];
  for (let index = 0; index < PIPELINES; index += 1) {
    const pipelineId = base(projectId) + index;
    const job = (k: number) => pipelineId * 10 + k;
    const trace = new PipelineTrace(projectId, pipelineId, firstCreated + index * HOUR);
    const buildStages: Stages = [
      ['get_sources', 5],
      ['step_script', noisy(40)],
    ];
    const buildEnd = 2 + sum(buildStages) + 1;
    const testStages: Stages = [
      ['restore_cache', index >= slowerFrom ? 10 + extraSeconds : 10],
      ['step_script', noisy(100)],
    ];
    const docker = { id: 31, type: 'instance_type', tags: ['linux', 'docker'] };
    trace.job({ jobId: job(1), name: 'build', stage: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: buildEnd, stages: buildStages, runner: docker });
    let testQueued = buildEnd;
    if (index === 3) {
      // A flaky test: failed, then retried by a person a minute later.
      const failedStages: Stages = [
        ['restore_cache', 10],
        ['step_script', 30],
      ];
      const failedEnd = testQueued + 3 + sum(failedStages) + 1;
      trace.job({
        jobId: job(5),
        name: 'test',
        stage: 'test',
        status: 'failed',
        queuedAt: testQueued,
        pickedUpAt: testQueued + 3,
        finishedAt: failedEnd,
        stages: failedStages,
        runner: docker,
      });
      testQueued = failedEnd + 60;
    }
    const testEnd = testQueued + 3 + sum(testStages) + 1;
    trace.job({
      jobId: job(2),
      name: 'test',
      stage: 'test',
      queuedAt: testQueued,
      pickedUpAt: testQueued + 3,
      finishedAt: testEnd,
      stages: testStages,
      runner: docker,
      ...(index === 3 ? { retriesCount: 1 } : {}),
    });
    const lintStages: Stages = [['step_script', noisy(20)]];
    trace.job({
      jobId: job(3),
      name: 'lint',
      stage: 'test',
      queuedAt: buildEnd,
      pickedUpAt: buildEnd + 1,
      finishedAt: buildEnd + 1 + sum(lintStages) + 1,
      stages: lintStages,
      runner: docker,
    });
    const deployStages: Stages = [['step_script', noisy(30)]];
    const deployEnd = testEnd + 2 + sum(deployStages) + 1;
    trace.job({
      jobId: job(4),
      name: 'deploy',
      stage: 'deploy',
      queuedAt: testEnd,
      pickedUpAt: testEnd + 2,
      finishedAt: deployEnd,
      stages: deployStages,
      runner: { id: 32, type: 'project_type', tags: ['deploy'] },
    });
    trace.pipeline(pipelineId, { status: 'success', finishedAt: deployEnd + 1, ref: 'main', sha: shaOf(projectId, index), source: 'push' });
    traces.push(trace);
  }
  return traces;
}

export interface AcrossWorld {
  readonly exports: OtlpResourceSpans[];
  readonly from: string;
  readonly to: string;
}

export function acrossWorld(now = Date.now()): AcrossWorld {
  const firstCreated = Math.floor((now - (PIPELINES + 2) * HOUR) / 1000) * 1000;
  const traces = [...project(ACROSS_PROJECT, firstCreated, SLOWER_FROM, 60), ...project(OTHER_PROJECT, firstCreated, 5, 600)];
  return {
    exports: traces.flatMap((trace) => trace.resourceSpans()),
    from: new Date(firstCreated - HOUR).toISOString(),
    to: new Date(now).toISOString(),
  };
}

const url = (path: string, projectId = ACROSS_PROJECT) => `/internal/ci/telemetry/projects/${projectId}${path}`;
const ms = (seconds: number) => Math.round(seconds * 1000);

export function describeAcrossEndpoints(backendName: string, makeBackend: () => Promise<ReadsBackend>): void {
  describe(`reads across pipelines (SPEC §13) on ${backendName}`, () => {
    let backend: ReadsBackend;
    let app: ReadsApp;
    let reads: TraceReads;
    const world = acrossWorld();
    const window = `from=${encodeURIComponent(world.from)}&to=${encodeURIComponent(world.to)}`;

    beforeAll(async () => {
      backend = await makeBackend();
      reads = await backend.load(world.exports);
      app = await startReadsApp(reads);
    });
    afterAll(async () => {
      await app?.close();
      await backend?.close?.();
    });

    it("compares a pipeline with its ref's median: the 60 s land on test's restore_cache, and the parts add up to the delta to the millisecond", async () => {
      const slower = base(ACROSS_PROJECT) + 20;
      const answer = await app.get(url(`/pipelines/${slower}/compare`));
      expect(answer.status).toBe(200);
      expect(answer.body.baseline).toEqual({ pipeline_id: expect.any(Number), description: expect.stringContaining('median'), among: 20 });
      expect(answer.body.baseline.pipeline_id).toBeLessThan(base(ACROSS_PROJECT) + SLOWER_FROM);
      expect(answer.body.contributions.restore_cache).toBe(60);
      const parts = Object.values(answer.body.contributions as Record<string, number>).reduce((total, value) => total + ms(value), 0);
      expect(parts).toBe(ms(answer.body.duration_delta_seconds));
      const test = answer.body.jobs.find((job: { name: string }) => job.name === 'test');
      expect(test.on_critical_path).toEqual({ target: true, baseline: true });
    });

    it('compares with a baseline named, and refuses one of another project as unknown', async () => {
      const slower = base(ACROSS_PROJECT) + 20;
      const named = await app.get(url(`/pipelines/${slower}/compare?baseline=${base(ACROSS_PROJECT) + 2}`));
      expect(named.status).toBe(200);
      expect(named.body.baseline.pipeline_id).toBe(base(ACROSS_PROJECT) + 2);
      expect(named.body.contributions.restore_cache).toBe(60);

      const foreignBaseline = await app.get(url(`/pipelines/${slower}/compare?baseline=${base(OTHER_PROJECT) + 2}`));
      expect([foreignBaseline.status, foreignBaseline.body.error]).toEqual([404, 'no baseline pipeline of this project']);
      const foreignTarget = await app.get(url(`/pipelines/${base(OTHER_PROJECT) + 20}/compare`));
      expect(foreignTarget.status).toBe(404);
    });

    it('says there is nothing to compare the first pipeline with (422), instead of comparing it with itself', async () => {
      const answer = await app.get(url(`/pipelines/${base(ACROSS_PROJECT)}/compare`));
      expect(answer.status).toBe(422);
      expect(answer.body.error).toContain('baseline');
    });

    it("finds the step in test's restore_cache at the pipeline and commit it began, and none of the other project's", async () => {
      const answer = await app.get(url(`/regressions?${window}&ref=main`));
      expect(answer.status).toBe(200);
      const step = answer.body.change_points.find((point: { job: string | null; part: string }) => point.job === 'test' && point.part === 'restore_cache');
      expect(step).toMatchObject({ stage: 'test', before_seconds: 10, after_seconds: 70, first_ref: 'main' });
      expect(Math.abs(step.first_pipeline_id - (base(ACROSS_PROJECT) + SLOWER_FROM))).toBeLessThanOrEqual(1);
      expect(step.first_sha).toBe(shaOf(ACROSS_PROJECT, step.first_pipeline_id - base(ACROSS_PROJECT)));
      // The other project's test became 600 s slower: nothing of it is in this project's answer.
      expect(answer.body.change_points.every((point: { after_seconds: number }) => point.after_seconds < 600)).toBe(true);
      expect(answer.body.pipelines).toBe(PIPELINES);
    });

    it('prices nothing it was not told to, and counts the retried attempt and the flaky commit as waste', async () => {
      const answer = await app.get(url(`/waste?${window}`));
      expect(answer.status).toBe(200);
      expect(answer.body.pipelines).toBe(PIPELINES);
      const test = answer.body.jobs.find((job: { name: string }) => job.name === 'test');
      // The failed attempt: 10 s restore, 30 s script, 1 s of the rest.
      expect(test.retry_seconds.total).toBe(41);
      expect(test.flaky).toMatchObject({ commits: 1, runs: 1 });
      expect(test.cost).toBeUndefined();
      const dockerQueue = test.queue_seconds.find((entry: { tags: string }) => entry.tags === 'docker,linux');
      expect(dockerQueue.seconds.total).toBe(3 * (PIPELINES + 1));
    });

    it('prices the waste when RUNNER_PRICES_FILE says what a runner minute costs, a tag set before a runner type', async () => {
      const file = join(mkdtempSync(join(tmpdir(), 'cjt-prices-')), 'prices.json');
      writeFileSync(file, JSON.stringify({ per_minute: { tags: { 'linux, docker': 0.6 }, runner_type: { project_type: 0.3, instance_type: 100 } } }));
      const priced = await startReadsApp(reads, { RUNNER_PRICES_FILE: file });
      try {
        const answer = await priced.get(url(`/waste?${window}`));
        const test = answer.body.jobs.find((job: { name: string }) => job.name === 'test');
        expect(test.cost.retry).toBeCloseTo((41 / 60) * 0.6, 4);
        const deploy = answer.body.jobs.find((job: { name: string }) => job.name === 'deploy');
        expect(deploy.cost.runner).toBeCloseTo((deploy.runner_seconds.total / 60) * 0.3, 4);
      } finally {
        await priced.close();
      }
    });

    it('totals the ledger as a brute-force sum over the raw spans does, to 0.1 %', async () => {
      // From the spans as the collector got them, with none of src/across: a job run's runner time is its queue
      // wait's end (the pickup) to its job span's end; an attempt is superseded when a later one of its name exists.
      const spans = world.exports.flatMap((resourceSpans) => collectedSpans({ resourceSpans: [resourceSpans] }));
      const ours = spans.filter((span) => carriesId(span, 'ci.project.id', ACROSS_PROJECT));
      const pickups = new Map(ours.filter((span) => span.name === 'queue_wait').map((span) => [span.parentSpanId, span.endNanos]));
      const jobs = ours.filter((span) => span.name === 'job');
      const runSeconds = (job: (typeof jobs)[number]) => Number(job.endNanos - pickups.get(job.spanId)!) / 1e9;
      const superseded = (job: (typeof jobs)[number]) =>
        jobs.some(
          (other) =>
            other.traceId === job.traceId &&
            other.attributes['cicd.pipeline.task.name'] === job.attributes['cicd.pipeline.task.name'] &&
            other.startNanos > job.startNanos,
        );
      const runner = jobs.reduce((total, job) => total + runSeconds(job), 0);
      const retry = jobs.filter(superseded).reduce((total, job) => total + runSeconds(job), 0);

      const answer = await app.get(url(`/waste?${window}`));
      expect(jobs.length).toBe(4 * PIPELINES + 1);
      expect(Math.abs(answer.body.totals.runner_seconds.total - runner) / runner).toBeLessThan(0.001);
      expect(Math.abs(answer.body.totals.retry_seconds.total - retry) / retry).toBeLessThan(0.001);
    });

    it('answers queue waits per runner tag set, and what two more runners would change', async () => {
      const queue = await app.get(url(`/runners/queue?${window}`));
      expect(queue.status).toBe(200);
      expect(queue.body.tag_sets.map((set: { tags: string }) => set.tags).sort()).toEqual(['deploy', 'docker,linux']);

      const whatIf = await app.post(url('/runners/what_if'), { tags: 'docker, linux', runners: 2, from: world.from, to: world.to });
      expect(whatIf.status).toBe(200);
      expect(whatIf.body).toMatchObject({ tags: 'docker,linux', runners_added: 2, pipelines: PIPELINES });
      expect(whatIf.body.queue_seconds.after.p95).toBeLessThanOrEqual(whatIf.body.queue_seconds.before.p95);
    });

    it('names each bad field with 400', async () => {
      const long = await app.get(url('/regressions?from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z'));
      expect([long.status, long.body.fields.map((field: { field: string }) => field.field)]).toEqual([400, ['from']]);
      const badBaseline = await app.get(url(`/pipelines/${base(ACROSS_PROJECT) + 20}/compare?baseline=-1`));
      expect([badBaseline.status, badBaseline.body.fields[0].field]).toEqual([400, 'baseline']);
      const anonymous = await app.post(url('/runners/what_if'), { tags: 'docker', runners: 1 }, {});
      expect(anonymous.status).toBe(401);
      const badWhatIf = await app.post(url('/runners/what_if'), { tags: 7, runners: 2.5 });
      expect([badWhatIf.status, badWhatIf.body.fields.map((field: { field: string }) => field.field).sort()]).toEqual([400, ['runners', 'tags']]);
    });
  });
}
