import { jobPayloadRequest } from '../fixtures/job-payload';
import { OtlpSink, startOtlpSink } from '../helpers/otlp-sink';
import { pickUpJob } from '../helpers/ci-job';
import { RedisServer, startRedis } from '../helpers/redis';
import { startService } from '../helpers/service';
import { readTracingAsRunner } from '../../simulator/runner-tracing';

/** SPEC §8: with OTEL_EXPORTER_OTLP_ENDPOINT set, the service exports spans of its own decisions. */
describe('self-instrumentation', () => {
  let redis: RedisServer;
  let collector: OtlpSink;
  let ownSpans: OtlpSink;

  beforeAll(async () => {
    [redis, collector, ownSpans] = await Promise.all([startRedis(), startOtlpSink(), startOtlpSink()]);
  });
  afterAll(async () => {
    await Promise.all([redis?.stop(), collector?.stop(), ownSpans?.stop()]);
  });

  it('exports a span per job-payload decision, auth decision and gateway export, with its outcome', async () => {
    const service = await startService({ REDIS_URL: redis.url, OTLP_UPSTREAM_URL: collector.url, OTEL_EXPORTER_OTLP_ENDPOINT: ownSpans.url });
    let capability = '';
    try {
      const enabled = await pickUpJob(service, jobPayloadRequest({ job: { id: 9001 } }));
      await pickUpJob(service, jobPayloadRequest({ job: { id: 9002 }, runner: { features: { tracing: false } } }));
      const target = readTracingAsRunner(enabled.payload.features).plans[0].target;
      capability = new URL(target).pathname.split('/')[3];
      const body = JSON.stringify({ resourceSpans: [] });
      expect((await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body })).status).toBe(200);
      const forged = target.replace(capability, 'C'.repeat(32));
      expect((await fetch(forged, { method: 'POST', headers: { 'content-type': 'application/json' }, body })).status).toBe(401);
    } finally {
      // Spans are batched; shutting down flushes them.
      await service.stop();
    }

    const spans = ownSpans.spans();
    expect(new Set(spans.map((span) => span.resource['service.name']))).toEqual(new Set(['ci-job-telemetry']));
    const outcomes = (name: string) => spans.filter((span) => span.name === name).map((span) => span.attributes);
    expect(outcomes('ci_job_telemetry.job_payload')).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'enabled', 'ci.job.id': 9001, 'ci.project.id': 7, 'ci.runner.id': 17 }),
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'runner_unsupported', 'ci.job.id': 9002 }),
      ]),
    );
    expect(outcomes('ci_job_telemetry.auth')).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'allowed', 'ci_job_telemetry.credential': 'capability', 'ci.job.id': 9001 }),
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'unauthenticated', 'ci_job_telemetry.credential': 'capability' }),
      ]),
    );
    expect(outcomes('ci_job_telemetry.export')).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'exported', 'otlp.signal': 'traces', 'http.response.status_code': 200, 'ci.job.id': 9001 }),
        expect.objectContaining({ 'ci_job_telemetry.outcome': 'unauthenticated', 'http.response.status_code': 401 }),
      ]),
    );
    // Its own spans carry no credential.
    expect(JSON.stringify(spans, (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value))).not.toContain(capability);
    // And none of them went to the collector the gateway forwards to.
    expect(collector.spans().some((span) => span.name.startsWith('ci_job_telemetry.'))).toBe(false);
  });
});
