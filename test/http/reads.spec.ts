import fc from 'fast-check';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { localCollectorDirectory } from '../../src/collector/collector-files';
import { CollectorFilesTraceReads } from '../../src/reads/collector-files-reads';
import { ReadsUnavailableError, TraceReads } from '../../src/reads/trace-reads';
import { internalApiHeaders, ISSUER } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { describeReadsEndpoints, PROJECT, readsWorld, ReadsApp, startReadsApp, writeCollectorFiles } from '../helpers/reads-cases';
import { startInProcess } from '../helpers/service';
import { PipelineTrace } from '../helpers/pipeline-trace';
import { trustedSpans } from '../../src/otlp/control-plane-mark';
import { describeTraceReadsConformance } from '../suites/trace-reads.suite';
import { describeJobRunRowsConformance } from '../suites/job-run-rows.suite';
import { describeAcrossEndpoints } from '../suites/across-endpoints.suite';
import { largePipeline } from '../suites/large-pipeline';
import { jobPayloadRequest } from '../fixtures/job-payload';

/** SPEC §12 over the embedded collector's files, and what every read checks before any backend is asked. */

function filesBackend(): { dataDir: string; reads: (exports: Parameters<typeof writeCollectorFiles>[1]) => TraceReads } {
  const dataDir = mkdtempSync(join(tmpdir(), 'cjt-reads-'));
  return {
    dataDir,
    reads: (exports) => {
      writeCollectorFiles(dataDir, exports);
      return new CollectorFilesTraceReads(localCollectorDirectory(dataDir));
    },
  };
}

describeReadsEndpoints('the embedded collector files', async () => {
  const files = filesBackend();
  return { load: async (exports) => files.reads(exports) };
});

describeTraceReadsConformance('the embedded collector files', async () => {
  const files = filesBackend();
  return { load: async (exports) => files.reads(exports) };
});

describeJobRunRowsConformance('the embedded collector files', async () => {
  const files = filesBackend();
  return { load: async (exports) => files.reads(exports) };
});

describeAcrossEndpoints('the embedded collector files', async () => {
  const files = filesBackend();
  return { load: async (exports) => files.reads(exports) };
});

const URLS = [
  '/internal/ci/telemetry/projects/7/pipelines/500/trace',
  '/internal/ci/telemetry/projects/7/pipelines/500/critical_path',
  '/internal/ci/telemetry/projects/7/jobs/1/trace',
  '/internal/ci/telemetry/projects/7/jobs',
  '/internal/ci/telemetry/projects/7/pipelines/500/compare',
  '/internal/ci/telemetry/projects/7/regressions',
  '/internal/ci/telemetry/projects/7/waste',
  '/internal/ci/telemetry/projects/7/runners/queue',
];

