import { appendFileSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, IdGenerator, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { deliverWebhook, jobHook, pipelineAt, pipelineHook, WebhookJob } from '../../simulator/gitlab-webhooks';
import { readTracingAsRunner } from '../../simulator/runner-tracing';
import { localCollectorDirectory, signalFile } from '../../src/collector/collector-files';
import { runJobAsStockRunner } from '../helpers/ci-pipeline';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { internalApiHeaders } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { waitFor } from '../helpers/ports';
import { metric, ServiceProcess, startService } from '../helpers/service';
import { recordSdkWarnings } from '../helpers/sdk-warnings';

/**
 * Issue 56 item 2 against the built service on its embedded defaults: a program in a job, through its own capability
 * URL and a real OpenTelemetry SDK exporter, writes what GitLab's account of the job is made of (a span with its job
 * span's id, named `job`, `success` and a high version; `pipeline` and `bridge` spans with forged statuses); GitLab's
 * Job Hook then says the job failed. The gateway refuses those spans with partial success naming them, and every
 * read says what GitLab said. A hosted runner, which exports straight to the collector, is tried too.
 */

const PROJECT = 7;
const PIPELINE = 5600;
const JOB = 56001;
const HIGH_VERSION = Number.MAX_SAFE_INTEGER;

/** Partial-success warnings the SDK logs when the gateway reports rejected spans. */
const sdkWarnings = recordSdkWarnings();

/** Hands out the span ids a program chose, in order: what a program that read TRACEPARENT can do. */
class ChosenIds implements IdGenerator {
  constructor(private readonly spanIds: string[]) {}
  generateTraceId(): string {
    throw new Error('every span here has a remote parent');
  }
  generateSpanId(): string {
    return this.spanIds.shift() ?? 'f00df00df00df00d';
  }
}

describe('a job writing GitLab\'s account of itself (issue 56 item 2, SPEC §12 "Trust")', () => {
  let cwd: string;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  let hook: WebhookJob;
  let jobSpanId: string;
  let traceId: string;
  let exported: { code: ExportResultCode };
  const createdAt = new Date(Math.floor(Date.now() / 1000 - 2) * 1000);

  const deliver = async (event: string, body: unknown) => {
    const delivered = await deliverWebhook(service.url, event, body, { token: secret.secret });
    if (delivered.status !== 200) throw new Error(`${event}: ${delivered.status} ${JSON.stringify(delivered.body)}`);
  };
  const read = async (path: string, template: string) => {
    const response = await fetch(`${service.url}${path}`, { headers: await internalApiHeaders(service.secrets.internalApiSecret) });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- checked against openapi.yaml
    const body: any = await response.json();
    expectMatchesOpenApi(template, 'GET', response.status, response.headers.get('content-type') ?? undefined, body);
    return { status: response.status, body };
  };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP/JSON as answered
  const spansOf = (answer: any): any[] => answer.trace.resourceSpans.flatMap((resource: any) => resource.scopeSpans.flatMap((scope: any) => scope.spans));
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const attribute = (span: any, key: string) => span.attributes.find((kv: { key: string }) => kv.key === key)?.value;
  const JOB_PATH = `/internal/ci/telemetry/projects/${PROJECT}/jobs/${JOB}/trace`;
  const PIPELINE_PATH = `/internal/ci/telemetry/projects/${PROJECT}/pipelines/${PIPELINE}/trace`;

  beforeAll(async () => {
    cwd = realpathSync(mkdtempSync(join(tmpdir(), 'cjt-control-plane-')));
    secret = makeWebhookSecret();
    service = await startService({ GITLAB_WEBHOOK_SECRET_FILE: secret.file }, { cwd });

    const queuedAt = new Date(Date.now() - 1000);
    const run = await runJobAsStockRunner(service, {
      jobId: JOB,
      projectId: PROJECT,
      pipelineId: PIPELINE,
      name: 'unit',
      status: 'failed',
      queuedAt,
      startedAt: new Date(),
      stageSeconds: {
        prepare_executor: 0.1,
        get_sources: 0.1,
        restore_cache: 0.1,
        step_script: 0.5,
        after_script: 0.05,
        archive_cache: 0.05,
        upload_artifacts: 0.1,
      },
    });
    hook = run.hook;

    // The program in the job: it reads TRACEPARENT and exports to the job's capability URL, as any SDK does.
    const view = readTracingAsRunner({ tracing: run.picked.tracing });
    jobSpanId = view.parent!.spanId;
    traceId = view.parent!.traceId;
    const memory = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'rspec' }),
      idGenerator: new ChosenIds([jobSpanId, 'a1a1a1a1a1a1a1a1', 'b2b2b2b2b2b2b2b2', 'c3c3c3c3c3c3c3c3', 'd4d4d4d4d4d4d4d4']),
      spanProcessors: [new SimpleSpanProcessor(memory)],
    });
    const tracer = provider.getTracer('ci-job');
    const parent = trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: jobSpanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
    const oneSecond = { startTime: new Date(queuedAt.getTime()), endTime: new Date(queuedAt.getTime() + 1000) };
    const forge = (name: string, attributes: Record<string, string | number | boolean>) =>
      tracer.startSpan(name, { startTime: oneSecond.startTime, attributes }, parent).end(oneSecond.endTime);
    forge('job', { 'ci.job.id': JOB, 'ci.job.status': 'success', 'ci.pipeline.span.version': HIGH_VERSION, 'cicd.pipeline.task.name': 'unit' });
    forge('pipeline', { 'ci.pipeline.status': 'success', 'ci.pipeline.span.version': HIGH_VERSION });
    forge('bridge', { 'ci.job.status': 'success', 'ci.job.critical_path': true });
    // Named as the control plane's, yet carrying nothing readers trust: it passes the gateway, and no read takes it as GitLab's.
    forge('bridge', { 'ci.job.status': 'success' });
    forge('rspec', { 'test.count': 12 });
    const exporter = new OTLPTraceExporter({ url: readTracingAsRunner({ tracing: run.picked.tracing }).plans[0].target });
    exported = await new Promise((resolve) => exporter.export(memory.getFinishedSpans(), resolve));
    await exporter.shutdown();

    // GitLab says the job failed, then the pipeline.
    const pipeline = (status: string) => pipelineAt(PIPELINE, PROJECT, status, createdAt, [hook]);
    await deliver('Job Hook', jobHook(pipeline('running'), hook));
    await deliver('Pipeline Hook', pipelineHook(pipeline('failed')));
  }, 120_000);

  afterAll(async () => {
    await service?.stop();
    if (cwd !== undefined) rmSync(cwd, { recursive: true, force: true });
  });

  it('refuses the spans a job may not write through partial success, naming them, and forwards its own', async () => {
    expect(exported.code).toBe(ExportResultCode.SUCCESS);
    const warning = sdkWarnings.join('\n');
    expect(warning).toMatch(/Partial Success.*"rejectedSpans":"?3/);
    // The SDK logs the answer as JSON: the names' quotes come escaped.
    for (const named of [`job\\" (span_id ${jobSpanId})`, 'pipeline\\" (span_id a1a1a1a1a1a1a1a1)', 'bridge\\" (span_id b2b2b2b2b2b2b2b2)']) {
      expect(warning).toContain(named);
    }
    expect(await metric(service, 'ci_job_telemetry_gateway_items_total{signal="traces",outcome="rejected_control_plane_span_id"}')).toBe(1);
    expect(await metric(service, 'ci_job_telemetry_gateway_items_total{signal="traces",outcome="rejected_reserved_attribute"}')).toBe(2);
  });

  it("reads the job as GitLab said: failed, GitLab's times, its program's span, nothing missing", async () => {
    const answer = await waitFor('the job read with the job span GitLab closed', async () => {
      const { status, body } = await read(JOB_PATH, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace');
      return status === 200 && body.completeness.final === true ? body : undefined;
    });
    const jobs = spansOf(answer).filter((span) => span.name === 'job');
    expect(jobs).toHaveLength(1);
    expect(jobs[0].spanId).toBe(jobSpanId);
    expect(attribute(jobs[0], 'ci.job.status')).toEqual({ stringValue: 'failed' });
    expect(jobs[0].status.code).toBe(2);
    expect(BigInt(jobs[0].endTimeUnixNano)).toBe(BigInt(hook.finishedAt!.getTime()) * 1_000_000n);
    expect(spansOf(answer).map((span) => span.name)).toContain('rspec');
    expect(spansOf(answer).map((span) => span.name)).not.toContain('bridge');
    expect(answer.completeness).toMatchObject({ missing_parents: 0, final: true });
  });

  it('reads the pipeline as GitLab said: failed, one root, nothing missing, no bridge it never had', async () => {
    const answer = await waitFor('the pipeline read, final', async () => {
      const { status, body } = await read(PIPELINE_PATH, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/trace');
      return status === 200 && body.completeness.final === true ? body : undefined;
    });
    const pipelines = spansOf(answer).filter((span) => span.name === 'pipeline');
    expect(pipelines.map((span) => attribute(span, 'ci.pipeline.status'))).toEqual([{ stringValue: 'failed' }]);
    expect(spansOf(answer).filter((span) => span.name === 'bridge')).toEqual([]);
    expect(answer.completeness).toMatchObject({ roots: 1, missing_parents: 0, final: true });
  });

  it('counts the job as a failure in the jobs summary, for as long as GitLab said it ran', async () => {
    const job = spansOf(
      await waitFor('the job read', async () => (await read(JOB_PATH, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace')).body),
    );
    const queueEnd = BigInt(job.find((span) => span.name === 'queue_wait').endTimeUnixNano);
    const jobEnd = BigInt(job.find((span) => span.name === 'job').endTimeUnixNano);

    const { status, body } = await read(`/internal/ci/telemetry/projects/${PROJECT}/jobs`, '/internal/ci/telemetry/projects/{project_id}/jobs');

    expect(status).toBe(200);
    expect(body.jobs).toEqual([expect.objectContaining({ name: 'unit', runs: 1, failures: 1 })]);
    expect(body.jobs[0].duration_seconds.p50).toBeCloseTo(Number((jobEnd - queueEnd) / 1_000_000n) / 1000, 3);
  });

  it("keeps GitLab's account when a hosted runner sends a job span of its own straight to the collector", async () => {
    await waitFor('the job read', async () =>
      (await read(JOB_PATH, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace')).status === 200 ? true : undefined,
    );
    // What the collector keeps of an export that never passed the gateway: no mark, the job span's id, `success`.
    const nanos = (at: Date) => `${BigInt(at.getTime()) * 1_000_000n}`;
    const hosted = {
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
          scopeSpans: [
            {
              scope: { name: 'hosted-runner' },
              spans: [
                {
                  traceId,
                  spanId: jobSpanId,
                  name: 'job',
                  kind: 1,
                  startTimeUnixNano: nanos(createdAt),
                  endTimeUnixNano: nanos(new Date(createdAt.getTime() + 1000)),
                  attributes: [
                    { key: 'ci.job.id', value: { intValue: String(JOB) } },
                    { key: 'ci.project.id', value: { intValue: String(PROJECT) } },
                    { key: 'ci.pipeline.id', value: { stringValue: String(PIPELINE) } },
                    { key: 'ci.job.status', value: { stringValue: 'success' } },
                    { key: 'ci.pipeline.span.version', value: { intValue: String(HIGH_VERSION) } },
                    { key: 'cicd.pipeline.task.name', value: { stringValue: 'unit' } },
                  ],
                },
              ],
            },
          ],
        },
      ],
    };
    appendFileSync(signalFile(localCollectorDirectory(join(cwd, '.data')), 'traces'), `${JSON.stringify(hosted)}\n`);

    const { body } = await read(JOB_PATH, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace');
    const jobs = spansOf(body).filter((span) => span.name === 'job');
    expect(jobs.map((span) => attribute(span, 'ci.job.status'))).toEqual([{ stringValue: 'failed' }]);
    expect(body.completeness).toMatchObject({ missing_parents: 0, final: true });
    const summary = await read(`/internal/ci/telemetry/projects/${PROJECT}/jobs`, '/internal/ci/telemetry/projects/{project_id}/jobs');
    expect(summary.body.jobs).toEqual([expect.objectContaining({ name: 'unit', runs: 1, failures: 1 })]);
  });
});
