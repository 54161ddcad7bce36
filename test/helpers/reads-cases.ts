import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { mkdirSync, writeFileSync } from 'node:fs';
import pino from 'pino';
import { localCollectorDirectory, signalFile } from '../../src/collector/collector-files';
import { loadConfig } from '../../src/config/app-config';
import { ConfigModule } from '../../src/config/config.module';
import { loadSecrets } from '../../src/config/secrets';
import { AllExceptionsFilter } from '../../src/observability/all-exceptions.filter';
import { MetricsService } from '../../src/observability/metrics.service';
import { ObservabilityModule } from '../../src/observability/observability.module';
import type { OtlpResourceSpans } from '../../src/pipeline-spans/pipeline-span-model';
import { ReadsModule } from '../../src/reads/reads.module';
import type { TraceReads } from '../../src/reads/trace-reads';
import { internalApiHeaders, makeSecretFiles } from './internal-api';
import { expectMatchesOpenApi } from './openapi';
import { PipelineTrace } from './pipeline-trace';

/**
 * The read API's endpoint cases (SPEC §12), written once and run against each backend of the read port: the
 * embedded files (test/http/reads.spec.ts) and ClickHouse. A backend is given the collector's exports of a few
 * pipelines and answers through the real module, guard and error filter, on the Fastify adapter. Every answer
 * is checked against openapi/openapi.yaml.
 */

export interface ReadsBackend {
  /** The port over these exports (each one OTLP/JSON `ResourceSpans`, as the collector received them). */
  load(exports: readonly OtlpResourceSpans[]): Promise<TraceReads>;
  close?(): Promise<void>;
}

export interface ReadsApp {
  readonly secret: Buffer;
  get(url: string, headers?: Record<string, string>): Promise<ReadAnswer>;
  /** A read whose arguments are a JSON body (the what-if). */
  post(url: string, body: unknown, headers?: Record<string, string>): Promise<ReadAnswer>;
  /** A series' value on the app's `/metrics` registry (0 when it has none yet). */
  metric(series: string): Promise<number>;
  close(): Promise<void>;
}

export interface ReadAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | number | undefined>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are checked against openapi.yaml
  readonly body: any;
}

const TEMPLATES: Array<[RegExp, string]> = [
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/pipelines\/[^/]+\/trace$/, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/trace'],
  [
    /^\/internal\/ci\/telemetry\/projects\/[^/]+\/pipelines\/[^/]+\/critical_path$/,
    '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/critical_path',
  ],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/jobs\/[^/]+\/trace$/, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/jobs$/, '/internal/ci/telemetry/projects/{project_id}/jobs'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/pipelines\/[^/]+\/compare$/, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/compare'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/regressions$/, '/internal/ci/telemetry/projects/{project_id}/regressions'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/waste$/, '/internal/ci/telemetry/projects/{project_id}/waste'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/runners\/queue$/, '/internal/ci/telemetry/projects/{project_id}/runners/queue'],
  [/^\/internal\/ci\/telemetry\/projects\/[^/]+\/runners\/what_if$/, '/internal/ci/telemetry/projects/{project_id}/runners/what_if'],
];

