import Redis from 'ioredis';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { writeFlagsFile } from '../helpers/flags-file';
import { internalApiHeaders, makeSecretFiles } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { waitFor } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { runServiceToExit, ServiceProcess, startService } from '../helpers/service';

const PATH = '/internal/ci/telemetry/job_payload';

async function decorate(service: ServiceProcess, body: unknown, headers?: Record<string, string>) {
  const response = await fetch(service.url + PATH, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(headers ?? (await internalApiHeaders(service.secrets.internalApiSecret))) },
    body: JSON.stringify(body),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- shape checked against openapi.yaml below
  const json = (await response.json()) as any;
  expectMatchesOpenApi(PATH, 'post', response.status, response.headers.get('content-type') ?? undefined, json);
  return { status: response.status, body: json };
}

describe('the built service as a process', () => {
  let service: ServiceProcess | undefined;
  afterEach(async () => {
    await service?.stop('SIGKILL');
    service = undefined;
  });

  it('runs on its embedded defaults and answers the decorator, health and metrics as documented', async () => {
    service = await startService();
    const enabled = await decorate(service, jobPayloadRequest());
    expect(enabled.status).toBe(200);
    expect(enabled.body.telemetry.reason).toBe('enabled');
    expect((await decorate(service, { runner: {} })).status).toBe(400);
    expect((await decorate(service, jobPayloadRequest(), {})).status).toBe(401);

    const liveness = await fetch(`${service.url}/-/liveness`);
    expectMatchesOpenApi('/-/liveness', 'get', liveness.status, liveness.headers.get('content-type') ?? undefined, await liveness.json());
    const readiness = await fetch(`${service.url}/-/readiness`);
    const readinessBody = (await readiness.json()) as { status: string; checks: Record<string, string> };
    expectMatchesOpenApi('/-/readiness', 'get', readiness.status, readiness.headers.get('content-type') ?? undefined, readinessBody);
    expect(readinessBody).toEqual({ status: 'ok', checks: { store: 'ok', flags: 'ok', outbox: 'ok', outbox_delivery: 'ok', outcome_sampling: 'ok' } });

    const metrics = await (await fetch(`${service.url}/metrics`)).text();
    expect(metrics).toMatch(/ci_job_telemetry_decisions_total\{reason="enabled"\} 1/);
    expect(metrics).toMatch(/ci_job_telemetry_flag_definitions_age_seconds \d/);
  });

  it('finishes in-flight work and exits 0 on SIGTERM', async () => {
    service = await startService();
    expect(await service.stop('SIGTERM')).toBe(0);
    const lines = service.output().trim().split('\n');
    for (const line of lines.filter((l) => l.startsWith('{'))) expect(() => JSON.parse(line)).not.toThrow();
    expect(service.output()).toContain('shutting down');
  });

  describe('with Redis', () => {
    let redis: RedisServer;
    beforeEach(async () => (redis = await startRedis()));
    afterEach(() => redis.stop());

    it('reports not ready while Redis is down, keeps answering pickups, and recovers', async () => {
      service = await startService({ REDIS_URL: redis.url });
      expect((await decorate(service, jobPayloadRequest())).body.telemetry.reason).toBe('enabled');

      await redis.stop();
      const readiness = await fetch(`${service.url}/-/readiness`);
      expect(readiness.status).toBe(503);
      expect(((await readiness.json()) as { checks: { store: string } }).checks.store).toBe('failing');
      expect(((await (await fetch(`${service.url}/-/liveness`)).json()) as { status: string }).status).toBe('ok');
      const degraded = await decorate(service, jobPayloadRequest({ job: { id: 2002 } }));
      expect(degraded.status).toBe(200);
      expect(degraded.body.telemetry.reason).toBe('degraded');

      await redis.start();
      const url = service.url;
      await waitFor('readiness after Redis is back', async () => ((await fetch(`${url}/-/readiness`)).status === 200 ? true : undefined));
      expect((await decorate(service, jobPayloadRequest({ job: { id: 2003 } }))).body.telemetry.reason).toBe('enabled');
    });

    it("names its two connections in CLIENT LIST, and writes a pickup's grant on the pickups' own", async () => {
      service = await startService({ REDIS_URL: redis.url });
      expect((await decorate(service, jobPayloadRequest({ job: { id: 2004 } }))).body.telemetry.reason).toBe('enabled');
      const operator = new Redis(redis.url);
      try {
        const clients = ((await operator.call('CLIENT', 'LIST')) as string)
          .trim()
          .split('\n')
          .map((line) => Object.fromEntries(line.split(' ').map((field) => field.split('=', 2) as [string, string])));
        const named = (name: string) => clients.filter((client) => client.name === name);
        expect(named('ci-job-telemetry')).toHaveLength(1);
        expect(named('ci-job-telemetry-pickups')).toHaveLength(1);
        // The last command the pickups' connection ran is the pickup's grant script; the outbox's are on the other.
        expect(named('ci-job-telemetry-pickups')[0].cmd).toMatch(/^eval/);
        expect(await operator.exists('cjt:{job:2004}:grant')).toBe(1);
      } finally {
        operator.disconnect();
      }
    });
  });

  it('takes an edited flag file without a restart, and keeps the last good one when it breaks', async () => {
    const flagsFile = writeFlagsFile({ constraints: [{ contextName: 'projectId', operator: 'IN', values: ['7'] }] });
    service = await startService({ FLAGS_FILE: flagsFile });
    expect((await decorate(service, jobPayloadRequest())).body.telemetry.reason).toBe('enabled');

    writeFileSync(flagsFile, '{"features": [');
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect((await decorate(service, jobPayloadRequest())).body.telemetry.reason).toBe('enabled');
    expect(service.output()).toContain('keeping the last good definitions');

    writeFlagsFile({ enabled: false }, flagsFile);
    const running = service;
    await waitFor(
      'the kill switch to take effect',
      async () => {
        const { body } = await decorate(running, jobPayloadRequest());
        return body.telemetry.reason === 'flag_disabled' ? true : undefined;
      },
      5000,
    );
  });

  describe('configuration errors', () => {
    it('stops with one clear line per bad variable and a non-zero exit', async () => {
      const { code, stderr } = await runServiceToExit({
        INTERNAL_PORT: 'eighty',
        REDIS_URL: 'http://not-redis',
        UNADVERTISED_RUNNERS_ELIGIBLE: 'maybe',
        HOSTED_RUNNER_TYPES: 'instance_type,cloud_type',
      });
      expect(code).not.toBe(0);
      const lines = stderr.trim().split('\n');
      expect(lines).toHaveLength(4);
      expect(lines.map((line) => line.match(/^invalid configuration: (\w+):/)?.[1]).sort()).toEqual(
        ['HOSTED_RUNNER_TYPES', 'INTERNAL_PORT', 'REDIS_URL', 'UNADVERTISED_RUNNERS_ELIGIBLE'].sort(),
      );
    });

    it('refuses to start with one line when the configured JWKS file cannot be read', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'cjt-bad-jwks-'));
      const secrets = makeSecretFiles();
      const env = { INTERNAL_API_SECRET_FILE: secrets.internalApiSecretFile, TRACE_KEY_FILE: secrets.traceKeyFile };
      const missing = await runServiceToExit({ ...env, JOB_TOKEN_JWKS_FILE: join(dir, 'jwks.json') });
      expect(missing.code).not.toBe(0);
      expect(missing.stderr.trim().split('\n')).toEqual([`invalid configuration: JOB_TOKEN_JWKS_FILE: cannot read ${join(dir, 'jwks.json')} (ENOENT)`]);
      writeFileSync(join(dir, 'not-keys.json'), '{"keys": "none"}');
      const notKeys = await runServiceToExit({ ...env, JOB_TOKEN_JWKS_FILE: join(dir, 'not-keys.json') });
      expect(notKeys.code).not.toBe(0);
      expect(notKeys.stderr).toMatch(/^invalid configuration: JOB_TOKEN_JWKS_FILE: .*not-keys\.json is not a JSON Web Key Set/);
    });

    it('refuses ROLE=gateway without a shared store in one line, and starts when per-process quotas are intended', async () => {
      const gateway = { ROLE: 'gateway', AUTH_URL: 'http://127.0.0.1:1/internal/ci/telemetry/auth', OTLP_UPSTREAM_URL: 'http://127.0.0.1:1' };
      const refused = await runServiceToExit(gateway);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^invalid configuration: REDIS_URL: required with ROLE=gateway/)]);
      service = await startService({ ...gateway, GATEWAY_PER_PROCESS_QUOTAS: 'true' }, { waitReady: false });
      const url = service.url;
      await waitFor('the internal port', async () => ((await fetch(`${url}/-/liveness`)).status === 200 ? true : undefined));
    });

    it('refuses a secret file that is missing or too short', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'cjt-bad-secret-'));
      writeFileSync(join(dir, 'short'), Buffer.alloc(16, 1).toString('base64'));
      const { code, stderr } = await runServiceToExit({
        INTERNAL_API_SECRET_FILE: join(dir, 'short'),
        TRACE_KEY_FILE: join(dir, 'missing'),
      });
      expect(code).not.toBe(0);
      expect(stderr).toMatch(/INTERNAL_API_SECRET_FILE: .* at least 32 bytes/);
      expect(stderr).toMatch(/TRACE_KEY_FILE: cannot read/);
    });
  });

  it('generates its secrets on first start when none are configured, and keeps them across restarts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cjt-workdir-'));
    copyFileSync(join(__dirname, '..', '..', 'config', 'flags.json'), join(dir, 'flags.json'));
    const env = { INTERNAL_API_SECRET_FILE: '', TRACE_KEY_FILE: '', FLAGS_FILE: join(dir, 'flags.json') };
    service = await startService(env, { cwd: dir });
    const first = await fetchTraceId(service, dir);
    await service.stop();
    service = await startService(env, { cwd: dir });
    expect(await fetchTraceId(service, dir)).toBe(first);
  });
});

async function fetchTraceId(service: ServiceProcess, dir: string): Promise<string> {
  const { readFileSync } = await import('node:fs');
  const secret = Buffer.from(readFileSync(join(dir, '.secrets', 'internal_api_secret'), 'utf8').trim(), 'base64');
  const { body } = await decorate(service, jobPayloadRequest(), await internalApiHeaders(secret));
  return body.telemetry.trace_id;
}
