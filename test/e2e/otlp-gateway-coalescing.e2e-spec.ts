import { diag, DiagLogLevel } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { exportSpans, gatewayTraceExporter, jobCredentials, PickedUpJob, pickUpTracedJob, recordSpans } from '../helpers/ci-job';
import type { GitLabKeys } from '../helpers/job-tokens';
import type { OtlpSink } from '../helpers/otlp-sink';
import { metric, ServiceProcess } from '../helpers/service';
import { startWorld, World } from '../helpers/world';
import { exportRequestType, exportResponseType } from '../../src/otlp/otlp-proto';

/**
 * Issue 29's robustness cases: exports joined into one upstream request (src/collector/coalescing-collector-client.ts)
 * are each answered from the collector's answer to that request, lose nothing when the collector dies under
 * them, and keep each job's span quota its own. A first export the sink leaves unanswered keeps a request
 * in flight, so the exports after it wait together for the linger (a second here) and leave as one request.
 */

diag.setLogger({ error: () => undefined, warn: () => undefined, info: () => undefined, debug: () => undefined, verbose: () => undefined }, DiagLogLevel.NONE);

const LINGER_MS = 1000;
const SPANS_PER_JOB = 50;
const TraceRequest = exportRequestType('traces');
const TraceResponse = exportResponseType('traces');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * An ExportTraceServiceRequest of `names`, children of the job's span, as a runner-side SDK encodes one; a span
 * named in `shortIds` gets a 7-byte span id, which the Collector cannot decode.
 */
function protobufExport(job: PickedUpJob, names: string[], shortIds: string[] = []): Buffer {
  const parentSpanId = Buffer.from(job.traceparent.split('-')[2], 'hex');
  const now = BigInt(Date.now()) * 1_000_000n;
  const spans = names.map((name) => ({
    traceId: Buffer.from(job.traceId, 'hex'),
    spanId: randomBytes(shortIds.includes(name) ? 7 : 8),
    parentSpanId,
    name,
    kind: 1,
    startTimeUnixNano: String(now),
    endTimeUnixNano: String(now + 1000n),
  }));
  const message = TraceRequest.fromObject({
    resourceSpans: [
      { resource: { attributes: [{ key: 'service.name', value: { stringValue: 'rspec' } }] }, scopeSpans: [{ scope: { name: 'ci-job' }, spans }] },
    ],
  });
  return Buffer.from(TraceRequest.encode(message).finish());
}

interface Posted {
  readonly status: number;
  readonly rejectedSpans: number;
}