/** The internal API's read routes alone, over `reads`, as the service wires them (JWT guard, error filter). */
export async function startReadsApp(reads: TraceReads, env: Record<string, string> = {}): Promise<ReadsApp> {
  const files = makeSecretFiles();
  const config = loadConfig({
    INTERNAL_API_SECRET_FILE: files.internalApiSecretFile,
    TRACE_KEY_FILE: files.traceKeyFile,
    CAPABILITY_KEY_FILE: files.capabilityKeyFile,
    LOG_LEVEL: 'fatal',
    ...env,
  });
  const secrets = loadSecrets(config);
  @Module({ imports: [ConfigModule.forRoot(config, secrets), ObservabilityModule.forRoot(pino({ level: 'silent' })), ReadsModule.withBackend(reads)] })
  class ReadsTestModule {}
  const app = await NestFactory.create<NestFastifyApplication>(ReadsTestModule, new FastifyAdapter(), { logger: false });
  app.useGlobalFilters(new AllExceptionsFilter());
  await app.init();
  await app.getHttpAdapter().getInstance().ready();
  const ask = async (method: 'GET' | 'POST', url: string, payload: unknown, headers?: Record<string, string>): Promise<ReadAnswer> => {
    const asked = headers ?? (await internalApiHeaders(secrets.internalApiSecret));
    const response = await app.inject({
      method,
      url,
      headers: payload === undefined ? asked : { 'content-type': 'application/json', ...asked },
      ...(payload === undefined ? {} : { payload: JSON.stringify(payload) }),
    });
    const path = url.split('?')[0];
    const template = TEMPLATES.find(([pattern]) => pattern.test(path))?.[1];
    if (template === undefined) throw new Error(`no read route for ${path}`);
    const body = response.json();
    expectMatchesOpenApi(template, method, response.statusCode, response.headers['content-type'] as string, body);
    return { status: response.statusCode, headers: response.headers, body };
  };
  return {
    secret: secrets.internalApiSecret,
    get: (url, headers) => ask('GET', url, undefined, headers),
    post: (url, body, headers) => ask('POST', url, body, headers),
    metric: async (series) => {
      const line = (await app.get(MetricsService).registry.metrics()).split('\n').find((written) => written.startsWith(`${series} `));
      return line === undefined ? 0 : Number(line.slice(series.length + 1));
    },
    close: () => app.close(),
  };
}

/** The embedded collector's files under a data directory, as the service's own collector writes them: one export a line. */
export function writeCollectorFiles(dataDir: string, exports: readonly OtlpResourceSpans[]): void {
  const directory = localCollectorDirectory(dataDir);
  mkdirSync(directory, { recursive: true });
  writeFileSync(signalFile(directory, 'traces'), exports.map((resourceSpans) => `${JSON.stringify({ resourceSpans: [resourceSpans] })}\n`).join(''));
}

export const PROJECT = 7;
export const OTHER_PROJECT = 8;
/** An attribute value a program in a job may well write: quotes, backslashes, a NUL, a line break, non-ASCII. */
export const AWKWARD_VALUE = 'it said "no" \\ C:\\path\\ \u0000 end\nnext: ü 🚀';

/**
 * The world every backend is loaded with, two hours ago: project 7's pipeline 500 (build, test and lint in parallel,
 * a child pipeline 501 through bridge 5, deploy), each job run by a runner, a program in test exporting a span;
 * project 8's pipeline 800; project 7's pipeline 900 still running (build done, test picked up). All on `main`.
 */
