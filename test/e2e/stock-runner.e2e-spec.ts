import { ROOT_CONTEXT, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { ExportResult, ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { internalApiHeaders } from '../helpers/internal-api';
import type { OtlpSink } from '../helpers/otlp-sink';
import { DecoratedJob, pickUpJob } from '../helpers/ci-job';
import { waitFor } from '../helpers/ports';
import type { RedisServer } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';
import { startWorld, World } from '../helpers/world';
import { readTracingAsRunner, RunnerExportPlan } from '../../simulator/runner-tracing';
import { writeFlagsFile } from '../helpers/flags-file';
import { makeWebhookSecret } from '../helpers/gitlab-webhooks';

/**
 * A stock GitLab Runner exporting through the gateway (SPEC §4, §6): the client reads the decorated
 * payload with the runner's own rules (simulator/runner-tracing.ts) and exports with the
 * OpenTelemetry SDK's OTLP/HTTP protobuf exporter to exactly the URL it was handed, with no headers,
 * as gitlab-runner's commands/tracing.go does: resource service.name=runner, one job_execution span
 * parented on span_parent_id, the runner's identity as span attributes.
 */

async function pickUp(service: ServiceProcess, jobId: number, pipelineId: number): Promise<DecoratedJob> {
  const request = jobPayloadRequest({ job: { id: jobId, pipeline_id: pipelineId, root_pipeline_id: pipelineId } });
  (request.payload.variables as unknown[]).push(
    { key: 'CI_PIPELINE_ID', value: String(pipelineId), public: true },
    { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
  );
  const decorated = await pickUpJob(service, request);
  expect(decorated.status).toBe(200);
  return decorated;
}

/** What commands/tracing.go does for one job, given the plan it read from the payload. */
async function runAsStockRunner(
  plan: RunnerExportPlan,
  parent: { traceId: string; spanId: string },
  identity: { jobId: number; projectId: number; pipelineId: string; runnerId: number },
): Promise<ExportResult> {
  expect(plan).toMatchObject({ transport: 'otlp-http-protobuf', credentials: { kind: 'none' } });
  let result: ExportResult | undefined;
  // No headers option: the runner adds no credentials to an endpoint without auth.
  const exporter = new OTLPTraceExporter({ url: plan.target });
  const exportSpans = exporter.export.bind(exporter);
  exporter.export = (spans, done) => exportSpans(spans, (outcome) => ((result = outcome), done(outcome)));
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'runner', 'service.version': '18.6.0' }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  // Remote parent, always sampled: "we got the trace feature set, so presumably the server wants the Runner to trace this job".
  const context = trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
  const span = provider.getTracer('gitlab-ci-runner').startSpan(
    'job_execution',
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'ci.job.id': identity.jobId,
        'ci.project.id': identity.projectId,
        'ci.pipeline.id': identity.pipelineId,
        'ci.pipeline.source': 'push',
        'ci.runner.id': identity.runnerId,
        'ci.runner.executor': 'docker',
      },
    },
    context,
  );
  span.setAttribute('ci.job.status', 'success');
  span.end();
  await provider.shutdown();
  return result!;
}