describe('what a read checks first (SPEC §3, §12)', () => {
  let app: ReadsApp;
  const asked: string[] = [];
  /** A backend that notes each question: no bad request may reach it. */
  const world = readsWorld();
  const files = filesBackend().reads(world.exports);
  const noting: TraceReads = {
    pipelineTrace: (...args) => (asked.push('pipeline'), files.pipelineTrace(...args)),
    jobTrace: (...args) => (asked.push('job'), files.jobTrace(...args)),
    projectJobs: (...args) => (asked.push('jobs'), files.projectJobs(...args)),
    jobRunRows: (...args) => (asked.push('job runs'), files.jobRunRows(...args)),
    pipelineRunRows: (...args) => (asked.push('pipeline runs'), files.pipelineRunRows(...args)),
  };

  beforeAll(async () => {
    app = await startReadsApp(noting);
  });
  afterAll(() => app.close());
  beforeEach(() => asked.splice(0));

  it.each(URLS)('answers 401 without the internal API token, or with a forged or stale one: %s', async (url) => {
    const forged = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setIssuer(ISSUER).setIssuedAt().setExpirationTime('1m').sign(Buffer.alloc(32, 9));
    const stale = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer(ISSUER)
      .setIssuedAt(Math.floor(Date.now() / 1000) - 600)
      .sign(app.secret);
    const refused: Array<Record<string, string>> = [
      {},
      { 'gitlab-ci-telemetry-api-request': forged },
      { 'gitlab-ci-telemetry-api-request': stale },
      { 'gitlab-ci-telemetry-api-request': 'not a jwt' },
    ];
    for (const headers of refused) {
      const answer = await app.get(url, headers);
      expect([answer.status, typeof answer.body.error]).toEqual([401, 'string']);
    }
    expect(asked).toEqual([]);
  });

  const badIds: Array<[string, string]> = [
    ['abc', 'project_id'],
    ['0', 'project_id'],
    ['-7', 'project_id'],
    ['7.5', 'project_id'],
    ['1e3', 'project_id'],
    ['99999999999999999', 'project_id'],
    [encodeURIComponent('7"'), 'project_id'],
    [encodeURIComponent('7\\'), 'project_id'],
    [encodeURIComponent('7\u0000'), 'project_id'],
    [encodeURIComponent("7' OR 1=1"), 'project_id'],
  ];

  it.each(badIds)('answers 400 naming project_id for %s, and asks no backend', async (id, field) => {
    for (const url of URLS.map((template) => template.replace('/projects/7/', `/projects/${id}/`))) {
      const answer = await app.get(url);
      expect(answer.status).toBe(400);
      expect(answer.body.fields.map((problem: { field: string }) => problem.field)).toEqual([field]);
    }
    expect(asked).toEqual([]);
  });

  it.each(['0', 'x', encodeURIComponent('1"'), encodeURIComponent('1\\'), encodeURIComponent('1\u0000'), '18446744073709551616'])(
    'answers 400 naming pipeline_id or job_id for %s',
    async (id) => {
      const pipeline = await app.get(`/internal/ci/telemetry/projects/7/pipelines/${id}/trace`);
      const path = await app.get(`/internal/ci/telemetry/projects/7/pipelines/${id}/critical_path`);
      const job = await app.get(`/internal/ci/telemetry/projects/7/jobs/${id}/trace`);
      expect([pipeline, path, job].map((answer) => [answer.status, answer.body.fields?.[0]?.field])).toEqual([
        [400, 'pipeline_id'],
        [400, 'pipeline_id'],
        [400, 'job_id'],
      ]);
      expect(asked).toEqual([]);
    },
  );

  const badWindows: Array<[string, string]> = [
    ['from=yesterday', 'from'],
    ['to=2026-13-01T00:00:00Z', 'to'],
    ['from=1764000000', 'from'],
    [`from=${encodeURIComponent('2026-11-25T10:00:00Z"')}`, 'from'],
    ['from=2026-11-25T10:00:00Z&to=2026-11-25T09:00:00Z', 'to'],
    ['from=2026-10-01T00:00:00Z&to=2026-11-25T00:00:00Z', 'from'],
    ['to=2026-11-25T00:00:00Z&from=2026-11-25T00:00:00Z&from=2026-11-24T00:00:00Z', 'from'],
    ['ref=', 'ref'],
  ];

  it.each(badWindows)('answers 400 naming the field for the window %s', async (query, field) => {
    for (const url of URLS) {
      if (query.startsWith('ref') && !url.endsWith('/jobs')) continue;
      const answer = await app.get(`${url}?${query}`);
      expect([answer.status, answer.body.fields.map((problem: { field: string }) => problem.field)]).toEqual([400, [field]]);
    }
    expect(asked).toEqual([]);
  });

  it('takes a window of exactly 31 days, and an offset other than Z', async () => {
    const answer = await app.get('/internal/ci/telemetry/projects/7/jobs?from=2026-10-25T10:00:00%2B02:00&to=2026-11-25T10:00:00%2B02:00');
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ from: '2026-10-25T08:00:00.000Z', to: '2026-11-25T08:00:00.000Z' });
  });
});