export function readsWorld(now = Date.now()): { pipeline: PipelineTrace; other: PipelineTrace; running: PipelineTrace; exports: OtlpResourceSpans[] } {
  const createdAt = Math.floor((now - 2 * 3600_000) / 1000) * 1000;
  const pipeline = new PipelineTrace(PROJECT, 500, createdAt)
    .job({
      jobId: 1,
      name: 'build',
      queuedAt: 0,
      pickedUpAt: 4,
      finishedAt: 61,
      stages: [
        ['prepare_executor', 5],
        ['get_sources', 6],
        ['restore_cache', 10],
        ['step_script', 30],
        ['archive_cache', 2],
        ['upload_artifacts_on_success', 3],
      ],
    })
    .job({
      jobId: 2,
      name: 'test',
      queuedAt: 62,
      pickedUpAt: 100,
      finishedAt: 160,
      programSpans: [{ name: 'rspec "spec/models"', attributes: { 'test.note': AWKWARD_VALUE } }],
    })
    .job({ jobId: 3, name: 'lint', stage: 'test', queuedAt: 62, pickedUpAt: 63, finishedAt: 80 })
    .bridge(5, 500, 501, { createdAt: 161, finishedAt: 200 })
    .job({ jobId: 51, name: 'child-build', pipelineId: 501, queuedAt: 162, pickedUpAt: 164, finishedAt: 199 })
    .pipeline(501, { status: 'success', createdAt: 161, finishedAt: 200 }, 5)
    .job({ jobId: 4, name: 'deploy', queuedAt: 201, pickedUpAt: 203, finishedAt: 230 })
    .pipeline(500, { status: 'success', finishedAt: 231 });
  const other = new PipelineTrace(OTHER_PROJECT, 800, createdAt)
    .job({ jobId: 81, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .pipeline(800, { status: 'success', finishedAt: 31 });
  const running = new PipelineTrace(PROJECT, 900, createdAt)
    .job({ jobId: 91, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
    .job({ jobId: 92, name: 'test', queuedAt: 31, pickedUpAt: 33 });
  return { pipeline, other, running, exports: [...pipeline.resourceSpans(), ...other.resourceSpans(), ...running.resourceSpans()] };
}

const base = (projectId: number | string) => `/internal/ci/telemetry/projects/${projectId}`;
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP/JSON as answered
const spansOf = (trace: any): any[] => trace.resourceSpans.flatMap((resource: any) => resource.scopeSpans.flatMap((scope: any) => scope.spans));

/** The endpoint cases every backend answers the same way. */
export function describeReadsEndpoints(backendName: string, makeBackend: () => Promise<ReadsBackend>): void {
  describe(`the read API over ${backendName} (SPEC §12)`, () => {
    let backend: ReadsBackend;
    let app: ReadsApp;
    const world = readsWorld();

    beforeAll(async () => {
      backend = await makeBackend();
      app = await startReadsApp(await backend.load(world.exports));
    }, 120_000);

    afterAll(async () => {
      await app?.close();
      await backend?.close?.();
    });

    it("answers a pipeline's whole trace, its child pipeline included, with one root and no missing parent", async () => {
      const { status, body } = await app.get(`${base(PROJECT)}/pipelines/500/trace`);
      expect(status).toBe(200);
      const spans = spansOf(body.trace);
      expect(body.completeness).toEqual({
        spans: spans.length,
        total_spans: spans.length,
        truncated: false,
        roots: 1,
        missing_parents: 0,
        jobs_without_runner_spans: 0,
        final: true,
        sampling_reason: 'head',
        adjusted_count: 1,
      });
      expect(new Set(spans.map((span) => span.traceId))).toEqual(new Set([world.pipeline.traceId]));
      const jobs = spans
        .filter((span) => span.name === 'job')
        .map((span) => span.attributes.find((a: { key: string }) => a.key === 'ci.job.id').value.intValue);
      expect(jobs.sort()).toEqual(['1', '2', '3', '4', '51']);
      // Asked for by its child pipeline, the same trace.
      const child = await app.get(`${base(PROJECT)}/pipelines/501/trace`);
      expect(child.body.completeness).toEqual(body.completeness);
    });

    it('returns what a program in the job wrote, quotes, backslashes and NUL included, exactly', async () => {
      const { body } = await app.get(`${base(PROJECT)}/jobs/2/trace`);
      const program = spansOf(body.trace).find((span) => span.name === 'rspec "spec/models"');
      expect(program.attributes).toEqual([{ key: 'test.note', value: { stringValue: AWKWARD_VALUE } }]);
    });

    it("answers a job's subtree: its span, queue wait, the runner's job_execution and stages, what its programs exported", async () => {
      const { status, body } = await app.get(`${base(PROJECT)}/jobs/1/trace`);
      expect(status).toBe(200);
      const names = spansOf(body.trace)
        .map((span) => span.name)
        .sort();
      expect(names).toEqual([
        'archive_cache',
        'get_sources',
        'job',
        'job_execution',
        'prepare_executor',
        'queue_wait',
        'restore_cache',
        'step_script',
        'upload_artifacts_on_success',
      ]);
      expect(body.completeness).toMatchObject({ spans: 9, roots: 0, missing_parents: 0, jobs_without_runner_spans: 0, final: true });
      const runner = body.trace.resourceSpans.find((resource: { resource: { attributes: Array<{ key: string; value: unknown }> } }) =>
        resource.resource.attributes.some((attribute) => attribute.key === 'service.name' && JSON.stringify(attribute.value) === '{"stringValue":"runner"}'),
      );
      expect(runner.scopeSpans[0].spans).toHaveLength(7);
    });

    it('answers the critical path a user expects: build, test (it waited for a runner), the child pipeline, deploy; lint has slack', async () => {
      const { status, body } = await app.get(`${base(PROJECT)}/pipelines/500/critical_path`);
      expect(status).toBe(200);
      expect(body.path.map((element: { job_id: number; blocked_by: number | null }) => [element.job_id, element.blocked_by])).toEqual([
        [1, null],
        [2, 1],
        [51, 2],
        [4, 51],
      ]);
      expect(body).toMatchObject({ duration_seconds: 230, final: true, slack: [{ job_id: 3, name: 'lint', slack_seconds: 80 }] });
      expect(body.path[1]).toMatchObject({ name: 'test', queue_seconds: 38, delay_seconds: 1, waiting_for: 'gitlab' });
      expect(body.totals).toMatchObject({ queue: 4 + 38 + 2 + 2, restore_cache: 10, upload_artifacts: 3 });
      const sum = Object.values(body.totals as Record<string, number>).reduce((total, seconds) => total + seconds, 0);
      expect(sum).toBeCloseTo(body.duration_seconds, 6);
    });

    it('says a running pipeline is not final, and gives its path so far', async () => {
      const trace = await app.get(`${base(PROJECT)}/pipelines/900/trace`);
      expect(trace.body.completeness).toMatchObject({ final: false, roots: 0 });
      const path = await app.get(`${base(PROJECT)}/pipelines/900/critical_path`);
      expect(path.body).toMatchObject({ final: false, path: [{ job_id: 91 }] });
    });

    it("answers 404 for another project's pipeline or job, exactly as for one that does not exist", async () => {
      const answers = await Promise.all([
        app.get(`${base(PROJECT)}/pipelines/800/trace`),
        app.get(`${base(PROJECT)}/pipelines/800/critical_path`),
        app.get(`${base(PROJECT)}/pipelines/123456/trace`),
        app.get(`${base(PROJECT)}/jobs/81/trace`),
        app.get(`${base(PROJECT)}/jobs/123456/trace`),
        app.get(`${base(OTHER_PROJECT)}/jobs/1/trace`),
      ]);
      expect(answers.map((answer) => answer.status)).toEqual([404, 404, 404, 404, 404, 404]);
      expect(new Set(answers.map((answer) => answer.body.error)).size).toBeLessThanOrEqual(2);
      expect(answers[0].body.error).toBe(answers[2].body.error);
      expect(answers[3].body.error).toBe(answers[4].body.error);
      // And the other project reads its own.
      expect((await app.get(`${base(OTHER_PROJECT)}/pipelines/800/trace`)).body.completeness).toMatchObject({ roots: 1, final: true });
    });

    it('answers 404 when the window GitLab passes does not hold the pipeline', async () => {
      const day = new Date(world.pipeline.createdAt - 3 * 86_400_000).toISOString();
      const answer = await app.get(`${base(PROJECT)}/pipelines/500/trace?from=${day}&to=${day}`);
      expect(answer.status).toBe(404);
      const around = `from=${new Date(world.pipeline.at(0)).toISOString()}&to=${new Date(world.pipeline.at(231)).toISOString()}`;
      expect((await app.get(`${base(PROJECT)}/pipelines/500/trace?${around}`)).status).toBe(200);
    });

    it("summarizes the project's jobs per name, on a ref or all, never another project's", async () => {
      const { status, body } = await app.get(`${base(PROJECT)}/jobs`);
      expect(status).toBe(200);
      const byName = Object.fromEntries(body.jobs.map((job: { name: string }) => [job.name, job]));
      expect(Object.keys(byName).sort()).toEqual(['build', 'child-build', 'deploy', 'lint', 'test']);
      expect(byName.build).toMatchObject({ runs: 2, failures: 0, retries: 0 });
      expect(byName.test).toMatchObject({
        runs: 1,
        queue_seconds: { p50: 38, p95: 38 },
        duration_seconds: { p50: 60, p95: 60 },
        critical_path: { share: 1, p50_seconds: 98 },
      });
      expect(byName.lint.critical_path).toEqual({ share: 0, p50_seconds: null });
      // Pipeline 900 has no pipeline span yet: its ref is not known, so it is not counted on any ref.
      expect((await app.get(`${base(PROJECT)}/jobs?ref=main`)).body.jobs.find((job: { name: string }) => job.name === 'build')).toMatchObject({ runs: 1 });
      const awkward = await app.get(`${base(PROJECT)}/jobs?ref=${encodeURIComponent('ma"in\\\u0000')}`);
      expect(awkward).toMatchObject({ status: 200, body: { jobs: [], ref: 'ma"in\\\u0000' } });
      expect((await app.get(`${base(OTHER_PROJECT)}/jobs`)).body.jobs.map((job: { name: string }) => job.name)).toEqual(['build']);
    });
  });
}
