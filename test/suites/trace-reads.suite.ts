import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import { ReadsApp, ReadsBackend, startReadsApp } from '../helpers/reads-cases';
import { PipelineTrace } from '../helpers/pipeline-trace';

/**
 * Issue 56 item 6: one behaviour on both backends of the read port. The same exports are given to each backend
 * (the embedded collector's files in test/http/reads.spec.ts, ClickHouse through its official client on the embedded
 * engine in test/e2e/reads-clickhouse.e2e-spec.ts), read through the real endpoints, and every answer asserted here
 * once, so the two cannot drift: the window rule, jobs GitLab never named, a ref found for a job played days after
 * its pipeline started, a hosted runner's stage spans, and the cap on spans per answer (issue 56 item 3).
 */

const CAP = 100;
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP/JSON as answered, checked against openapi.yaml
type Json = any;

const HOUR = 3_600_000;
const base = (projectId: number) => `/internal/ci/telemetry/projects/${projectId}`;
const spansOf = (trace: Json): Json[] => trace.resourceSpans.flatMap((resource: Json) => resource.scopeSpans.flatMap((scope: Json) => scope.spans));
const iso = (ms: number) => new Date(ms).toISOString();

/** Each export with `change` applied to each of its spans (attributes as OTLP/JSON key-values). */
function mapSpans(exports: readonly OtlpResourceSpans[], change: (span: Json, resource: Json) => Json): OtlpResourceSpans[] {
  return exports.map((resourceSpans) => ({
    ...resourceSpans,
    scopeSpans: resourceSpans.scopeSpans.map((scopeSpans) => ({ ...scopeSpans, spans: scopeSpans.spans.map((span) => change(span, resourceSpans.resource)) })),
  }));
}

/**
 * A hosted runner: it exports straight to the collector, so no gateway stamped its resource. Its `job_execution`
 * names the job and project in its own attributes, as GitLab Runner writes them; its stage spans name nothing.
 */
function hosted(exports: readonly OtlpResourceSpans[]): OtlpResourceSpans[] {
  return exports.map((resourceSpans) =>
    resourceSpans.scopeSpans.some((scope) => scope.scope.name === 'gitlab-ci-runner')
      ? { ...resourceSpans, resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] } }
      : resourceSpans,
  );
}

export interface ConformanceWorld {
  readonly exports: OtlpResourceSpans[];
  readonly now: number;
  /** Project 31: job 3101 queued 20 minutes before it was picked up (beyond the 15-minute margin of a window). */
  readonly queuedLong: PipelineTrace;
  /** Project 32: a manual deploy played three days after its pipeline was created. */
  readonly playedLater: PipelineTrace;
  /** Project 33: a job its runner ran on a hosted runner, with a 20 s pull_image. */
  readonly onHosted: PipelineTrace;
  /** Project 34: 2 jobs with 80 spans each from their programs: 169 spans, more than CAP. */
  readonly large: PipelineTrace;
}