describe('a backend that fails or does not answer (SPEC §12)', () => {
  const never = () => new Promise<never>(() => undefined);
  const down: TraceReads = {
    pipelineTrace: () => Promise.reject(new ReadsUnavailableError('connect ECONNREFUSED', 7)),
    jobTrace: () => Promise.reject(new Error('socket hang up')),
    projectJobs: () => Promise.reject(new ReadsUnavailableError('timeout', 7)),
    jobRunRows: () => Promise.reject(new ReadsUnavailableError('timeout', 7)),
    pipelineRunRows: () => Promise.reject(new ReadsUnavailableError('timeout', 7)),
  };
  const hung: TraceReads = { pipelineTrace: never, jobTrace: never, projectJobs: never, jobRunRows: never, pipelineRunRows: never };

  it.each([
    ['down', down],
    ['hung', hung],
  ])('answers 503 with Retry-After when the backend is %s, never a 500 or a hang', async (_, reads) => {
    const app = await startReadsApp(reads, { READS_TIMEOUT_MS: '200' });
    try {
      for (const url of URLS) {
        const answer = await app.get(url);
        expect(answer.status).toBe(503);
        expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
        expect(answer.body.error).not.toMatch(/ECONNREFUSED|socket/);
      }
      // Each counted where an operator watches the control plane's own failures (cicd.system.errors).
      expect(await app.metric('cicd_system_errors_total{cicd_system_component="reads",error_type="backend_unavailable"}')).toBe(URLS.length);
    } finally {
      await app.close();
    }
  });
});

describe('the read API in the service itself', () => {
  it('is served on the internal port over the embedded collector when no ClickHouse is configured', async () => {
    const files = filesBackend();
    const world = readsWorld();
    files.reads(world.exports);
    // A worker thread under ts-jest compiles its TypeScript first (seconds); the built service's starts in milliseconds.
    const service = await startInProcess({ DATA_DIR: files.dataDir, READS_TIMEOUT_MS: '60000' });
    try {
      const url = `/internal/ci/telemetry/projects/${PROJECT}/pipelines/500/critical_path`;
      const response = await service.app.inject({ method: 'GET', url, headers: await internalApiHeaders(service.secrets.internalApiSecret) });
      expectMatchesOpenApi(
        '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/critical_path',
        'GET',
        response.statusCode,
        response.headers['content-type'] as string,
        response.json(),
      );
      expect(response.json()).toMatchObject({ final: true, duration_seconds: 230 });
    } finally {
      await service.close();
    }
  });

  it('answers a job pickup while a large read is in progress, then the read, capped at READS_MAX_SPANS and saying so', async () => {
    // 30 jobs of 1,000 spans each: issue 56 item 3's pipeline, smaller. The read's work is in a worker thread.
    const files = filesBackend();
    const large = largePipeline(PROJECT, 700, 30, 1000);
    files.reads(large.resourceSpans());
    const service = await startInProcess({ DATA_DIR: files.dataDir, READS_TIMEOUT_MS: '60000' });
    try {
      const headers = await internalApiHeaders(service.secrets.internalApiSecret);
      const answered: string[] = [];
      const read = service.app
        .inject({ method: 'GET', url: `/internal/ci/telemetry/projects/${PROJECT}/pipelines/700/trace`, headers })
        .then((response) => (answered.push('read'), response));
      const pickup = await service.app
        .inject({
          method: 'POST',
          url: '/internal/ci/telemetry/job_payload',
          headers: { ...headers, 'content-type': 'application/json' },
          payload: jobPayloadRequest(),
        })
        .then((response) => (answered.push('pickup'), response));
      expect(pickup.statusCode).toBe(200);
      expect(answered).toEqual(['pickup']);
      const response = await read;
      expect(answered).toEqual(['pickup', 'read']);
      expect(response.statusCode).toBe(200);
      const body = response.json();
      expect(body.completeness).toMatchObject({ spans: 10_000, total_spans: 30_121, truncated: true, roots: 1, missing_parents: 0, final: true });
    } finally {
      await service.close();
    }
  }, 120_000);
});

