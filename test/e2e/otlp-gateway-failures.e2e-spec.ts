import { ExportResultCode } from '@opentelemetry/core';
import { request as httpRequest } from 'node:http';
import { Client } from 'undici';
import { exportSpans, gatewayTraceExporter, jobCredentials, PickedUpJob, pickUpTracedJob, recordSpans } from '../helpers/ci-job';
import { internalApiHeaders } from '../helpers/internal-api';
import type { GitLabKeys } from '../helpers/job-tokens';
import { expectMatchesOpenApi } from '../helpers/openapi';
import type { OtlpSink } from '../helpers/otlp-sink';
import type { RedisServer } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';
import { startWorld, World } from '../helpers/world';
import { rpcStatusType } from '../../src/otlp/otlp-proto';
import { recordSdkWarnings } from '../helpers/sdk-warnings';

/**
 * How the gateway fails (issue 9 items 3, 6, 7, SPEC §6): what an exporter reads when the collector,
 * the framework or the body size says no, and what that costs the job's span quota.
 */

const RpcStatus = rpcStatusType();

/** Partial-success warnings the SDK logs when the gateway reports rejected spans. */
const sdkWarnings = recordSdkWarnings();

const PROTOBUF = 'application/x-protobuf';
const JSON_TYPE = 'application/json';
const MiB = 1024 * 1024;
/** Shaped like a capability: whatever the URL holds there must never come back (SPEC §4). */
const FAKE_CAPABILITY = 'C'.repeat(32);

interface Answer {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly retryAfter: string | undefined;
  readonly requestId?: string;
  readonly body: Buffer;
}

/** A google.rpc.Status as an OTLP client decodes it: by the response's Content-Type, nothing else. */
function decodeStatus(answer: Answer): { code: number; message: string } {
  if (answer.contentType === PROTOBUF) return RpcStatus.toObject(RpcStatus.decode(answer.body)) as { code: number; message: string };
  if (answer.contentType === JSON_TYPE) return JSON.parse(answer.body.toString()) as { code: number; message: string };
  throw new Error(`not an OTLP Status: ${answer.status} ${answer.contentType} ${answer.body.toString().slice(0, 200)}`);
}

/**
 * One POST on a connection of its own with node:http, as the OTLP exporters send: the whole body, then
 * the answer. A connection reset before the answer was read resolves as `{ error }`.
 */
function post(url: string, headers: Record<string, string>, body: Buffer): Promise<Answer | { error: string }> {
  return new Promise((resolve) => {
    const request = httpRequest(url, { method: 'POST', agent: false, headers: { ...headers, 'content-length': String(body.length) } }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          contentType: response.headers['content-type'],
          retryAfter: response.headers['retry-after'] as string | undefined,
          requestId: response.headers['x-request-id'] as string | undefined,
          body: Buffer.concat(chunks),
        }),
      );
    });
    request.on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
    request.end(body);
  });
}

function jsonExport(traceId: string, names = ['raw']): Buffer {
  const spans = names.map((name, i) => ({
    traceId,
    spanId: (i + 1).toString(16).padStart(16, '0'),
    name,
    kind: 1,
    startTimeUnixNano: '1',
    endTimeUnixNano: '2',
  }));
  return Buffer.from(JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 'raw' }, spans }] }] }));
}