/** One protobuf export on a connection of its own; `goneAfterMs` closes the connection that long after the body went. */
function post(gatewayUrl: string, job: PickedUpJob, body: Buffer, goneAfterMs?: number): Promise<Posted | 'gone'> {
  return new Promise((resolve) => {
    const request = httpRequest(`${gatewayUrl}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-protobuf', ...jobCredentials(job) },
      agent: false,
    });
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        const body = Buffer.concat(chunks);
        const decoded =
          response.statusCode === 200
            ? (TraceResponse.toObject(TraceResponse.decode(body), { longs: Number }) as { partialSuccess?: { rejectedSpans?: number } })
            : {};
        resolve({ status: response.statusCode!, rejectedSpans: decoded.partialSuccess?.rejectedSpans ?? 0 });
      });
    });
    request.on('error', () => resolve('gone'));
    request.end(body, () => {
      if (goneAfterMs !== undefined) setTimeout(() => request.destroy(), goneAfterMs);
    });
  });
}

describe('coalesced upstream requests under faults (issue 29)', () => {
  let sink: OtlpSink;
  let keys: GitLabKeys;
  let service: ServiceProcess;
  let world: World;
  let nextJob = 29_000;

  /** Requests the gateway sent upstream, and exports they carried, from its own metrics. */
  const upstream = async () => ({
    requests: await metric(service, 'ci_job_telemetry_collector_request_exports_count'),
    exports: await metric(service, 'ci_job_telemetry_collector_request_exports_sum'),
  });
  const requestsReach = async (count: number) => {
    while ((await upstream()).requests < count) await sleep(20);
  };
  /** Exports that shared a request with another: what coalescing saved (the outbox's own deliveries go alone). */
  const joined = async () => {
    const { requests, exports } = await upstream();
    return exports - requests;
  };
  /** Starts an export the sink leaves unanswered, so the next exports gather in one batch; it ends as a 504. */
  const holdUpstream = async () => {
    const before = (await upstream()).requests;
    sink.answerNext('hang');
    const holder = await pickUpTracedJob(service, keys, nextJob++);
    const held = post(service.gatewayUrl, holder, protobufExport(holder, ['held']));
    await requestsReach(before + 1);
    return { held };
  };

  beforeAll(async () => {
    world = await startWorld({
      redis: true,
      sink: true,
      gitlabKeys: true,
      service: { OTLP_UPSTREAM_LINGER_MS: String(LINGER_MS), OTLP_UPSTREAM_TIMEOUT_MS: '3000', SPANS_PER_JOB: String(SPANS_PER_JOB) },
    });
    ({ sink, keys, service } = world);
  });
  afterAll(() => world?.stop());
  afterEach(() => {
    sink.answerWith('ok');
    sink.refuseWhen(undefined);
  });

  it('delivers the good exports of a batch the collector refuses whole, and answers only the export it refuses alone with 400', async () => {
    // A collector that refuses a whole request for one export in it, for a rule the gateway does not know.
    sink.refuseWhen((received) => received.spans.some((span) => span.name === 'refused by the collector'));
    const { held } = await holdUpstream();
    const splitsBefore = await metric(service, 'ci_job_telemetry_collector_split_requests_total');
    const [good, bad, alsoGood] = await Promise.all([0, 1, 2].map(() => pickUpTracedJob(service, keys, nextJob++)));
    const answers = await Promise.all([
      post(service.gatewayUrl, good, protobufExport(good, ['good 1', 'good 2'])),
      post(service.gatewayUrl, bad, protobufExport(bad, ['fine', 'refused by the collector'])),
      post(service.gatewayUrl, alsoGood, protobufExport(alsoGood, ['also good'])),
    ]);
    await held;

    expect(answers).toEqual([
      { status: 200, rejectedSpans: 0 },
      { status: 400, rejectedSpans: 0 },
      { status: 200, rejectedSpans: 0 },
    ]);
    const delivered = (job: PickedUpJob) =>
      sink
        .spans()
        .filter((span) => span.traceId === job.traceId)
        .map((span) => span.name);
    expect([delivered(good).sort(), delivered(bad), delivered(alsoGood)]).toEqual([['good 1', 'good 2'], [], ['also good']]);
    expect((await metric(service, 'ci_job_telemetry_collector_split_requests_total')) - splitsBefore).toBe(1);
  });

  it('rejects a span the collector could not decode through partial success, so the exports joined to it are delivered', async () => {
    // The Collector refuses a request holding a span id that is not 8 bytes: so does this one.
    sink.refuseWhen((received) => received.spans.some((span) => span.spanId.length !== 16));
    const { held } = await holdUpstream();
    const joinedBefore = await joined();
    const [good, bad] = await Promise.all([0, 1].map(() => pickUpTracedJob(service, keys, nextJob++)));
    const answers = await Promise.all([
      post(service.gatewayUrl, good, protobufExport(good, ['good'])),
      post(service.gatewayUrl, bad, protobufExport(bad, ['fine', 'short id'], ['short id'])),
    ]);
    await held;

    expect(answers).toEqual([
      { status: 200, rejectedSpans: 0 },
      { status: 200, rejectedSpans: 1 },
    ]);
    const delivered = (job: PickedUpJob) =>
      sink
        .spans()
        .filter((span) => span.traceId === job.traceId)
        .map((span) => span.name);
    expect([delivered(good), delivered(bad)]).toEqual([['good'], ['fine']]);
    // Joined, and accepted as one request: the gateway kept the bad span out of it.
    expect((await joined()) - joinedBefore).toBe(1);
  });

  it("answers only the over-quota export of a batch with rejected spans; the others' are all delivered", async () => {
    const { held } = await holdUpstream();
    const joinedBefore = await joined();
    const [a, over, c] = await Promise.all([0, 1, 2].map(() => pickUpTracedJob(service, keys, nextJob++)));
    const names = (job: PickedUpJob, count: number) => Array.from({ length: count }, (_, i) => `${job.jobId} span ${i}`);
    const answers = await Promise.all([
      post(service.gatewayUrl, a, protobufExport(a, names(a, 30))),
      post(service.gatewayUrl, over, protobufExport(over, names(over, SPANS_PER_JOB + 30))),
      post(service.gatewayUrl, c, protobufExport(c, names(c, 30))),
    ]);
    await held;

    expect(answers).toEqual([
      { status: 200, rejectedSpans: 0 },
      { status: 200, rejectedSpans: 30 },
      { status: 200, rejectedSpans: 0 },
    ]);
    const delivered = (job: PickedUpJob) => sink.spans().filter((span) => span.traceId === job.traceId).length;
    expect([delivered(a), delivered(over), delivered(c)]).toEqual([30, SPANS_PER_JOB, 30]);
    // The three went up as one request: two requests saved.
    expect((await joined()) - joinedBefore).toBe(2);
  });

  it('loses no span and acknowledges none the collector did not take when it is killed under a batch', async () => {
    const { held } = await holdUpstream();
    sink.answerWith('hang');
    const jobs = await Promise.all([0, 1, 2, 3].map(() => pickUpTracedJob(service, keys, nextJob++)));
    const sent = jobs.map((job) =>
      recordSpans(
        job.traceparent,
        Array.from({ length: 20 }, (_, i) => `${job.jobId} step ${i}`),
      ),
    );
    const joinedBefore = await joined();
    // Real SDK exporters at their defaults: they retry what the gateway answers retryable.
    const results = jobs.map((job, i) => exportSpans(gatewayTraceExporter('proto', service.gatewayUrl, job), sent[i]));
    // The batch has left and hangs in the collector: it dies, and comes back a moment later.
    while ((await joined()) < joinedBefore + jobs.length - 1) await sleep(20);
    await sink.stop();
    await held;
    sink.answerWith('ok');
    await sleep(300);
    await sink.start();

    expect((await Promise.all(results)).map((result) => result.code)).toEqual(jobs.map(() => ExportResultCode.SUCCESS));
    const received = new Set(sink.spans().map((span) => span.spanId));
    for (const spans of sent) expect(spans.filter((span) => !received.has(span.spanContext().spanId))).toEqual([]);
  }, 30_000);

  it("sends an export whose client left while it waited in a batch, charges its job for it, and answers the batch's other exports", async () => {
    const { held } = await holdUpstream();
    const [gone, stays] = await Promise.all([0, 1].map(() => pickUpTracedJob(service, keys, nextJob++)));
    const goneNames = Array.from({ length: 30 }, (_, i) => `gone ${i}`);
    const [goneAnswer, staysAnswer] = await Promise.all([
      post(service.gatewayUrl, gone, protobufExport(gone, goneNames), LINGER_MS / 4),
      exportSpans(gatewayTraceExporter('proto', service.gatewayUrl, stays), recordSpans(stays.traceparent, ['stays'])),
    ]);
    await held;

    expect(goneAnswer).toBe('gone');
    expect(staysAnswer.code).toBe(ExportResultCode.SUCCESS);
    // The collector accepted what the gone client sent: it is delivered, and the job's quota paid for it.
    await sleep(LINGER_MS);
    expect(
      sink
        .spans()
        .filter((span) => span.traceId === gone.traceId)
        .map((span) => span.name)
        .sort(),
    ).toEqual([...goneNames].sort());
    expect(sink.spans().filter((span) => span.traceId === stays.traceId)).toHaveLength(1);
    const after = await post(
      service.gatewayUrl,
      gone,
      protobufExport(
        gone,
        Array.from({ length: 30 }, (_, i) => `after ${i}`),
      ),
    );
    expect(after).toEqual({ status: 200, rejectedSpans: 30 - (SPANS_PER_JOB - goneNames.length) });
  });

  it("refunds the job of an export whose client left when the batch's request was not accepted", async () => {
    const { held } = await holdUpstream();
    sink.answerNext(503);
    const gone = await pickUpTracedJob(service, keys, nextJob++);
    expect(
      await post(
        service.gatewayUrl,
        gone,
        protobufExport(
          gone,
          Array.from({ length: 30 }, (_, i) => `gone ${i}`),
        ),
        LINGER_MS / 4,
      ),
    ).toBe('gone');
    await held;
    await sleep(LINGER_MS);
    expect(sink.spans().filter((span) => span.traceId === gone.traceId)).toEqual([]);
    // Nothing of it was accepted, so the job still has its whole quota.
    const again = await post(
      service.gatewayUrl,
      gone,
      protobufExport(
        gone,
        Array.from({ length: SPANS_PER_JOB }, (_, i) => `again ${i}`),
      ),
    );
    expect(again).toEqual({ status: 200, rejectedSpans: 0 });
  });
});