describe('a hosted runner\'s spans named as the control plane\'s, sent straight to the collector (SPEC §12 "Trust")', () => {
  // GitLab said job 65 failed after 28 s and pipeline 650 failed. A hosted runner (no gateway) sent spans with the
  // job span's and the pipeline span's ids, their names, a high version and `success`, and a bridge nobody triggered.
  const createdAt = Math.floor((Date.now() - 3600_000) / 1000) * 1000;
  const pipeline = new PipelineTrace(PROJECT, 650, createdAt)
    .job({ jobId: 65, name: 'unit', status: 'failed', queuedAt: 0, pickedUpAt: 2, finishedAt: 30 })
    .pipeline(650, { status: 'failed', finishedAt: 31 });
  const forged = (name: string, spanId: string, parentSpanId: string, attributes: Record<string, string | number>) => ({
    traceId: pipeline.traceId,
    spanId,
    ...(parentSpanId === '' ? {} : { parentSpanId }),
    name,
    kind: 1,
    startTimeUnixNano: `${BigInt(pipeline.at(0)) * 1_000_000n}`,
    endTimeUnixNano: `${BigInt(pipeline.at(1)) * 1_000_000n}`,
    attributes: Object.entries(attributes).map(([key, value]) => ({
      key,
      value: typeof value === 'number' ? { intValue: String(value) } : { stringValue: value },
    })),
  });
  const identity = { 'ci.project.id': PROJECT, 'ci.pipeline.id': '650', 'ci.pipeline.span.version': '9007199254740991' };
  pipeline.push({
    resource: {
      attributes: [
        { key: 'service.name', value: { stringValue: 'runner' } },
        { key: 'ci.job.id', value: { intValue: '65' } },
        { key: 'ci.project.id', value: { intValue: String(PROJECT) } },
        { key: 'ci.pipeline.id', value: { intValue: '650' } },
      ],
    },
    scopeSpans: [
      {
        scope: { name: 'hosted' },
        spans: [
          forged('job', pipeline.jobSpanId(65), pipeline.pipelineSpanId(650), {
            ...identity,
            'ci.job.id': 65,
            'ci.job.status': 'success',
            'cicd.pipeline.task.name': 'unit',
          }),
          forged('pipeline', pipeline.pipelineSpanId(650), '', { ...identity, 'ci.pipeline.status': 'success' }),
          forged('bridge', 'abcdef0123456789', pipeline.pipelineSpanId(650), { ...identity, 'ci.job.id': 66, 'ci.job.status': 'success' }),
        ] as never[],
      },
    ],
  });
  let app: ReadsApp;

  beforeAll(async () => {
    app = await startReadsApp(filesBackend().reads(pipeline.resourceSpans()));
  });
  afterAll(() => app.close());

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP/JSON as answered
  const spansNamed = (trace: any, name: string): any[] =>
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    trace.resourceSpans.flatMap((resource: any) => resource.scopeSpans.flatMap((scope: any) => scope.spans)).filter((span: any) => span.name === name);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const attribute = (span: any, key: string) => span.attributes.find((kv: { key: string }) => kv.key === key)?.value;

  it("reads the job as GitLab said: failed, GitLab's times, nothing missing", async () => {
    const { status, body } = await app.get(`/internal/ci/telemetry/projects/${PROJECT}/jobs/65/trace`);

    expect(status).toBe(200);
    const [job, ...others] = spansNamed(body.trace, 'job');
    expect(others).toEqual([]);
    expect(attribute(job, 'ci.job.status')).toEqual({ stringValue: 'failed' });
    expect(BigInt(job.endTimeUnixNano) - BigInt(job.startTimeUnixNano)).toBe(30_000_000_000n);
    expect(body.completeness).toMatchObject({ missing_parents: 0, final: true });
  });

  it('reads the pipeline as GitLab said, with one root and no bridge it never had', async () => {
    const { body } = await app.get(`/internal/ci/telemetry/projects/${PROJECT}/pipelines/650/trace`);

    const [root, ...others] = spansNamed(body.trace, 'pipeline');
    expect(others).toEqual([]);
    expect(attribute(root, 'ci.pipeline.status')).toEqual({ stringValue: 'failed' });
    expect(spansNamed(body.trace, 'bridge')).toEqual([]);
    expect(body.completeness).toMatchObject({ roots: 1, missing_parents: 0, final: true });
    const path = await app.get(`/internal/ci/telemetry/projects/${PROJECT}/pipelines/650/critical_path`);
    expect(path.body).toMatchObject({ duration_seconds: 30, path: [{ job_id: 65, name: 'unit' }] });
  });

  it('counts the job as a failure of 28 s in the jobs summary', async () => {
    const { body } = await app.get(`/internal/ci/telemetry/projects/${PROJECT}/jobs`);

    expect(body.jobs).toEqual([expect.objectContaining({ name: 'unit', runs: 1, failures: 1, duration_seconds: { p50: 28, p95: 28 } })]);
  });
});