export function conformanceWorld(now = Date.now()): ConformanceWorld {
  const recent = Math.floor((now - 2 * HOUR) / 1000) * 1000;
  const queuedLong = new PipelineTrace(31, 3100, recent)
    .job({ jobId: 3101, name: 'build', queuedAt: 0, pickedUpAt: 1200, finishedAt: 1260 })
    // No webhook named it: the control plane closed its span from its runner's, without a name.
    .job({ jobId: 3102, name: 'unnamed', queuedAt: 1261, pickedUpAt: 1262, finishedAt: 1300 })
    .pipeline(3100, { status: 'success', finishedAt: 1301 });
  const threeDaysAgo = Math.floor((now - 3 * 24 * HOUR) / 1000) * 1000;
  const playedAt = (now - 30 * 60_000 - threeDaysAgo) / 1000;
  const playedLater = new PipelineTrace(32, 3200, threeDaysAgo)
    .job({ jobId: 3201, name: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: 60 })
    .job({
      jobId: 3202,
      name: 'deploy',
      manual: true,
      queuedAt: Math.floor(playedAt),
      pickedUpAt: Math.floor(playedAt) + 2,
      finishedAt: Math.floor(playedAt) + 30,
    })
    .pipeline(3200, { status: 'success', finishedAt: Math.floor(playedAt) + 31, ref: 'main' });
  const onHosted = new PipelineTrace(33, 3300, recent).job({
    jobId: 3301,
    name: 'build',
    queuedAt: 0,
    pickedUpAt: 3,
    finishedAt: 58,
    stages: [
      ['prepare_executor', 5],
      ['pull_image', 20],
      ['step_script', 30],
    ],
  });
  onHosted.pipeline(3300, { status: 'success', finishedAt: 59 });
  const programSpans = (job: string) => Array.from({ length: 80 }, (_, index) => ({ name: `${job} ${index}`, attributes: { 'test.index': index } }));
  const large = new PipelineTrace(34, 3400, recent)
    .job({ jobId: 3401, name: 'unit', queuedAt: 0, pickedUpAt: 1, finishedAt: 30, programSpans: programSpans('unit') })
    .job({ jobId: 3402, name: 'integration', queuedAt: 31, pickedUpAt: 32, finishedAt: 90, programSpans: programSpans('integration') })
    .pipeline(3400, { status: 'success', finishedAt: 91 });
  // Project 35: `test` in three pipelines, one of them kept by a 10 % head sample (it stands for 10).
  const weighted = [
    new PipelineTrace(35, 3501, recent, 'ot=th:e666666666666').job({ jobId: 35011, name: 'test', queuedAt: 0, pickedUpAt: 1, finishedAt: 11 }),
    new PipelineTrace(35, 3502, recent + 60_000).job({ jobId: 35021, name: 'test', queuedAt: 0, pickedUpAt: 1, finishedAt: 21 }),
    new PipelineTrace(35, 3503, recent + 120_000).job({ jobId: 35031, name: 'test', queuedAt: 0, pickedUpAt: 1, finishedAt: 101 }),
  ].map((trace, index) => trace.pipeline(3501 + index, { status: 'success', finishedAt: [11, 21, 101][index] + 1 }));
  const unnamedJobSpan = queuedLong.jobSpanId(3102);
  const exports = [
    ...mapSpans(queuedLong.resourceSpans(), (span) =>
      span.spanId === unnamedJobSpan ? { ...span, attributes: span.attributes.filter((attribute: Json) => attribute.key !== 'cicd.pipeline.task.name') } : span,
    ),
    ...playedLater.resourceSpans(),
    ...hosted(onHosted.resourceSpans()),
    ...large.resourceSpans(),
    ...weighted.flatMap((trace) => trace.resourceSpans()),
  ];
  return { exports, now, queuedLong, playedLater, onHosted, large };
}

