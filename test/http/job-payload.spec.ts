import { createHash, createSecretKey } from 'node:crypto';
import { createServer, Server, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { SignJWT } from 'jose';
import { GRANT_STORE } from '../../src/grants/grants.constants';
import { GrantStore } from '../../src/grants/grant';
import { tokenDigest } from '../../src/grants/token-digest';
import { jobPayloadRequest, JOB_TOKEN, RUNNER_TOKEN } from '../fixtures/job-payload';
import { writeFlagsFile } from '../helpers/flags-file';
import { internalApiHeaders } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { freePort } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { InProcessService, startInProcess } from '../helpers/service';
import { readTracingAsRunner } from '../../simulator/runner-tracing';

const PATH = '/internal/ci/telemetry/job_payload';

async function call(service: InProcessService, body: unknown, headers?: Record<string, string>) {
  const response = await service.app.inject({
    method: 'POST',
    url: PATH,
    headers: { 'content-type': 'application/json', ...(headers ?? (await internalApiHeaders(service.secrets.internalApiSecret))) },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const json = response.json();
  expectMatchesOpenApi(PATH, 'post', response.statusCode, response.headers['content-type'] as string, json);
  return { status: response.statusCode, body: json, headers: response.headers };
}

describe('POST /internal/ci/telemetry/job_payload', () => {
  let service: InProcessService | undefined;
  afterEach(async () => {
    await service?.close();
    service = undefined;
  });
  const running = () => service!;

  describe('internal API authentication (SPEC §3)', () => {
    beforeEach(async () => (service = await startInProcess()));

    const now = () => Math.floor(Date.now() / 1000);
    const sign = (secret: Buffer, claims: { iss?: string; iat?: number; exp?: number }) => {
      const jwt = new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setIssuedAt(claims.iat ?? now())
        .setExpirationTime(claims.exp ?? now() + 60);
      if (claims.iss !== undefined) jwt.setIssuer(claims.iss);
      return jwt.sign(createSecretKey(secret));
    };
    const header = (value: string) => ({ 'gitlab-ci-telemetry-api-request': value });
    const secret = () => running().secrets.internalApiSecret;

    it.each([
      ['missing', async () => ({})],
      ['forged with another secret', async () => header(await sign(Buffer.alloc(32, 1), { iss: 'gitlab' }))],
      ['expired', async () => header(await sign(secret(), { iss: 'gitlab', iat: now() - 30, exp: now() - 5 }))],
      ['issued more than 60 s ago', async () => header(await sign(secret(), { iss: 'gitlab', iat: now() - 120, exp: now() + 600 }))],
      ['from an issuer not in the allow-list', async () => header(await sign(secret(), { iss: 'mallory' }))],
      ['without an issuer', async () => header(await sign(secret(), {}))],
      [
        'unsigned (alg none)',
        async () =>
          header(`${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify({ iss: 'gitlab', iat: now() })).toString('base64url')}.`),
      ],
    ])('refuses a %s token with 401 and a JSON error', async (_, headers) => {
      const { status, body } = await call(running(), jobPayloadRequest(), await headers());
      expect(status).toBe(401);
      expect(body.error).toEqual(expect.any(String));
    });

    it('accepts a fresh token from an allowed issuer', async () => {
      expect((await call(running(), jobPayloadRequest())).status).toBe(200);
    });
  });

  describe('decorating (SPEC §4)', () => {
    beforeEach(async () => (service = await startInProcess()));

    it('adds features.tracing in the shape GitLab Runner reads and TRACEPARENT as a public variable', async () => {
      const request = jobPayloadRequest();
      const { status, body } = await call(running(), request);
      expect(status).toBe(200);
      const tracing = body.payload.features.tracing;
      expect(body.telemetry).toMatchObject({ enabled: true, reason: 'enabled', trace_id: tracing.trace_id, span_parent_id: tracing.span_parent_id });
      expect(tracing.traceparent).toBe(`00-${tracing.trace_id}-${tracing.span_parent_id}-03`);
      // A per-job capability URL with no auth object: a stock runner exports to it with no credentials.
      const [endpoint] = tracing.otel_endpoints;
      expect(endpoint).toEqual({ url: expect.stringMatching(/^http:\/\/localhost:4318\/jobs\/1001\/[A-Za-z0-9_-]{32}\/v1\/traces$/) });
      expect(readTracingAsRunner(body.payload.features)).toEqual({
        parent: { traceId: tracing.trace_id, spanId: tracing.span_parent_id },
        plans: [{ transport: 'otlp-http-protobuf', target: endpoint.url, credentials: { kind: 'none' } }],
        warnings: [],
      });
      expect(body.payload.variables).toContainEqual({ key: 'TRACEPARENT', value: tracing.traceparent, public: true, masked: false });
      expect(body.payload.variables).toContainEqual({
        key: 'CI_JOB_TELEMETRY_OTLP_ENDPOINT',
        value: endpoint.url.replace(/\/v1\/traces$/, ''),
        public: false,
        masked: true,
      });
      expect(body.payload.variables.some((v: { key: string }) => v.key.startsWith('OTEL_EXPORTER_'))).toBe(false);
      // Everything else in the payload is what GitLab sent.
      const { features, variables, ...rest } = body.payload;
      const { features: sentFeatures, variables: sentVariables, ...sentRest } = request.payload as Record<string, unknown>;
      expect(rest).toEqual(sentRest);
      expect(features).toEqual({ ...(sentFeatures as object), tracing });
      expect(variables.filter((v: { key: string }) => v.key !== 'TRACEPARENT' && v.key !== 'CI_JOB_TELEMETRY_OTLP_ENDPOINT')).toEqual(sentVariables);
    });

    it('gives every job its own capability, and replaces a CI_JOB_TELEMETRY_OTLP_ENDPOINT it did not write', async () => {
      const request = jobPayloadRequest();
      (request.payload.variables as unknown[]).push({ key: 'CI_JOB_TELEMETRY_OTLP_ENDPOINT', value: 'http://attacker.example', public: true });
      const first = await call(running(), request);
      const sibling = await call(running(), jobPayloadRequest({ job: { id: 1002 } }));
      const endpointVariables = (body: { payload: { variables: { key: string; value: string }[] } }) =>
        body.payload.variables.filter((v) => v.key === 'CI_JOB_TELEMETRY_OTLP_ENDPOINT');
      expect(endpointVariables(first.body)).toHaveLength(1);
      expect(endpointVariables(first.body)[0].value).toMatch(/\/jobs\/1001\/[A-Za-z0-9_-]{32}$/);
      expect(endpointVariables(sibling.body)[0].value).toMatch(/\/jobs\/1002\/[A-Za-z0-9_-]{32}$/);
      const capabilityOf = (value: string) => value.split('/').pop();
      expect(capabilityOf(endpointVariables(sibling.body)[0].value)).not.toBe(capabilityOf(endpointVariables(first.body)[0].value));
    });

    it('hands out header credentials only when configured, and never to a runner that sent no token', async () => {
      service = await startInProcess({ RUNNER_ENDPOINT_FORM: 'headers', GATEWAY_PUBLIC_URL: 'https://telemetry.example/' });
      const withToken = await call(running(), jobPayloadRequest());
      expect(withToken.body.payload.features.tracing.otel_endpoints).toEqual([
        { url: 'https://telemetry.example/v1/traces', auth: { type: 'ci_job_telemetry_tokens' } },
      ]);
      const request = jobPayloadRequest({ runner: { token: undefined } });
      const withoutToken = await call(running(), request);
      expect(withoutToken.body.telemetry).toEqual({ enabled: false, reason: 'runner_unsupported' });
      expect(withoutToken.body.payload).toEqual(request.payload);
    });

    it('uses GitLab Rails ids in the gitlab trace-id scheme', async () => {
      service = await startInProcess({ TRACE_ID_SCHEME: 'gitlab' });
      const { body } = await call(running(), jobPayloadRequest());
      const tracing = body.payload.features.tracing;
      expect(tracing.trace_id).toBe((500).toString(16).padStart(32, '0'));
      expect(tracing.span_parent_id).toBe(createHash('sha256').update('500:1001:running').digest('hex').slice(0, 16));
      expect(tracing.traceparent).toBe(`00-${tracing.trace_id}-${tracing.span_parent_id}-01`);
      expect(tracing.tracestate).toBeUndefined();
    });

    it('replaces an existing TRACEPARENT (and a stale TRACESTATE) instead of adding a second one', async () => {
      const request = jobPayloadRequest();
      (request.payload.variables as unknown[]).push(
        { key: 'TRACEPARENT', value: '00-11111111111111111111111111111111-2222222222222222-01', public: true },
        { key: 'TRACESTATE', value: 'vendor=x', public: true },
      );
      const { body } = await call(running(), request);
      const traceVariables = body.payload.variables.filter((v: { key: string }) => v.key === 'TRACEPARENT' || v.key === 'TRACESTATE');
      expect(traceVariables).toEqual([{ key: 'TRACEPARENT', value: body.telemetry.traceparent, public: true, masked: false }]);
    });

    it('creates variables and features when the payload has none', async () => {
      const { body } = await call(running(), jobPayloadRequest({ payload: { id: 1001 } }));
      expect(body.payload.variables).toHaveLength(2);
      expect(Object.keys(body.payload.features)).toEqual(['tracing']);
    });

    it('answers the same job with the same context every time, and puts all jobs of a pipeline in one trace', async () => {
      const first = await call(running(), jobPayloadRequest());
      const again = await call(running(), jobPayloadRequest());
      const sibling = await call(running(), jobPayloadRequest({ job: { id: 1002, pipeline_id: 501 } }));
      expect(again.body.payload.features.tracing).toEqual(first.body.payload.features.tracing);
      expect(sibling.body.telemetry.trace_id).toBe(first.body.telemetry.trace_id);
      expect(sibling.body.telemetry.span_parent_id).not.toBe(first.body.telemetry.span_parent_id);
    });

    it('records a grant holding token digests, expiring after the job timeout plus grace', async () => {
      const before = Date.now();
      const { body } = await call(running(), jobPayloadRequest({ job: { timeout: 600 } }));
      const grant = await running().app.get<GrantStore>(GRANT_STORE).findGrant(1001);
      expect(grant).toMatchObject({
        jobId: 1001,
        projectId: 7,
        pipelineId: 500,
        rootPipelineId: 500,
        runnerId: 17,
        traceId: body.telemetry.trace_id,
        spanParentId: body.telemetry.span_parent_id,
        runnerTokenDigest: tokenDigest(running().secrets.tokenDigestKey, RUNNER_TOKEN),
        jobTokenDigest: tokenDigest(running().secrets.tokenDigestKey, JOB_TOKEN),
      });
      const graceMs = running().config.jobPayload.grantGraceSeconds * 1000;
      expect(grant!.expiresAt).toBeGreaterThanOrEqual(before + 600_000 + graceMs);
      expect(grant!.expiresAt).toBeLessThanOrEqual(Date.now() + 600_000 + graceMs);
      expect(Date.parse(body.telemetry.expires_at)).toBe(grant!.expiresAt);
    });

    it('names each bad field in a 400 and stores nothing', async () => {
      const { status, body } = await call(running(), {
        runner: { id: 'seventeen', runner_type: 'shared' },
        job: { id: 1001, project_id: -7, pipeline_id: 500, timeout: 3600 },
        payload: { variables: 'not a list' },
      });
      expect(status).toBe(400);
      expect(body.fields.map((f: { field: string }) => f.field).sort()).toEqual(
        ['job.project_id', 'job.root_pipeline_id', 'payload.variables', 'runner.id', 'runner.runner_type'].sort(),
      );
      for (const field of body.fields) expect(body.error).toContain(field.field);
      expect(await running().app.get<GrantStore>(GRANT_STORE).findGrant(1001)).toBeNull();
    });

    it('refuses a payload nested 5,000 levels deep (10 KB) with a 400 naming the limit, storing nothing', async () => {
      const nested = '['.repeat(5000) + ']'.repeat(5000);
      const body = JSON.stringify(jobPayloadRequest({ job: { id: 1050 } })).replace('"allow_git_fetch":true', `"allow_git_fetch":${nested}`);
      const answer = await call(running(), body);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatch(/nested deeper than 64 levels/);
      expect(await running().app.get<GrantStore>(GRANT_STORE).findGrant(1050)).toBeNull();
    });

    it('decorates a payload as deep as the limit, and one whose strings hold any number of brackets', async () => {
      // 64 levels in all: the request object and `payload` are two of them.
      let deep: unknown = 'bottom';
      for (let level = 0; level < 62; level++) deep = [deep];
      const limit = await call(running(), jobPayloadRequest({ payload: { id: 1051, image: deep } }));
      expect(limit.status).toBe(200);
      expect(limit.body.payload.image).toEqual(deep);
      const script = '{['.repeat(5000) + '\\"[';
      const brackets = await call(running(), jobPayloadRequest({ payload: { id: 1052, steps: [{ name: 'script', script: [script] }] } }));
      expect(brackets.status).toBe(200);
      expect(brackets.body.payload.steps[0].script[0]).toBe(script);
    });

    it('answers 400 for a body that is not JSON, and for a missing payload', async () => {
      expect((await call(running(), '{"runner": ')).status).toBe(400);
      const { payload: _, ...withoutPayload } = jobPayloadRequest();
      const { status, body } = await call(running(), withoutPayload);
      expect(status).toBe(400);
      expect(body.error).toContain('payload');
    });

    it('refuses a body with a __proto__ key, escaped or not, and decorates one whose scripts only mention it', async () => {
      for (const key of ['__proto__', '\\u005f_proto__']) {
        const body = JSON.stringify(jobPayloadRequest({ job: { id: 1053 } })).replace('"allow_git_fetch":true', `"allow_git_fetch":{"${key}":{"x":1}}`);
        expect((await call(running(), body)).status).toBe(400);
      }
      expect(await running().app.get<GrantStore>(GRANT_STORE).findGrant(1053)).toBeNull();
      const script = ['echo "__proto__": constructor'];
      const mentions = await call(running(), jobPayloadRequest({ payload: { id: 1054, steps: [{ name: 'script', script }] } }));
      expect(mentions.status).toBe(200);
      expect(mentions.body.payload.steps[0].script).toEqual(script);
    });

    it('echoes the caller request id and puts it in the error body', async () => {
      const response = await running().app.inject({ method: 'POST', url: PATH, headers: { 'x-request-id': 'gitlab-corr-123' }, payload: {} });
      expect(response.headers['x-request-id']).toBe('gitlab-corr-123');
      expect(response.json().request_id).toBe('gitlab-corr-123');
    });

    it('never writes a token to the logs', async () => {
      const headers = await internalApiHeaders(running().secrets.internalApiSecret);
      await call(running(), jobPayloadRequest(), headers);
      await call(running(), { ...jobPayloadRequest(), runner: { id: 'bad', token: RUNNER_TOKEN } }, headers);
      const logs = running().logs.text();
      expect(logs).toContain('request completed');
      for (const secret of [RUNNER_TOKEN, JOB_TOKEN, headers['gitlab-ci-telemetry-api-request']]) expect(logs).not.toContain(secret);
    });
  });

  describe('answering with the changes (Prefer: return=minimal)', () => {
    const MINIMAL = { prefer: 'return=minimal' };
    const withHeaders = async (extra: Record<string, string>) => ({ ...(await internalApiHeaders(running().secrets.internalApiSecret)), ...extra });
    type Variable = { key: string };
    type Changes = { variables?: { remove: string[]; append: Variable[] }; features?: Record<string, unknown> };
    /** The changes applied as the OpenAPI document describes them, independently of the service's own code. */
    const applied = (payload: Record<string, unknown>, changes: Changes) => {
      if (changes.variables === undefined) return payload;
      const remove = new Set(changes.variables.remove);
      const kept = ((payload.variables as Variable[] | undefined) ?? []).filter((variable) => !remove.has(variable.key));
      return { ...payload, variables: [...kept, ...changes.variables.append], features: { ...(payload.features as object), ...changes.features } };
    };

    it('gives, applied to the payload the caller holds, exactly the payload the whole answer carries', async () => {
      service = await startInProcess({ FLAGS_FILE: writeFlagsFile({ constraints: [{ contextName: 'projectId', operator: 'IN', values: ['7'] }] }) });
      const stale = [
        { key: 'TRACEPARENT', value: '00-11111111111111111111111111111111-2222222222222222-01', public: true },
        { key: 'CI_JOB_ID', value: '1', public: true, masked: false },
        { key: 'TRACESTATE', value: 'vendor=x', public: true },
        { key: 'CI_JOB_TELEMETRY_OTLP_ENDPOINT', value: 'http://attacker.example', public: true },
      ];
      const payloads: Record<string, unknown>[] = [
        jobPayloadRequest().payload,
        { id: 1001 },
        { id: 1001, variables: stale, features: { trace_sections: true } },
      ];
      for (const [index, payload] of payloads.entries()) {
        for (const job of [{ id: 1100 + index }, { id: 1200 + index, project_id: 8 }]) {
          const whole = await call(running(), jobPayloadRequest({ job, payload }));
          expect(whole.status).toBe(200);
          const { payload: _, ...withoutPayload } = jobPayloadRequest({ job });
          const minimal = await call(running(), withoutPayload, await withHeaders(MINIMAL));
          expect(minimal.status).toBe(200);
          expect(minimal.headers['preference-applied']).toBe('return=minimal');
          expect(minimal.body).not.toHaveProperty('payload');
          expect(minimal.body.job_id).toBe(job.id);
          expect(minimal.body.telemetry).toEqual(whole.body.telemetry);
          expect(applied(payload, minimal.body.changes)).toEqual(whole.body.payload);
          if (job.project_id === 8) expect(minimal.body.changes).toEqual({});
        }
      }
    });

    it('reads the preference among others, and answers with the payload to any other', async () => {
      service = await startInProcess();
      const { payload: _, ...withoutPayload } = jobPayloadRequest();
      const among = await call(running(), withoutPayload, await withHeaders({ prefer: 'respond-async, RETURN="minimal"; x=1' }));
      expect(among.body.changes.features.tracing.traceparent).toBe(among.body.telemetry.traceparent);
      const representation = await call(running(), jobPayloadRequest(), await withHeaders({ prefer: 'return=representation' }));
      expect(representation.headers['preference-applied']).toBeUndefined();
      expect(representation.body.payload.features.tracing.traceparent).toBe(representation.body.telemetry.traceparent);
      const missing = await call(running(), withoutPayload, await withHeaders({ prefer: 'return=representation' }));
      expect(missing.status).toBe(400);
      expect(missing.body.fields).toEqual([{ field: 'payload', problems: ['payload is required'] }]);
    });

    it('still checks a payload sent with it, and stores the same grant as the whole answer would', async () => {
      service = await startInProcess();
      const bad = await call(running(), jobPayloadRequest({ payload: { variables: 'x' } }), await withHeaders(MINIMAL));
      expect(bad.status).toBe(400);
      expect(bad.body.fields.map((field: { field: string }) => field.field)).toEqual(['payload.variables']);
      const { payload: _, ...withoutPayload } = jobPayloadRequest({ job: { id: 1301 } });
      const minimal = await call(running(), withoutPayload, await withHeaders(MINIMAL));
      const grant = await running().app.get<GrantStore>(GRANT_STORE).findGrant(1301);
      expect(grant).toMatchObject({ jobId: 1301, traceId: minimal.body.telemetry.trace_id, spanParentId: minimal.body.telemetry.span_parent_id });
      expect(grant?.jobTokenDigest).toBe(tokenDigest(running().secrets.tokenDigestKey, JOB_TOKEN));
    });
  });

  describe('negotiation with the runner', () => {
    it.each([
      ['tracing: false', 'runner_unsupported', { tracing: false }],
      ['legacy job_telemetry: false', 'runner_unsupported', { job_telemetry: false }],
      ['nothing (eligible by default)', 'enabled', {}],
      ['tracing: true', 'enabled', { tracing: true }],
    ])('a runner advertising %s gets %s', async (_, reason, features) => {
      service = await startInProcess();
      const request = jobPayloadRequest({ runner: { features } });
      const { body } = await call(running(), request);
      expect(body.telemetry.reason).toBe(reason);
      if (reason !== 'enabled') expect(body.payload).toEqual(request.payload);
    });

    it('treats silent runners as unsupported when configured so', async () => {
      service = await startInProcess({ UNADVERTISED_RUNNERS_ELIGIBLE: 'false' });
      const request = jobPayloadRequest({ runner: { features: undefined } });
      const { body } = await call(running(), request);
      expect(body.telemetry).toEqual({ enabled: false, reason: 'runner_unsupported' });
      expect(body.payload).toEqual(request.payload);
    });

    it('sends hosted runners to the collector with GCP OIDC, everyone else to the gateway', async () => {
      service = await startInProcess({
        HOSTED_RUNNER_TYPES: 'instance_type',
        HOSTED_RUNNER_IDS: '99',
        COLLECTOR_PUBLIC_URL: 'https://otel-collector.example:4318',
        GATEWAY_PUBLIC_URL: 'https://telemetry.example',
        HOSTED_OIDC_AUDIENCE: 'ci-telemetry-aud',
      });
      const hosted = {
        url: 'https://otel-collector.example:4318/v1/traces',
        auth: { type: 'http_bearer_gcp_oidc', http_bearer_gcp_oidc: { audience: 'ci-telemetry-aud' } },
      };
      const byType = await call(running(), jobPayloadRequest({ runner: { runner_type: 'instance_type' } }));
      const byId = await call(running(), jobPayloadRequest({ runner: { id: 99 } }));
      const selfManaged = await call(running(), jobPayloadRequest());
      expect(byType.body.payload.features.tracing.otel_endpoints).toEqual([hosted]);
      expect(byId.body.payload.features.tracing.otel_endpoints).toEqual([hosted]);
      // The runner keeps the hosted endpoint (it does not skip it) and asks Google for a token for the audience.
      expect(readTracingAsRunner(byType.body.payload.features).plans).toEqual([
        { transport: 'otlp-http-protobuf', target: hosted.url, credentials: { kind: 'gcp_oidc', audience: 'ci-telemetry-aud' } },
      ]);
      expect(selfManaged.body.payload.features.tracing.otel_endpoints).toEqual([
        { url: expect.stringMatching(/^https:\/\/telemetry\.example\/jobs\/1001\/[A-Za-z0-9_-]{32}\/v1\/traces$/) },
      ]);
    });
  });

  describe('flags', () => {
    it('returns the payload untouched for a project the flag does not enable', async () => {
      service = await startInProcess({ FLAGS_FILE: writeFlagsFile({ constraints: [{ contextName: 'projectId', operator: 'IN', values: ['8'] }] }) });
      const request = jobPayloadRequest();
      const { body } = await call(running(), request);
      expect(body).toEqual({ payload: request.payload, telemetry: { enabled: false, reason: 'flag_disabled' } });
      expect((await call(running(), jobPayloadRequest({ job: { project_id: 8 } }))).body.telemetry.reason).toBe('enabled');
    });

    it('samples whole pipelines and writes the ot=th threshold for those it keeps', async () => {
      service = await startInProcess({ FLAGS_FILE: writeFlagsFile({ sampling: 25 }) });
      const outcomes = new Map<number, Set<string>>();
      let jobId = 1;
      for (let pipeline = 1; pipeline <= 120; pipeline++) {
        for (let job = 0; job < 3; job++) {
          const { body } = await call(running(), jobPayloadRequest({ job: { id: jobId++, pipeline_id: pipeline * 10 + job, root_pipeline_id: pipeline } }));
          outcomes.set(pipeline, (outcomes.get(pipeline) ?? new Set()).add(body.telemetry.reason));
          if (body.telemetry.enabled) expect(body.telemetry.tracestate).toBe('ot=th:c');
          else expect(body.payload).not.toHaveProperty('features.tracing');
        }
      }
      for (const reasons of outcomes.values()) expect(reasons.size).toBe(1);
      const sampled = [...outcomes.values()].filter((reasons) => reasons.has('enabled')).length;
      expect(sampled).toBeGreaterThan(10);
      expect(sampled).toBeLessThan(60);
    });
  });

  describe('on a real Redis', () => {
    let redis: RedisServer;
    beforeEach(async () => {
      redis = await startRedis();
      service = await startInProcess({ REDIS_URL: redis.url, STORE_TIMEOUT_MS: '150' });
    });
    afterEach(() => redis.stop());

    it('stores the grant in Redis without any raw token', async () => {
      const { body } = await call(running(), jobPayloadRequest());
      expect(body.telemetry.enabled).toBe(true);
      const client = new Redis(redis.url);
      try {
        const stored = (await client.get('cjt:{job:1001}:grant'))!;
        expect(JSON.parse(stored).traceId).toBe(body.telemetry.trace_id);
        expect(await client.pttl('cjt:{job:1001}:grant')).toBeGreaterThan(3600_000);
        // Every key and value the decorator wrote (the grant, the traced job, the outbox's queue-wait span): digests only, never a raw token.
        const keys = await client.keys('*');
        const valueOf = async (key: string) => {
          const type = await client.type(key);
          if (type === 'hash') return JSON.stringify(await client.hgetall(key));
          if (type === 'zset') return (await client.zrange(key, 0, -1)).join(',');
          return client.get(key);
        };
        const everything = keys.join('\n') + (await Promise.all(keys.map(valueOf))).join('\n');
        for (const token of [RUNNER_TOKEN, JOB_TOKEN]) expect(everything).not.toContain(token);
      } finally {
        client.disconnect();
      }
    });

    it('indexes an opaque job token for the auth lookup, and writes no index for a JWT job token, which names its job', async () => {
      const jwtToken = 'glcbt-eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJnaWQ6Ly9naXRsYWIvQ2k6OkJ1aWxkLzEwMDIifQ.c2lnbmF0dXJl';
      expect((await call(running(), jobPayloadRequest({ job: { id: 1001, token: JOB_TOKEN } }))).body.telemetry.enabled).toBe(true);
      expect((await call(running(), jobPayloadRequest({ job: { id: 1002, token: jwtToken } }))).body.telemetry.enabled).toBe(true);
      const client = new Redis(redis.url);
      try {
        expect(await client.keys('cjt:{jobtoken:*')).toEqual([`cjt:{jobtoken:${tokenDigest(running().secrets.tokenDigestKey, JOB_TOKEN)}}`]);
        // Both grants keep both digests (SPEC §4); only the lookup index is left out.
        const jwtGrant = JSON.parse((await client.get('cjt:{job:1002}:grant'))!) as { jobTokenDigest?: string };
        expect(jwtGrant.jobTokenDigest).toBe(tokenDigest(running().secrets.tokenDigestKey, jwtToken));
      } finally {
        client.disconnect();
      }
    });

    it('still answers 200 with Redis stopped: degraded, payload unchanged', async () => {
      await redis.stop();
      const request = jobPayloadRequest();
      const { status, body } = await call(running(), request);
      expect(status).toBe(200);
      expect(body).toEqual({ payload: request.payload, telemetry: { enabled: false, reason: 'degraded' } });
    });

    it('takes back a grant whose write landed after the pickup gave up on it: a job answered degraded is not traced', async () => {
      // Redis paused (as a slow primary is): the write waits in the connection, the pickup answers at STORE_TIMEOUT_MS.
      await running().close();
      service = await startInProcess({ REDIS_URL: redis.url, STORE_TIMEOUT_MS: '150', REDIS_COMMAND_TIMEOUT_MS: '10000' });
      const paused = redis.pid!;
      process.kill(paused, 'SIGSTOP');
      let body: { telemetry: { reason: string } };
      try {
        ({ body } = await call(running(), jobPayloadRequest({ job: { id: 4242 } })));
      } finally {
        process.kill(paused, 'SIGCONT');
      }
      expect(body.telemetry.reason).toBe('degraded');
      const client = new Redis(redis.url);
      try {
        // The grant's script ran when Redis came back, then its withdrawal: neither the grant nor the traced job stays,
        // so no hook later tells of the job as traced (SPEC §10) and no credential exists for it.
        await client.ping();
        await sleep(500);
        expect(await client.exists('cjt:{job:4242}:grant', 'cjt:{job:4242}:traced')).toBe(0);
        // The next pickup of the job, with the store answering, is traced as usual.
        expect((await call(running(), jobPayloadRequest({ job: { id: 4242 } }))).body.telemetry.reason).toBe('enabled');
        expect(await client.exists('cjt:{job:4242}:grant', 'cjt:{job:4242}:traced')).toBe(2);
      } finally {
        client.disconnect();
      }
    });

    it('keeps hosted runners enabled with Redis stopped: they never need the grant', async () => {
      await running().close();
      service = await startInProcess({ REDIS_URL: redis.url, HOSTED_RUNNER_TYPES: 'instance_type' });
      await redis.stop();
      const { body } = await call(running(), jobPayloadRequest({ runner: { runner_type: 'instance_type' } }));
      expect(body.telemetry.reason).toBe('enabled');
    });
  });

  describe('with a store that accepts connections and never answers', () => {
    let blackhole: Server;
    const sockets = new Set<Socket>();
    afterEach(async () => {
      await running().close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => blackhole.close(resolve));
    });

    it('gives up after STORE_TIMEOUT_MS and answers degraded', async () => {
      const port = await freePort();
      blackhole = createServer((socket) => sockets.add(socket)).listen(port, '127.0.0.1');
      // Redis commands may wait far longer than the pickup does: the decorator's wait is its own.
      service = await startInProcess({ REDIS_URL: `redis://127.0.0.1:${port}`, STORE_TIMEOUT_MS: '100', REDIS_COMMAND_TIMEOUT_MS: '10000' });
      const { status, body } = await call(running(), jobPayloadRequest());
      expect(status).toBe(200);
      expect(body.telemetry.reason).toBe('degraded');
      // Counted where an operator watches the control plane's own failures (cicd.system.errors), not a pipeline's.
      const metrics = (await running().app.inject({ method: 'GET', url: '/metrics' })).body;
      expect(metrics).toContain('cicd_system_errors_total{cicd_system_component="job_payload",error_type="store_failure"} 1\n');
    });
  });

  it('refuses a body over the configured limit with 413', async () => {
    service = await startInProcess({ BODY_LIMIT_BYTES: '4096' });
    const request = jobPayloadRequest({ payload: { id: 1, script: 'x'.repeat(8192) } });
    const { status, body } = await call(running(), request);
    expect(status).toBe(413);
    expect(body.error).toEqual(expect.any(String));
  });
});