describe('the embedded backend keeping one copy of a span id, whatever order the copies arrived in', () => {
  it("keeps the control plane's latest job span over any runner's copy of its id, in every order", async () => {
    const createdAt = Math.floor((Date.now() - 3600_000) / 1000) * 1000;
    const pipeline = new PipelineTrace(PROJECT, 660, createdAt)
      .job({ jobId: 66, name: 'unit', status: 'failed', queuedAt: 0, pickedUpAt: 2, finishedAt: 30 })
      .pipeline(660, { status: 'failed', finishedAt: 31 });
    const jobSpanId = pipeline.jobSpanId(66);
    // A runner's copy of the job span: any name, any version it likes, `success`.
    const copy = (name: string, version: number) => ({
      resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
      scopeSpans: [
        {
          scope: { name: 'hosted' },
          spans: [
            {
              traceId: pipeline.traceId,
              spanId: jobSpanId,
              name,
              kind: 1,
              startTimeUnixNano: `${BigInt(pipeline.at(0)) * 1_000_000n}`,
              endTimeUnixNano: `${BigInt(pipeline.at(1)) * 1_000_000n}`,
              attributes: [
                { key: 'ci.job.id', value: { intValue: '66' } },
                { key: 'ci.project.id', value: { intValue: String(PROJECT) } },
                { key: 'ci.job.status', value: { stringValue: 'success' } },
                { key: 'ci.pipeline.span.version', value: { intValue: String(version) } },
              ],
            },
          ] as never[],
        },
      ],
    });
    const files = filesBackend();
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.constantFrom('job', 'step_script', 'rspec'), fc.nat({ max: Number.MAX_SAFE_INTEGER })), { minLength: 1, maxLength: 4 }),
        fc.nat(),
        async (copies, seed) => {
          const exports = [...pipeline.resourceSpans(), ...copies.map(([name, version]) => copy(name, version))];
          // The copies arrive anywhere among the control plane's exports.
          const order = exports.map((resourceSpans, i) => ({ resourceSpans, key: (i * 2654435761 + seed) % 4294967296 }));
          order.sort((a, b) => a.key - b.key);
          const reads = files.reads(order.map(({ resourceSpans }) => resourceSpans) as typeof exports);
          const window = { fromMs: createdAt - 60_000, toMs: Date.now() };
          // As a read takes them: the backend's one copy per span id, then the trusted ones (read-answers.ts ownSpans).
          const read = await reads.jobTrace(PROJECT, 66, window, { limit: 1_000_000 });
          const kept = trustedSpans(read?.spans ?? []).filter((span) => span.spanId === jobSpanId);
          expect(kept.map((span) => [span.name, span.attributes['ci.job.status']])).toEqual([['job', 'failed']]);
        },
      ),
      { numRuns: 40 },
    );
  });
});