describe('a stock GitLab Runner exports through the gateway (SPEC §4, §6)', () => {
  let redis: RedisServer;
  let sink: OtlpSink;
  let service: ServiceProcess;
  let world: World;

  beforeAll(async () => {
    world = await startWorld({ redis: true, sink: true, service: { GRANT_REVOKE_GRACE_SECONDS: '0' } });
    ({ redis, sink, service } = world);
  });
  afterAll(() => world?.stop());

  it('reads one endpoint it can use, exports its job_execution span with no credentials, and it lands in the pipeline trace, stamped', async () => {
    const { payload, telemetry } = await pickUp(service, 7001, 900);
    const view = readTracingAsRunner(payload.features);
    expect(view.warnings).toEqual([]);
    expect(view.plans).toHaveLength(1);
    expect(view.parent).toEqual({ traceId: telemetry.trace_id, spanId: telemetry.span_parent_id });

    const before = sink.spans().length;
    const result = await runAsStockRunner(view.plans[0], view.parent!, { jobId: 7001, projectId: 7, pipelineId: '900', runnerId: 17 });
    expect(result.code).toBe(ExportResultCode.SUCCESS);

    const [received] = sink.spans().slice(before);
    process.stderr.write(
      `stock-runner: the collector received ${JSON.stringify({ ...received, resourceKeys: undefined, attributeKeys: undefined }, (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value))}\n`,
    );
    expect(received).toMatchObject({ name: 'job_execution', traceId: telemetry.trace_id, parentSpanId: telemetry.span_parent_id });
    expect(received.resource).toMatchObject({
      'service.name': 'runner',
      'ci.job.id': 7001,
      'ci.project.id': 7,
      'ci.pipeline.id': 900,
      'ci.runner.id': 17,
      // Semantic-convention attributes are strings.
      'cicd.pipeline.run.id': '900',
      'cicd.pipeline.task.run.id': '7001',
      'cicd.worker.id': '17',
      'ci.sampling.reason': 'head',
    });
    expect(received.attributes).toMatchObject({
      'ci.job.id': 7001,
      'ci.project.id': 7,
      'ci.pipeline.id': '900',
      'ci.runner.id': 17,
      'ci.job.status': 'success',
    });
    // The capability is a credential: it never reaches the collector nor the service's logs.
    const capability = String((payload.features.tracing as { otel_endpoints: Array<{ url: string }> }).otel_endpoints[0].url).split('/')[5];
    expect(JSON.stringify(sink.exports.at(-1)!.headers)).not.toContain(capability);
    // The access log names the route template (it is written once the answer is sent).
    await waitFor('the access log line', async () => (service.output().includes('"route":"/jobs/:jobId/:capability/v1/traces"') ? true : undefined));
    expect(service.output()).not.toContain(capability);
  });

  it('overwrites a spoofed identity on the runner span with the grant, in the runner types', async () => {
    const { payload, telemetry } = await pickUp(service, 7007, 904);
    const view = readTracingAsRunner(payload.features);
    const before = sink.spans().length;
    // A runner (or a job pretending to be one) claiming another project, job, pipeline and runner.
    const spoofed = { jobId: 1, projectId: 999_999, pipelineId: '1', runnerId: 4242 };
    expect((await runAsStockRunner(view.plans[0], view.parent!, spoofed)).code).toBe(ExportResultCode.SUCCESS);
    const [received] = sink.spans().slice(before);
    expect(received.traceId).toBe(telemetry.trace_id);
    expect(received.attributes).toMatchObject({ 'ci.job.id': 7007, 'ci.project.id': 7, 'ci.pipeline.id': '904', 'ci.runner.id': 17 });
    for (const key of ['ci.job.id', 'ci.project.id', 'ci.pipeline.id', 'ci.runner.id']) {
      expect(received.attributeKeys.filter((name) => name === key)).toHaveLength(1);
    }
  });

  it('refuses a forged capability, another job capability and a revoked grant, with OTLP Status answers', async () => {
    const job = await pickUp(service, 7002, 901);
    const other = await pickUp(service, 7003, 901);
    const plan = readTracingAsRunner(job.payload.features).plans[0];
    const otherPlan = readTracingAsRunner(other.payload.features).plans[0];
    const parent = readTracingAsRunner(job.payload.features).parent!;
    const identity = { jobId: 7002, projectId: 7, pipelineId: '901', runnerId: 17 };

    const forged = { ...plan, target: plan.target.replace(/\/jobs\/7002\/[^/]+\//, `/jobs/7002/${randomBytes(24).toString('base64url')}/`) };
    const swapped = { ...plan, target: otherPlan.target.replace('/jobs/7003/', '/jobs/7002/') };
    for (const bad of [forged, swapped]) {
      const answer = await fetch(bad.target, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: new Uint8Array() });
      expect(answer.status).toBe(401);
      expect(answer.headers.get('content-type')).toBe('application/x-protobuf');
      expect((await runAsStockRunner(bad, parent, identity)).code).toBe(ExportResultCode.FAILED);
    }

    const revoked = await fetch(`${service.url}/internal/ci/telemetry/grants/7002`, {
      method: 'DELETE',
      headers: await internalApiHeaders(service.secrets.internalApiSecret),
    });
    expect(revoked.status).toBe(200);
    // Refusals and grants are cached at most as long as the decision allows; GRANT_REVOKE_GRACE_SECONDS=0 here.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const answer = await fetch(plan.target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(answer.status).toBe(403);
    expect(await answer.json()).toEqual({ code: 7, message: expect.any(String) });
  });

  it('keeps accepting capabilities minted before a key rotation, and only those of the previous key', async () => {
    const { payload } = await pickUp(service, 7004, 902);
    const plan = readTracingAsRunner(payload.features).plans[0];
    const newKeyFile = join(service.secrets.dir, 'capability_key.next');
    writeFileSync(newKeyFile, randomBytes(32).toString('base64'));
    const rotate = (previous: Record<string, string>) =>
      startService({ REDIS_URL: redis.url, OTLP_UPSTREAM_URL: sink.url, CAPABILITY_KEY_FILE: newKeyFile, ...previous });
    const rotated = await rotate({ CAPABILITY_PREVIOUS_KEY_FILE: service.secrets.capabilityKeyFile });
    const forgotten = await rotate({});
    try {
      const at = (gateway: ServiceProcess) => ({ ...plan, target: plan.target.replace(service.gatewayUrl, gateway.gatewayUrl) });
      const identity = { jobId: 7004, projectId: 7, pipelineId: '902', runnerId: 17 };
      const parent = readTracingAsRunner(payload.features).parent!;
      expect((await runAsStockRunner(at(rotated), parent, identity)).code).toBe(ExportResultCode.SUCCESS);
      expect((await runAsStockRunner(at(forgotten), parent, identity)).code).toBe(ExportResultCode.FAILED);
    } finally {
      await Promise.all([rotated.stop(), forgotten.stop()]);
    }
  });

  it('reads a provisionally traced job (SPEC §11) as a sampled one, and its export is parked, not forwarded; a hosted runner keeps the head decision', async () => {
    const outcome = await startService({
      REDIS_URL: redis.url,
      OTLP_UPSTREAM_URL: sink.url,
      GITLAB_WEBHOOK_SECRET_FILE: makeWebhookSecret().file,
      FLAGS_FILE: writeFlagsFile({ sampling: 10, outcomeSampling: {} }),
      HOSTED_RUNNER_TYPES: 'instance_type',
      COLLECTOR_PUBLIC_URL: 'https://otel.example.com',
    });
    try {
      // The first pipeline the head decision leaves out (nine in ten at 10 %).
      let decorated: DecoratedJob | undefined;
      let pipelineId = 9099;
      while (decorated === undefined) {
        pipelineId++;
        const candidate = await pickUp(outcome, pipelineId * 10, pipelineId);
        if (candidate.telemetry.enabled && candidate.telemetry.provisional === true) decorated = candidate;
      }
      const { payload, telemetry } = decorated;
      const view = readTracingAsRunner(payload.features);
      expect(view.warnings).toEqual([]);
      expect(view.plans).toHaveLength(1);
      expect(view.parent).toEqual({ traceId: telemetry.trace_id, spanId: telemetry.span_parent_id });
      // Recorded (sampled flag), and a threshold no consistent sampler drops anything under.
      expect(payload.variables).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ key: 'TRACEPARENT', value: expect.stringMatching(/-03$/) }),
          expect.objectContaining({ key: 'TRACESTATE', value: 'ot=th:0' }),
        ]),
      );
      const before = sink.spans().length;
      const result = await runAsStockRunner(view.plans[0], view.parent!, {
        jobId: pipelineId * 10,
        projectId: 7,
        pipelineId: String(pipelineId),
        runnerId: 17,
      });
      expect(result.code).toBe(ExportResultCode.SUCCESS);
      expect(
        sink
          .spans()
          .slice(before)
          .filter((span) => span.traceId === telemetry.trace_id),
      ).toEqual([]);

      // A hosted runner would export straight to the collector, past the parking: the head decision stands.
      const hosted = await pickUpJob(
        outcome,
        jobPayloadRequest({
          job: { id: pipelineId * 10 + 1, pipeline_id: pipelineId, root_pipeline_id: pipelineId },
          runner: { runner_type: 'instance_type' },
        }),
      );
      expect(hosted.telemetry).toEqual({ enabled: false, reason: 'not_sampled' });
    } finally {
      await outcome.stop();
    }
  });

  it('hands hosted runners the collector with GCP OIDC in the shape the runner parses', async () => {
    const hosted = await startService({
      REDIS_URL: redis.url,
      HOSTED_RUNNER_TYPES: 'instance_type',
      COLLECTOR_PUBLIC_URL: 'https://otel.example.com',
      HOSTED_OIDC_AUDIENCE: 'aud-ci',
    });
    try {
      const { payload } = await pickUpJob(hosted, jobPayloadRequest({ job: { id: 7005 }, runner: { runner_type: 'instance_type' } }));
      expect(readTracingAsRunner(payload.features)).toMatchObject({
        plans: [{ transport: 'otlp-http-protobuf', target: 'https://otel.example.com/v1/traces', credentials: { kind: 'gcp_oidc', audience: 'aud-ci' } }],
        warnings: [],
      });
    } finally {
      await hosted.stop();
    }
  });

  it('lets a program inside the job export traces, metrics and logs through CI_JOB_TELEMETRY_OTLP_ENDPOINT', async () => {
    const { payload, telemetry } = await pickUp(service, 7006, 903);
    const variable = payload.variables.find((entry) => entry.key === 'CI_JOB_TELEMETRY_OTLP_ENDPOINT')!;
    expect(variable).toMatchObject({ public: false, masked: true });
    const traceparent = payload.variables.find((entry) => entry.key === 'TRACEPARENT')!.value;
    const before = sink.exports.length;

    // As a .gitlab-ci.yml would: `OTEL_EXPORTER_OTLP_ENDPOINT=$CI_JOB_TELEMETRY_OTLP_ENDPOINT`.
    const { stdout } = await promisify(execFile)(process.execPath, [join(__dirname, '..', 'fixtures', 'in-job-program.js')], {
      env: { PATH: process.env.PATH, OTEL_EXPORTER_OTLP_ENDPOINT: variable.value, TRACEPARENT: traceparent },
      timeout: 20_000,
    });
    expect(JSON.parse(stdout)).toEqual({
      traces: { code: ExportResultCode.SUCCESS },
      metrics: { code: ExportResultCode.SUCCESS },
      logs: { code: ExportResultCode.SUCCESS },
    });

    const received = sink.exports.slice(before);
    // The metric reader exports on flush and again on shutdown.
    expect(new Set(received.map((entry) => entry.signal))).toEqual(new Set(['logs', 'metrics', 'traces']));
    for (const entry of received) {
      // The program claimed project 999999; the gateway stamps the grant's identity over it.
      expect(entry.resources[0]).toMatchObject({ 'service.name': 'rspec', 'ci.job.id': 7006, 'ci.project.id': 7, 'ci.runner.id': 17 });
    }
    const [span] = received.find((entry) => entry.signal === 'traces')!.spans;
    expect(span).toMatchObject({ name: 'rspec suite', traceId: telemetry.trace_id, parentSpanId: telemetry.span_parent_id });
  });
});