describe('OTLP gateway failures (issue 9, SPEC §6)', () => {
  let redis: RedisServer;
  let sink: OtlpSink;
  let keys: GitLabKeys;
  let service: ServiceProcess;
  let world: World;
  let nextJob = 9000;

  beforeAll(async () => {
    world = await startWorld({ redis: true, sink: true, gitlabKeys: true, service: { OTLP_UPSTREAM_TIMEOUT_MS: '2000', SPANS_PER_JOB: '100' } });
    ({ redis, sink, keys, service } = world);
  });
  afterAll(() => world?.stop());
  beforeEach(() => {
    sink.answerWith('ok');
    sdkWarnings.length = 0;
  });

  describe('span quota when the collector does not accept (item 3)', () => {
    it('charges a retried export once: 60 spans answered 503 and retried by the SDK, then 40 more, all delivered', async () => {
      const job = await pickUpTracedJob(service, keys, nextJob++);
      const exporter = gatewayTraceExporter('proto', service.gatewayUrl, job);
      const before = sink.spans().length;

      sink.answerNext(503);
      const first = Array.from({ length: 60 }, (_, i) => `first ${i}`);
      expect((await exportSpans(exporter, recordSpans(job.traceparent, first))).code).toBe(ExportResultCode.SUCCESS);
      const second = Array.from({ length: 40 }, (_, i) => `second ${i}`);
      expect((await exportSpans(exporter, recordSpans(job.traceparent, second))).code).toBe(ExportResultCode.SUCCESS);

      expect(
        sink
          .spans()
          .slice(before)
          .map((span) => span.name)
          .sort(),
      ).toEqual([...first, ...second].sort());
      expect(sdkWarnings.join('\n')).not.toMatch(/rejectedSpans/);
      // The quota still holds: the job has now sent all 100 of its spans.
      const over = await post(`${service.gatewayUrl}/v1/traces`, { 'content-type': JSON_TYPE, ...jobCredentials(job) }, jsonExport(job.traceId));
      expect(JSON.parse((over as Answer).body.toString())).toMatchObject({ partialSuccess: { rejectedSpans: '1' } });
    });

    it('gives back what the collector rejected through its own partial success', async () => {
      const job = await pickUpTracedJob(service, keys, nextJob++);
      const send = (names: string[]) =>
        post(`${service.gatewayUrl}/v1/traces`, { 'content-type': JSON_TYPE, ...jobCredentials(job) }, jsonExport(job.traceId, names));
      sink.answerNext({ rejectedSpans: 30, errorMessage: 'collector dropped 30' });
      await send(Array.from({ length: 50 }, (_, i) => `a${i}`));
      const rest = (await send(Array.from({ length: 80 }, (_, i) => `b${i}`))) as Answer;
      // 100 - (50 - 30) = 80 left, all accepted.
      expect(rest.status).toBe(200);
      expect(JSON.parse(rest.body.toString())).toEqual({});
    });
  });

  describe('every failure is a google.rpc.Status in the request encoding (item 6)', () => {
    const failures: Array<[string, (job: PickedUpJob, contentType: string) => Promise<Answer | { error: string }>, number]> = [
      [
        'a URL that is not valid percent-encoding',
        (job, contentType) => post(`${service.gatewayUrl}/v1/%zz`, { 'content-type': contentType, ...jobCredentials(job) }, Buffer.alloc(0)),
        400,
      ],
      [
        'a capability URL that is not valid percent-encoding',
        (_job, contentType) => post(`${service.gatewayUrl}/jobs/1/${FAKE_CAPABILITY}/v1/%zz`, { 'content-type': contentType }, Buffer.alloc(0)),
        400,
      ],
      [
        'an unknown route',
        (job, contentType) => post(`${service.gatewayUrl}/v1/spans`, { 'content-type': contentType, ...jobCredentials(job) }, Buffer.alloc(0)),
        404,
      ],
      ['no credentials', (_job, contentType) => post(`${service.gatewayUrl}/v1/traces`, { 'content-type': contentType }, Buffer.alloc(0)), 401],
      [
        'a body that is not gzip',
        (job, contentType) =>
          post(`${service.gatewayUrl}/v1/traces`, { 'content-type': contentType, 'content-encoding': 'gzip', ...jobCredentials(job) }, Buffer.from('plain')),
        400,
      ],
      [
        'a collector that is down',
        async (job, contentType) => {
          sink.answerNext(500);
          return post(
            `${service.gatewayUrl}/v1/traces`,
            { 'content-type': contentType, ...jobCredentials(job) },
            contentType === PROTOBUF ? Buffer.alloc(0) : jsonExport(job.traceId),
          );
        },
        502,
      ],
    ];

    it.each([PROTOBUF, JSON_TYPE])('answers in %s, with exactly that Content-Type', async (contentType) => {
      const job = await pickUpTracedJob(service, keys, nextJob++);
      for (const [what, send, expected] of failures) {
        if (what === 'a collector that is down' && contentType === PROTOBUF) continue; // an empty protobuf export never reaches it
        const answer = (await send(job, contentType)) as Answer;
        expect({ what, status: answer.status, contentType: answer.contentType }).toEqual({ what, status: expected, contentType });
        expect(decodeStatus(answer).code).toBeGreaterThan(0);
        expect(decodeStatus(answer).message).not.toContain('%zz');
        expect(answer.body.toString('latin1')).not.toContain(FAKE_CAPABILITY);
        if (contentType === JSON_TYPE && expected !== 404) expectMatchesOpenApi('/v1/traces', 'post', expected, answer.contentType, decodeStatus(answer));
      }
    });

    it('answers a request that arrives while it shuts down with a retryable Status and Retry-After', async () => {
      const closing = await startService({
        REDIS_URL: redis.url,
        OTLP_UPSTREAM_URL: sink.url,
        OTLP_UPSTREAM_TIMEOUT_MS: '1500',
        JOB_TOKEN_JWKS_FILE: keys.jwksFile,
      });
      const client = new Client(closing.gatewayUrl, { pipelining: 1 });
      try {
        const job = await pickUpTracedJob(closing, keys, nextJob++);
        const exportOn = async (contentType: string) => {
          const response = await client.request({
            path: '/v1/traces',
            method: 'POST',
            headers: { 'content-type': contentType, ...jobCredentials(job) },
            body: jsonExport(job.traceId),
          });
          const header = (name: string) => response.headers[name] as string | undefined;
          return {
            status: response.statusCode,
            contentType: header('content-type'),
            retryAfter: header('retry-after'),
            body: Buffer.from(await response.body.arrayBuffer()),
          };
        };
        // One export in flight on a kept-alive connection (the collector hangs) when SIGTERM comes;
        // the next export on that connection reaches a gateway that is shutting down.
        sink.answerWith('hang');
        const inFlight = exportOn(JSON_TYPE);
        await new Promise((resolve) => setTimeout(resolve, 300));
        const stopped = closing.stop();
        expect((await inFlight).status).toBe(504);
        const late = await exportOn(JSON_TYPE);
        expect(late).toMatchObject({ status: 503, contentType: JSON_TYPE });
        expect(Number(late.retryAfter)).toBeGreaterThanOrEqual(1);
        expect(decodeStatus(late)).toMatchObject({ code: 14 });
        expect(await stopped).toBe(0);
      } finally {
        await client.destroy();
        await closing.stop();
      }
    });
  });

  describe('Retry-After on collector faults (item 8)', () => {
    it("passes on the collector's own Retry-After in whole seconds, and otherwise asks for a retry within a second", async () => {
      const job = await pickUpTracedJob(service, keys, nextJob++);
      const send = async () =>
        (await post(`${service.gatewayUrl}/v1/traces`, { 'content-type': JSON_TYPE, ...jobCredentials(job) }, jsonExport(job.traceId))) as Answer;
      const inTwentySeconds = new Date(Date.now() + 20_500).toUTCString();

      sink.answerNext({ status: 503, retryAfter: '7' }, { status: 503, retryAfter: inTwentySeconds }, { status: 429, retryAfter: '30' }, 503);
      const answers = [await send(), await send(), await send(), await send()];
      expect(answers.map((answer) => [answer.status, answer.retryAfter])).toEqual([
        [503, '7'],
        [503, expect.stringMatching(/^(19|20|21)$/)],
        [429, '30'],
        [503, '1'],
      ]);

      await sink.stop();
      try {
        expect(await send()).toMatchObject({ status: 502, retryAfter: '1' });
      } finally {
        await sink.start();
      }
    });
  });

  describe('bodies over the limit (item 7)', () => {
    it('answers every body of limit + 100 B with a 413 the client reads, never a reset', async () => {
      const job = await pickUpTracedJob(service, keys, nextJob++);
      const body = Buffer.alloc(20 * MiB + 100, 1);
      const outcomes = new Map<string, number>();
      for (let attempt = 0; attempt < 20; attempt++) {
        const answer = await post(`${service.gatewayUrl}/v1/traces`, { 'content-type': PROTOBUF, ...jobCredentials(job) }, body);
        const outcome = 'error' in answer ? `reset (${answer.error})` : `${answer.status} ${answer.contentType} code ${decodeStatus(answer).code}`;
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      }
      expect(Object.fromEntries(outcomes)).toEqual({ [`413 ${PROTOBUF} code 8`]: 20 });
    });

    it.each([
      ['without credentials', 401, '/v1/traces'],
      ['to a URL Fastify cannot decode', 400, '/v1/%zz'],
    ])('drains a big export sent %s too, answered before its body, so the client reads the %i', async (_what, status, path) => {
      const body = Buffer.alloc(19 * MiB, 1);
      const outcomes = new Map<string, number>();
      for (let attempt = 0; attempt < 20; attempt++) {
        const answer = await post(`${service.gatewayUrl}${path}`, { 'content-type': PROTOBUF }, body);
        const outcome = 'error' in answer ? `reset (${answer.error})` : `${answer.status} ${answer.contentType} request id ${answer.requestId !== undefined}`;
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      }
      expect(Object.fromEntries(outcomes)).toEqual({ [`${status} ${PROTOBUF} request id true`]: 20 });
    });

    it('answers every job payload of BODY_LIMIT_BYTES + 100 B with a 413 the caller reads, and an unauthenticated one with a 401', async () => {
      const url = `${service.url}/internal/ci/telemetry/job_payload`;
      const oversize = Buffer.alloc(8 * MiB + 100, 0x20);
      const outcomes = new Map<string, number>();
      for (let attempt = 0; attempt < 40; attempt++) {
        const headers = { 'content-type': JSON_TYPE, ...(attempt % 2 === 0 ? await internalApiHeaders(service.secrets.internalApiSecret) : {}) };
        const answer = await post(url, headers, oversize);
        const readable = 'error' in answer ? false : typeof (JSON.parse(answer.body.toString()) as { error?: unknown }).error === 'string';
        const outcome = 'error' in answer ? `reset (${answer.error})` : `${answer.status}${readable ? ' with its error' : ''}`;
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      }
      expect(Object.fromEntries(outcomes)).toEqual({ '413 with its error': 20, '401 with its error': 20 });
    });
  });
});