/** The conformance cases, run once per backend: `makeBackend` is given the world's exports through `load`. */
export function describeTraceReadsConformance(backendName: string, makeBackend: () => Promise<ReadsBackend>): void {
  describe(`one behaviour on both backends (issue 56 item 6): ${backendName}`, () => {
    const world = conformanceWorld();
    let backend: ReadsBackend;
    let app: ReadsApp;

    beforeAll(async () => {
      backend = await makeBackend();
      app = await startReadsApp(await backend.load(world.exports), { READS_MAX_SPANS: String(CAP) });
    }, 120_000);

    afterAll(async () => {
      await app?.close();
      await backend?.close?.();
    });

    it('keeps the spans that overlap the window: a job read with the times GitLab passes keeps its own job span and queue wait', async () => {
      const job = world.queuedLong;
      const window = `from=${iso(job.at(1200))}&to=${iso(job.at(1260))}`;
      const { status, body } = await app.get(`${base(31)}/jobs/3101/trace?${window}`);
      expect(status).toBe(200);
      expect(
        spansOf(body.trace)
          .map((span: Json) => span.name)
          .sort(),
      ).toEqual(['job', 'job_execution', 'queue_wait', 'step_script']);
      expect(body.completeness).toMatchObject({ spans: 4, total_spans: 4, truncated: false, roots: 0, missing_parents: 0, final: true });
      const pipeline = await app.get(`${base(31)}/pipelines/3100/trace?${window}`);
      expect(spansOf(pipeline.body.trace).filter((span: Json) => span.name === 'job')).toHaveLength(2);
    });

    it('leaves out of the jobs summary a job GitLab never named, and lists nothing under ""', async () => {
      const { body } = await app.get(`${base(31)}/jobs`);
      expect(body.jobs.map((job: Json) => job.name)).toEqual(['build']);
    });

    it('finds the ref of a pipeline that started three days before a job played in the window: the job stays in ref=', async () => {
      const window = `from=${iso(world.now - 2 * HOUR)}&to=${iso(world.now)}`;
      const onMain = await app.get(`${base(32)}/jobs?${window}&ref=main`);
      expect(onMain.body.jobs).toEqual([expect.objectContaining({ name: 'deploy', runs: 1, failures: 0 })]);
      expect((await app.get(`${base(32)}/jobs?${window}&ref=other`)).body.jobs).toEqual([]);
    });

    it("weighs each run of the jobs summary by its pipeline's adjusted count, percentiles included", async () => {
      const { body } = await app.get(`${base(35)}/jobs`);
      // 10 s stands for 10 runs, 20 s and 100 s for one each: the weighted median is 10 s, where an unweighted one says 20.
      expect(body.jobs).toEqual([
        {
          name: 'test',
          runs: 12,
          failures: 0,
          retries: 0,
          duration_seconds: { p50: 10, p95: 100 },
          queue_seconds: { p50: 1, p95: 1 },
          critical_path: { share: 1, p50_seconds: 11 },
        },
      ]);
    });

    it("counts a hosted runner's stage spans as the project's (by their job_execution), whole, with pull_image its own part", async () => {
      const trace = await app.get(`${base(33)}/pipelines/3300/trace`);
      const names = spansOf(trace.body.trace).map((span: Json) => span.name);
      expect(names.filter((name: string) => ['prepare_executor', 'pull_image', 'step_script'].includes(name)).sort()).toEqual([
        'prepare_executor',
        'pull_image',
        'step_script',
      ]);
      expect(trace.body.completeness).toMatchObject({ spans: 7, total_spans: 7, roots: 1, missing_parents: 0, jobs_without_runner_spans: 0, final: true });
      const path = await app.get(`${base(33)}/pipelines/3300/critical_path`);
      expect(path.body.totals).toMatchObject({ prepare_executor: 5, pull_image: 20, step_script: 30, other: 0 });
      const job = await app.get(`${base(33)}/jobs/3301/trace`);
      expect(job.body.completeness).toMatchObject({ spans: 6, missing_parents: 0, final: true });
    });

    it(`answers at most ${CAP} spans of a larger pipeline, says so, keeps GitLab's and the runners' spans first and the earliest of the rest`, async () => {
      const { status, body } = await app.get(`${base(34)}/pipelines/3400/trace`);
      expect(status).toBe(200);
      const spans = spansOf(body.trace);
      expect(body.completeness).toMatchObject({ spans: CAP, total_spans: 169, truncated: true, roots: 1, missing_parents: 0, final: true });
      expect(spans).toHaveLength(CAP);
      const names = spans.map((span: Json) => span.name as string);
      for (const name of ['pipeline', 'job', 'queue_wait', 'job_execution', 'step_script']) expect(names).toContain(name);
      expect(names.filter((name: string) => name === 'job')).toHaveLength(2);
      // The rest by start time: all of unit's (it ran first), then the first of integration's by span id.
      expect(names.filter((name: string) => name.startsWith('unit '))).toHaveLength(80);
      expect(names.filter((name: string) => name.startsWith('integration '))).toHaveLength(CAP - 9 - 80);
    });

    it('computes the critical path of a capped pipeline on all of its jobs, and gives a job of it all of its own spans', async () => {
      const path = await app.get(`${base(34)}/pipelines/3400/critical_path`);
      expect(path.body).toMatchObject({ duration_seconds: 90, final: true, path: [{ job_id: 3401 }, { job_id: 3402 }] });
      const job = await app.get(`${base(34)}/jobs/3402/trace`);
      expect(job.body.completeness).toMatchObject({ spans: 84, total_spans: 84, truncated: false, missing_parents: 0 });
    });
  });
}
