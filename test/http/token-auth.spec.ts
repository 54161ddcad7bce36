import { createSecretKey } from 'node:crypto';
import { readFileSync, renameSync } from 'node:fs';
import { createServer } from 'node:http';
import { AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import { MetricsService } from '../../src/observability/metrics.service';
import { callerKeyDigest, generateCallerKey } from '../../src/internal-api/caller-keys';
import { jobPayloadRequest, JOB_TOKEN, RUNNER_TOKEN } from '../fixtures/job-payload';
import { writeFlagsFile } from '../helpers/flags-file';
import { internalApiHeaders } from '../helpers/internal-api';
import { GitLabKeys, makeGitLabKeys } from '../helpers/job-tokens';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { RedisServer, startRedis } from '../helpers/redis';
import { InProcessService, startInProcess } from '../helpers/service';

const AUTH = '/internal/ci/telemetry/auth';
const PICKUP = '/internal/ci/telemetry/job_payload';
const OTHER_RUNNER_TOKEN = 'glrt-another-runners-token-987654';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are checked against openapi.yaml
type Json = any;

interface Answer {
  readonly status: number;
  readonly body: Json;
  readonly raw: string;
  readonly headers: Record<string, string | string[] | number | undefined>;
}

describe('POST /internal/ci/telemetry/auth (SPEC §5)', () => {
  let redis: RedisServer;
  let keys: GitLabKeys;
  let service: InProcessService;
  const callerKey = generateCallerKey();
  /** Every body the endpoint answered, scanned for tokens at the end. */
  const answered: string[] = [];

  const start = (env: Record<string, string> = {}) =>
    startInProcess({
      REDIS_URL: redis.url,
      JOB_TOKEN_JWKS_FILE: keys.jwksFile,
      AUTH_CALLER_KEY_DIGESTS: callerKeyDigest(callerKey),
      ...env,
    });

  async function request(target: InProcessService, method: 'POST' | 'DELETE', url: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
    const response = await target.app.inject({ method, url, headers, payload: body === undefined ? undefined : JSON.stringify(body) });
    answered.push(response.body);
    const template = url.startsWith('/internal/ci/telemetry/grants/') ? '/internal/ci/telemetry/grants/{job_id}' : url;
    expectMatchesOpenApi(template, method, response.statusCode, response.headers['content-type'] as string, response.json());
    return { status: response.statusCode, body: response.json(), raw: response.body, headers: response.headers };
  }

  async function pickUp(target: InProcessService, overrides: Parameters<typeof jobPayloadRequest>[0] = {}) {
    const headers = { 'content-type': 'application/json', ...(await internalApiHeaders(target.secrets.internalApiSecret)) };
    return request(target, 'POST', PICKUP, headers, jobPayloadRequest(overrides));
  }

  async function auth(jobToken: string | undefined, runnerToken: string | undefined, target = service): Promise<Answer> {
    const headers: Record<string, string> = await internalApiHeaders(target.secrets.internalApiSecret);
    if (jobToken !== undefined) headers.authorization = `Bearer ${jobToken}`;
    if (runnerToken !== undefined) headers['runner-token'] = runnerToken;
    return request(target, 'POST', AUTH, headers);
  }

  beforeAll(async () => {
    redis = await startRedis();
    keys = await makeGitLabKeys();
  });
  afterAll(() => redis.stop());
  beforeEach(async () => {
    await redis.flush();
    service = await start();
  });
  afterEach(() => service.close());

  describe('access log', () => {
    const completed = (target: InProcessService, route: string) =>
      target.logs.lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'request completed' && line.route === route);

    it('logs answers to nginx at most once per EXPORT_SUCCESS_LOG_INTERVAL_MS, saying how many went unlogged, and every refusal', async () => {
      const sampled = await start({ EXPORT_SUCCESS_LOG_INTERVAL_MS: '60000' });
      try {
        await pickUp(sampled, { job: { id: 3101, token: await keys.sign(3101) } });
        await pickUp(sampled, { job: { id: 3102, token: await keys.sign(3102) } });
        for (let i = 0; i < 4; i++) expect((await auth(await keys.sign(3101), RUNNER_TOKEN, sampled)).status).toBe(200);
        expect((await auth(await keys.sign(3101), OTHER_RUNNER_TOKEN, sampled)).status).toBe(401);
        expect((await auth(await keys.sign(3101), RUNNER_TOKEN, sampled)).status).toBe(200);

        const authLines = completed(sampled, AUTH);
        expect(authLines.filter((line) => line.status === 200)).toHaveLength(1);
        expect(authLines.filter((line) => line.status === 401)).toHaveLength(1);
        // Successful pickups are sampled too (each counted by reason in the metrics), on their own interval: the
        // pickups did not take the auth endpoint's line above.
        expect(completed(sampled, PICKUP)).toHaveLength(1);
      } finally {
        await sampled.close();
      }
    });

    it('logs every answer when the interval is 0', async () => {
      const everyOne = await start({ EXPORT_SUCCESS_LOG_INTERVAL_MS: '0' });
      try {
        await pickUp(everyOne, { job: { id: 3103, token: await keys.sign(3103) } });
        for (let i = 0; i < 3; i++) await auth(await keys.sign(3103), RUNNER_TOKEN, everyOne);
        expect(completed(everyOne, AUTH).filter((line) => line.status === 200)).toHaveLength(3);
      } finally {
        await everyOne.close();
      }
    });
  });

  describe('with a JWT job token', () => {
    it('answers who the job is and which trace it may write, with a reusable decision', async () => {
      const pickup = await pickUp(service, { job: { id: 3001, token: await keys.sign(3001) } });
      const { status, body, headers } = await auth(await keys.sign(3001), RUNNER_TOKEN);
      expect(status).toBe(200);
      expect(body).toEqual({
        job_id: 3001,
        project_id: 7,
        pipeline_id: 500,
        runner_id: 17,
        trace_id: pickup.body.telemetry.trace_id,
        expires_at: pickup.body.telemetry.expires_at,
        control_plane_span_ids: expect.arrayContaining([pickup.body.telemetry.span_parent_id]),
      });
      // The job span it was handed, its queue wait, its pipeline's span and its root pipeline's (the same here).
      expect(body.control_plane_span_ids).toHaveLength(3);
      expect(headers['cache-control']).toBe('private, max-age=60');
    });

    it('accepts a token expired less than 60 s ago (grace), not one expired longer', async () => {
      await pickUp(service, { job: { id: 3002 } });
      expect((await auth(await keys.sign(3002, { expiresIn: -30 }), RUNNER_TOKEN)).status).toBe(200);
      expect((await auth(await keys.sign(3002, { expiresIn: -90 }), RUNNER_TOKEN)).status).toBe(401);
    });

    it.each<[string, (job: number) => Promise<string>]>([
      ['an unknown kid', (job) => keys.sign(job, { kid: 'not-published' })],
      ['the wrong audience', (job) => keys.sign(job, { audience: 'gitlab' })],
      ['alg none', async (job) => `glcbt-${unsigned({ aud: 'gitlab-authz-token', sub: `gid://gitlab/Ci::Build/${job}` })}`],
      [
        'HS256 signed with the public key as the secret (algorithm confusion)',
        async (job) => {
          const pem = keys.publicKey.export({ type: 'spki', format: 'pem' });
          const jwt = await new SignJWT({})
            .setProtectedHeader({ alg: 'HS256', kid: keys.kid })
            .setAudience('gitlab-authz-token')
            .setSubject(`gid://gitlab/Ci::Build/${job}`)
            .setExpirationTime('1h')
            .sign(createSecretKey(Buffer.from(pem)));
          return `glcbt-${jwt}`;
        },
      ],
      ['a signature by another key under the published kid', async (job) => (await makeGitLabKeys()).sign(job, { kid: keys.kid })],
      ['a malformed token', async () => 'glcbt-eyJhbGciOi.not-base64!.x'],
      ['a subject that is not a CI build', (job) => keys.sign(job, { subject: `gid://gitlab/User/${job}` })],
      ['a subject naming another job than the grant it is checked against', () => keys.sign(3003, { subject: 'gid://gitlab/Ci::Build/3003x' })],
    ])('refuses %s with 401', async (_, token) => {
      await pickUp(service, { job: { id: 3003 } });
      const { status, body } = await auth(await token(3003), RUNNER_TOKEN);
      expect(status).toBe(401);
      expect(body.error).toEqual(expect.any(String));
    });

    it('refuses a job picked up by runner A presented with runner B token (401)', async () => {
      await pickUp(service, { job: { id: 3004 } });
      expect((await auth(await keys.sign(3004), OTHER_RUNNER_TOKEN)).status).toBe(401);
      expect((await auth(await keys.sign(3004), RUNNER_TOKEN)).status).toBe(200);
    });

    it('answers 403 for valid tokens of a job telemetry was not enabled for', async () => {
      await service.close();
      service = await start({ FLAGS_FILE: writeFlagsFile({ enabled: false }) });
      const pickup = await pickUp(service, { job: { id: 3005 } });
      expect(pickup.body.telemetry.reason).toBe('flag_disabled');
      const { status, headers } = await auth(await keys.sign(3005), RUNNER_TOKEN);
      expect(status).toBe(403);
      expect(headers['cache-control']).toBe('no-store');
    });

    it('accepts a key GitLab rotated in after the service started', async () => {
      await pickUp(service, { job: { id: 3006 } });
      expect((await auth(await keys.sign(3006), RUNNER_TOKEN)).status).toBe(200);
      const rotated = await keys.rotate();
      expect((await auth(await rotated.sign(3006), RUNNER_TOKEN)).status).toBe(200);
      keys = rotated;
    });
  });

  describe('with an opaque job token', () => {
    it('matches it by digest against the grant', async () => {
      await pickUp(service, { job: { id: 3101, token: JOB_TOKEN } });
      const { status, body } = await auth(JOB_TOKEN, RUNNER_TOKEN);
      expect(status).toBe(200);
      expect(body.job_id).toBe(3101);
    });

    it('refuses an unknown token, a missing one and the wrong runner with 401', async () => {
      await pickUp(service, { job: { id: 3102, token: JOB_TOKEN } });
      expect((await auth('glcbt-never-issued', RUNNER_TOKEN)).status).toBe(401);
      expect((await auth(undefined, RUNNER_TOKEN)).status).toBe(401);
      expect((await auth(JOB_TOKEN, undefined)).status).toBe(401);
      expect((await auth(JOB_TOKEN, OTHER_RUNNER_TOKEN)).status).toBe(401);
    });
  });

  describe('revocation when the job ends', () => {
    it('keeps the grant usable for the grace, then answers 403', async () => {
      await service.close();
      service = await start({ GRANT_REVOKE_GRACE_SECONDS: '1' });
      await pickUp(service, { job: { id: 3201 } });
      const headers = await internalApiHeaders(service.secrets.internalApiSecret);
      const before = Date.now();
      const revoked = await request(service, 'DELETE', '/internal/ci/telemetry/grants/3201', headers);
      expect(revoked.status).toBe(200);
      expect(Date.parse(revoked.body.revoked_at)).toBeGreaterThanOrEqual(before + 1000 - 5);

      const during = await auth(await keys.sign(3201), RUNNER_TOKEN);
      expect(during.status).toBe(200);
      expect(during.headers['cache-control']).toMatch(/^private, max-age=[01]$/);
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const after = await auth(await keys.sign(3201), RUNNER_TOKEN);
      expect(after.status).toBe(403);
      expect(after.body.error).toContain('revoked');
    });

    it('never lets a decision outlive the grace, so every replica refuses a revoked job within it', async () => {
      await service.close();
      const env = { GRANT_REVOKE_GRACE_SECONDS: '1', AUTH_DECISION_MAX_AGE_SECONDS: '60' };
      service = await start(env);
      // Replicas share the key files, as a deployment mounts the same secrets into each.
      const replica = await start({
        ...env,
        INTERNAL_API_SECRET_FILE: service.config.internalApi.secretFile!,
        TRACE_KEY_FILE: service.config.jobPayload.traceKeyFile!,
      });
      try {
        await pickUp(service, { job: { id: 3202 } });
        const token = await keys.sign(3202);
        // Both replicas decide (and keep the decision) before GitLab says the job ended.
        for (const target of [service, replica]) {
          const before = await auth(token, RUNNER_TOKEN, target);
          expect(before.status).toBe(200);
          expect(before.headers['cache-control']).toMatch(/^private, max-age=[01]$/);
        }
        const headers = await internalApiHeaders(service.secrets.internalApiSecret);
        expect((await request(service, 'DELETE', '/internal/ci/telemetry/grants/3202', headers)).status).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 2100));
        for (const target of [service, replica]) expect((await auth(token, RUNNER_TOKEN, target)).status).toBe(403);
      } finally {
        await replica.close();
      }
    });

    it('keeps a revoked job revoked, with its expiry, when it is decorated again', async () => {
      await service.close();
      // No cache: each answer below is the store's, not a remembered refusal.
      service = await start({ GRANT_REVOKE_GRACE_SECONDS: '0', AUTH_DECISION_CACHE_SIZE: '0' });
      const first = await pickUp(service, { job: { id: 3203 } });
      const headers = await internalApiHeaders(service.secrets.internalApiSecret);
      expect((await request(service, 'DELETE', '/internal/ci/telemetry/grants/3203', headers)).status).toBe(200);
      expect((await auth(await keys.sign(3203), RUNNER_TOKEN)).status).toBe(403);

      await new Promise((resolve) => setTimeout(resolve, 20));
      const again = await pickUp(service, { job: { id: 3203 } });
      expect(Date.parse(again.body.telemetry.expires_at)).toBeLessThanOrEqual(Date.parse(first.body.telemetry.expires_at));
      const refused = await auth(await keys.sign(3203), RUNNER_TOKEN);
      expect(refused.status).toBe(403);
      expect(refused.body.error).toContain('revoked');
    });

    it('answers 404 for a job without a grant', async () => {
      const headers = await internalApiHeaders(service.secrets.internalApiSecret);
      expect((await request(service, 'DELETE', '/internal/ci/telemetry/grants/999999', headers)).status).toBe(404);
    });
  });

  it('caps max-age at the grant remaining life', async () => {
    await service.close();
    service = await start({ GRANT_GRACE_SECONDS: '0' });
    await pickUp(service, { job: { id: 3301, timeout: 20 } });
    const { headers } = await auth(await keys.sign(3301), RUNNER_TOKEN);
    const maxAge = Number(/max-age=(\d+)/.exec(String(headers['cache-control']))?.[1]);
    expect(maxAge).toBeGreaterThanOrEqual(18);
    expect(maxAge).toBeLessThanOrEqual(20);
  });

  it('rate-limits each runner across replicas sharing the store (429 with Retry-After)', async () => {
    await service.close();
    service = await start({ RUNNER_RATE_LIMIT: '3', RUNNER_RATE_WINDOW_SECONDS: '30' });
    // Replicas share the key files, as a deployment mounts the same secrets into each.
    const replica = await start({
      RUNNER_RATE_LIMIT: '3',
      RUNNER_RATE_WINDOW_SECONDS: '30',
      INTERNAL_API_SECRET_FILE: service.config.internalApi.secretFile!,
      TRACE_KEY_FILE: service.config.jobPayload.traceKeyFile!,
    });
    try {
      // Four jobs of one runner: distinct token pairs, so no decision is reused from the cache.
      for (const job of [3401, 3402, 3403, 3404]) await pickUp(service, { job: { id: job } });
      await pickUp(service, { job: { id: 3405 }, runner: { id: 18, token: OTHER_RUNNER_TOKEN } });
      const statuses = [
        await auth(await keys.sign(3401), RUNNER_TOKEN),
        await auth(await keys.sign(3402), RUNNER_TOKEN, replica),
        await auth(await keys.sign(3403), RUNNER_TOKEN),
      ].map((answer) => answer.status);
      expect(statuses).toEqual([200, 200, 200]);
      const limited = await auth(await keys.sign(3404), RUNNER_TOKEN, replica);
      expect(limited.status).toBe(429);
      expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(30);
      // Another runner has its own budget.
      expect((await auth(await keys.sign(3405), OTHER_RUNNER_TOKEN)).status).toBe(200);
    } finally {
      await replica.close();
    }
  });

  describe('reusing decisions', () => {
    const misses = async (target: InProcessService) => {
      const text = await target.app.get(MetricsService).registry.metrics();
      return Number(/ci_job_telemetry_auth_decision_cache_total\{result="miss"\} (\d+)/.exec(text)?.[1] ?? 0);
    };

    it('looks a token pair up in the store once per max-age, however often it is asked', async () => {
      await pickUp(service, { job: { id: 3801 } });
      const token = await keys.sign(3801);
      const before = await misses(service);
      const answers = await Promise.all(Array.from({ length: 10 }, () => auth(token, RUNNER_TOKEN)));
      for (let i = 0; i < 5; i++) answers.push(await auth(token, RUNNER_TOKEN));
      expect(answers.every((answer) => answer.status === 200)).toBe(true);
      expect((await misses(service)) - before).toBe(1);
    });

    it('promises only what is left of a reused decision max-age', async () => {
      await pickUp(service, { job: { id: 3802 } });
      const token = await keys.sign(3802);
      expect((await auth(token, RUNNER_TOKEN)).headers['cache-control']).toBe('private, max-age=60');
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const reused = Number(/max-age=(\d+)/.exec(String((await auth(token, RUNNER_TOKEN)).headers['cache-control']))?.[1]);
      expect(reused).toBeLessThanOrEqual(59);
      expect(reused).toBeGreaterThanOrEqual(57);
    });

    it('checks every time when the cache is off', async () => {
      await service.close();
      service = await start({ AUTH_DECISION_CACHE_SIZE: '0' });
      await pickUp(service, { job: { id: 3803 } });
      const token = await keys.sign(3803);
      const before = await misses(service);
      for (let i = 0; i < 3; i++) expect((await auth(token, RUNNER_TOKEN)).status).toBe(200);
      expect((await misses(service)) - before).toBe(3);
    });
  });

  it('answers 503 with Retry-After, never 401, when the store is down', async () => {
    await pickUp(service, { job: { id: 3501, token: JOB_TOKEN } });
    await redis.stop();
    try {
      for (const token of [await keys.sign(3501), JOB_TOKEN]) {
        const { status, headers } = await auth(token, RUNNER_TOKEN);
        expect(status).toBe(503);
        expect(Number(headers['retry-after'])).toBeGreaterThan(0);
      }
    } finally {
      await redis.start();
    }
  });

  describe('callers that cannot sign JWTs (SPEC §3)', () => {
    it('accept a configured caller key on the auth endpoint only', async () => {
      await pickUp(service, { job: { id: 3601, token: JOB_TOKEN } });
      const withKey = { 'ci-telemetry-caller-key': callerKey, authorization: `Bearer ${JOB_TOKEN}`, 'runner-token': RUNNER_TOKEN };
      expect((await request(service, 'POST', AUTH, withKey)).status).toBe(200);
      expect((await request(service, 'POST', AUTH, { ...withKey, 'ci-telemetry-caller-key': generateCallerKey() })).status).toBe(401);
      const pickupWithKey = await request(
        service,
        'POST',
        PICKUP,
        { 'ci-telemetry-caller-key': callerKey, 'content-type': 'application/json' },
        jobPayloadRequest(),
      );
      expect(pickupWithKey.status).toBe(401);
      // A gateway's key cannot end a job's grant either.
      const revokeWithKey = await request(service, 'DELETE', '/internal/ci/telemetry/grants/3601', { 'ci-telemetry-caller-key': callerKey });
      expect(revokeWithKey.status).toBe(401);
      expect(revokeWithKey.body.error).toContain('gitlab-ci-telemetry-api-request');
    });
  });

  describe('refusals and unreadable keys are loud (SPEC §5)', () => {
    const readiness = async (target: InProcessService) => {
      const response = await target.app.inject({ method: 'GET', url: '/-/readiness' });
      return { status: response.statusCode, checks: response.json().checks as Record<string, string> };
    };
    const logLines = (target: InProcessService) => target.logs.lines.map((line) => JSON.parse(line) as Record<string, unknown>);

    it('logs every refusal with its reason and the request id, reused decisions included', async () => {
      await pickUp(service, { job: { id: 3901 } });
      const send = async (requestId: string, jobToken: string | undefined, runnerToken: string | undefined) => {
        const headers: Record<string, string> = { ...(await internalApiHeaders(service.secrets.internalApiSecret)), 'x-request-id': requestId };
        if (jobToken !== undefined) headers.authorization = `Bearer ${jobToken}`;
        if (runnerToken !== undefined) headers['runner-token'] = runnerToken;
        return request(service, 'POST', AUTH, headers);
      };
      expect((await send('refusal-1', await keys.sign(3901), OTHER_RUNNER_TOKEN)).status).toBe(401);
      expect((await send('refusal-2', await keys.sign(3901), OTHER_RUNNER_TOKEN)).status).toBe(401);
      expect((await send('refusal-3', await keys.sign(3999), RUNNER_TOKEN)).status).toBe(403);
      expect((await send('refusal-4', undefined, RUNNER_TOKEN)).status).toBe(401);
      const refusals = logLines(service).filter((line) => line.msg === 'auth refused');
      expect(refusals).toEqual([
        expect.objectContaining({ request_id: 'refusal-1', refusal: 'unauthenticated', reason: 'job was not picked up by this runner' }),
        expect.objectContaining({ request_id: 'refusal-2', refusal: 'unauthenticated', reason: 'job was not picked up by this runner' }),
        expect.objectContaining({ request_id: 'refusal-3', refusal: 'forbidden', reason: 'telemetry is not enabled for this job' }),
        expect.objectContaining({ request_id: 'refusal-4', refusal: 'unauthenticated', reason: expect.stringContaining('missing job token') }),
      ]);
    });

    it('answers 503, is unready and says why while the JWKS file cannot be read, never 401', async () => {
      const moved = `${keys.jwksFile}.moved`;
      renameSync(keys.jwksFile, moved);
      try {
        await pickUp(service, { job: { id: 3902 } });
        const answer = await auth(await keys.sign(3902), RUNNER_TOKEN);
        expect(answer.status).toBe(503);
        expect(Number(answer.headers['retry-after'])).toBeGreaterThan(0);
        expect(await readiness(service)).toEqual({ status: 503, checks: expect.objectContaining({ job_token_keys: 'failing' }) });
        expect(service.logs.text()).toContain(`JOB_TOKEN_JWKS_FILE: cannot read ${keys.jwksFile} (ENOENT)`);
      } finally {
        renameSync(moved, keys.jwksFile);
      }
      expect((await readiness(service)).checks.job_token_keys).toBe('ok');
      expect((await auth(await keys.sign(3902), RUNNER_TOKEN)).status).toBe(200);
    });

    it('answers 503, is unready and says why while the JWKS URL cannot be fetched, and recovers', async () => {
      let gitlabUp = false;
      const gitlab = createServer((_request, response) => {
        if (!gitlabUp) response.writeHead(502).end('bad gateway');
        else response.writeHead(200, { 'content-type': 'application/json' }).end(readFileSync(keys.jwksFile));
      });
      await new Promise<void>((resolve) => gitlab.listen(0, '127.0.0.1', resolve));
      const jwksUrl = `http://127.0.0.1:${(gitlab.address() as AddressInfo).port}/oauth/discovery/keys`;
      await service.close();
      service = await start({ JOB_TOKEN_JWKS_FILE: '', JOB_TOKEN_JWKS_URL: jwksUrl });
      try {
        await pickUp(service, { job: { id: 3903 } });
        const answer = await auth(await keys.sign(3903), RUNNER_TOKEN);
        expect(answer.status).toBe(503);
        expect((await readiness(service)).checks.job_token_keys).toBe('failing');
        expect(service.logs.text()).toContain(`JOB_TOKEN_JWKS_URL: cannot fetch ${jwksUrl}`);

        gitlabUp = true;
        expect(await readiness(service)).toEqual({ status: 200, checks: expect.objectContaining({ job_token_keys: 'ok' }) });
        expect(service.logs.text()).toContain('job token keys readable again');
        expect((await auth(await keys.sign(3903), RUNNER_TOKEN)).status).toBe(200);
      } finally {
        await new Promise((resolve) => gitlab.close(resolve));
      }
    });
  });

  it('never puts a token in an answer or a log line', async () => {
    await pickUp(service, { job: { id: 3701, token: JOB_TOKEN } });
    const jwt = await keys.sign(3701);
    await auth(jwt, RUNNER_TOKEN);
    await auth(jwt, OTHER_RUNNER_TOKEN);
    await auth(JOB_TOKEN, 'glrt-wrong');
    await auth('glcbt-eyJ.broken.token', RUNNER_TOKEN);
    const everything = answered.join('\n') + service.logs.text();
    for (const secret of [JOB_TOKEN, RUNNER_TOKEN, OTHER_RUNNER_TOKEN, jwt, 'glrt-wrong', 'glcbt-eyJ.broken.token', callerKey]) {
      expect(everything).not.toContain(secret);
    }
  });
});

function unsigned(claims: object): string {
  const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${encode({ alg: 'none', typ: 'JWT' })}.${encode({ ...claims, exp: Math.floor(Date.now() / 1000) + 3600 })}.`;
}
