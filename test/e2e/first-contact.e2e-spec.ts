import { SignJWT } from 'jose';
import { execFile } from 'node:child_process';
import { createSecretKey, randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { internalApiHeaders, ISSUER, makeSecretFiles } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { freePort, waitFor } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { runServiceToExit, ServiceProcess, startService } from '../helpers/service';

/**
 * Issue 20, "first contact": every start-up mistake a tester made on a fresh clone ends in one line that
 * says what to change, and what a running service says of itself is what an operator needs.
 */
const ROOT = join(__dirname, '..', '..');
const JOB_PAYLOAD = '/internal/ci/telemetry/job_payload';
// Nothing listens there: these tests are about what the service says, not where exports go.
const UPSTREAM = 'http://127.0.0.1:1';

/** For startService, which brings its own secrets. */
const SERVICE_ENV = { OTLP_UPSTREAM_URL: UPSTREAM };

/** Enough to start in the repository's working directory without writing secrets into it. */
function quietEnv(): Record<string, string> {
  const secrets = makeSecretFiles();
  return {
    INTERNAL_API_SECRET_FILE: secrets.internalApiSecretFile,
    TRACE_KEY_FILE: secrets.traceKeyFile,
    CAPABILITY_KEY_FILE: secrets.capabilityKeyFile,
    OTLP_UPSTREAM_URL: UPSTREAM,
  };
}

function listenOn(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

function logLines(service: ServiceProcess): Array<Record<string, unknown>> {
  return service
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * The log once its start-up line has reached this process: the service writes it before it answers ready, but its
 * stdout pipe and the readiness answer's socket are two channels, and a loaded machine may deliver the answer first.
 */
async function logOnceStarted(service: ServiceProcess): Promise<Array<Record<string, unknown>>> {
  return waitFor('the start-up line', async () => {
    const lines = logLines(service);
    return lines.some((line) => line.msg === 'ci-job-telemetry started') ? lines : undefined;
  });
}

describe('first contact (issue 20)', () => {
  let service: ServiceProcess | undefined;
  afterEach(async () => {
    await service?.stop('SIGKILL');
    service = undefined;
  });

  describe('a start that cannot work stops with one line and exit code 78', () => {
    it.each(['INTERNAL_PORT', 'GATEWAY_PORT'])('%s held by another process', async (variable) => {
      const [held, other] = [await freePort(), await freePort()];
      const holder = await listenOn(held);
      try {
        const ports =
          variable === 'INTERNAL_PORT'
            ? { INTERNAL_PORT: String(held), GATEWAY_PORT: String(other) }
            : { INTERNAL_PORT: String(other), GATEWAY_PORT: String(held) };
        const { code, stderr } = await runServiceToExit({ ...quietEnv(), HOST: '127.0.0.1', ...ports });
        expect(stderr.trim().split('\n')).toEqual([
          `cannot start: ${variable}: 127.0.0.1:${held} is already in use; stop what listens there or set ${variable} to a free port`,
        ]);
        expect(code).toBe(78);
      } finally {
        await new Promise((resolve) => holder.close(resolve));
      }
    });

    it('one port for both servers', async () => {
      const port = await freePort();
      const { code, stderr } = await runServiceToExit({ ...quietEnv(), HOST: '127.0.0.1', INTERNAL_PORT: String(port), GATEWAY_PORT: String(port) });
      expect(stderr.trim().split('\n')).toEqual([
        `invalid configuration: GATEWAY_PORT: ${port} is INTERNAL_PORT too; ROLE=all listens on both, so give them different ports`,
      ]);
      expect(code).toBe(78);
    });

    it('a HOST that does not resolve', async () => {
      const { code, stderr } = await runServiceToExit({
        ...quietEnv(),
        HOST: 'no-such-host.invalid',
        INTERNAL_PORT: String(await freePort()),
        GATEWAY_PORT: String(await freePort()),
      });
      expect(stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          /^cannot start: HOST: no-such-host\.invalid cannot be resolved \((ENOTFOUND|EAI_AGAIN)\); set HOST to an address of this machine, or 0\.0\.0\.0 for all of them$/,
        ),
      ]);
      expect(code).toBe(78);
    });

    it('a REDIS_URL that is not redis:// says which schemes it takes, and never echoes its password', async () => {
      const { code, stderr } = await runServiceToExit({ ...quietEnv(), REDIS_URL: 'http://:hunter2@redis:6379' });
      expect(stderr.trim().split('\n')).toEqual([
        'invalid configuration: REDIS_URL: must be a redis:// or rediss:// (TLS) URL, e.g. redis://localhost:6379 (got "http://:***@redis:6379")',
      ]);
      expect(code).toBe(78);
    });

    it('a RUNNER_PRICES_FILE with a price it cannot use names it, rather than pricing the waste at nothing', async () => {
      const file = join(mkdtempSync(join(tmpdir(), 'cjt-prices-')), 'prices.json');
      writeFileSync(file, JSON.stringify({ per_minute: { runner_type: { instance_type: 'cheap' } } }));
      const { code, stderr } = await runServiceToExit({ ...quietEnv(), RUNNER_PRICES_FILE: file });
      expect(stderr.trim().split('\n')).toEqual([expect.stringMatching(new RegExp(`^invalid configuration: RUNNER_PRICES_FILE ${file}: .*instance_type`))]);
      expect(code).toBe(78);
    });
  });

  it('prints its usage for --help and exits 0 without starting', async () => {
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = execFile(process.execPath, [join(ROOT, 'dist', 'main.js'), '--help'], { cwd: ROOT, env: { PATH: process.env.PATH } }, (_, out) =>
        resolve({ code: child.exitCode, stdout: out }),
      );
    });
    expect(code).toBe(0);
    expect(stdout).toMatch(/^ci-job-telemetry: the control plane that turns GitLab CI jobs into OpenTelemetry traces\./);
    expect(stdout).toMatch(/INTERNAL_PORT +8080 +the internal API GitLab calls/);
    expect(stdout).toMatch(/GATEWAY_PORT +4318 +the OTLP\/HTTP gateway runners export to/);
    expect(stdout).toContain('README.md, section\n"Configuration"');
    expect(stdout).not.toContain('"level"');
  });

  it('says in one info line what it is once it listens, with the framework narration at debug', async () => {
    service = await startService(SERVICE_ENV);
    const started = (await logOnceStarted(service)).filter((line) => line.msg === 'ci-job-telemetry started');
    const { port: internalPort } = new URL(service.url);
    const { port: gatewayPort } = new URL(service.gatewayUrl);
    expect(started).toEqual([
      expect.objectContaining({
        level: 30,
        role: 'all',
        internalApi: `http://127.0.0.1:${internalPort}`,
        otlpGateway: `http://127.0.0.1:${gatewayPort}`,
        store: 'memory (this process only) (reachable)',
        flags: `file ${join(ROOT, 'config', 'flags.json')}`,
        upstream: UPSTREAM,
        gatewayPublicUrl: `http://127.0.0.1:${gatewayPort}`,
        gitlabWebhooks: 'off (GITLAB_WEBHOOK_SECRET_FILE unset)',
      }),
    ]);
    const info = logLines(service).filter((line) => (line.level as number) >= 30);
    expect(info.map((line) => line.msg)).not.toContainEqual(
      expect.stringMatching(/^Mapped \{|dependencies initialized|successfully started|^Server listening|^Starting Nest|Controller \{/),
    );
  });

  it('is not ready before it has started whole: the gateway port open and the start-up line written', async () => {
    service = await startService(SERVICE_ENV, { waitReady: false });
    const { port: gatewayPort } = new URL(service.gatewayUrl);
    const answers: Array<{ status: number; contentType: string | undefined; body: { status: string } }> = [];
    let readyAt = 0;
    await waitFor(
      'readiness',
      async () => {
        const response = await fetch(`${service!.url}/-/readiness`).catch(() => undefined);
        if (response === undefined) return undefined;
        answers.push({
          status: response.status,
          contentType: response.headers.get('content-type') ?? undefined,
          body: (await response.json()) as { status: string },
        });
        readyAt = Date.now();
        return response.status === 200 ? true : undefined;
      },
      20_000,
      2,
    );
    // The moment readiness says 200, an operator can already read the line (it was written before) and a runner can
    // already export.
    const started = (await logOnceStarted(service)).filter((line) => line.msg === 'ci-job-telemetry started');
    expect(started).toHaveLength(1);
    expect(Date.parse(String(started[0].time))).toBeLessThanOrEqual(readyAt);
    const exportAnswer = await fetch(`http://127.0.0.1:${gatewayPort}/v1/traces`, { method: 'POST', body: '' });
    expect(exportAnswer.status).toBe(401);
    for (const { status, contentType, body } of answers) expectMatchesOpenApi('/-/readiness', 'get', status, contentType, body);
    expect(answers.slice(0, -1).map(({ status, body }) => [status, body.status])).toEqual(answers.slice(0, -1).map(() => [503, 'starting']));
  });

  it('hands runners a URL on GATEWAY_PORT when GATEWAY_PUBLIC_URL is unset', async () => {
    service = await startService({ ...SERVICE_ENV, GATEWAY_PUBLIC_URL: '' });
    const { port: gatewayPort } = new URL(service.gatewayUrl);
    expect(gatewayPort).not.toBe('4318');
    const response = await fetch(service.url + JOB_PAYLOAD, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(await internalApiHeaders(service.secrets.internalApiSecret)) },
      body: JSON.stringify(jobPayloadRequest()),
    });
    const body = (await response.json()) as { payload: { features: { tracing: { otel_endpoints: Array<{ url: string }> } } } };
    expect(body.payload.features.tracing.otel_endpoints[0].url).toMatch(new RegExp(`^http://localhost:${gatewayPort}/jobs/1001/[A-Za-z0-9_-]+/v1/traces$`));
    expect((await logOnceStarted(service)).find((line) => line.msg === 'ci-job-telemetry started')?.gatewayPublicUrl).toBe(`http://localhost:${gatewayPort}`);
  });

  describe('a store that is not there', () => {
    let redis: RedisServer;
    beforeEach(async () => {
      // Started once for a port of its own, then stopped: nothing listens there until the test starts it again.
      redis = await startRedis();
      await redis.stop();
    });
    afterEach(() => redis.stop());

    it('starts anyway, names the store in one warning and in the summary, is unready, and says when it is back', async () => {
      service = await startService({ ...SERVICE_ENV, REDIS_URL: redis.url }, { waitReady: false });
      const url = service.url;
      await waitFor('the internal port', async () => ((await fetch(`${url}/-/liveness`)).status === 200 ? true : undefined));
      const readiness = await fetch(`${url}/-/readiness`);
      expect(readiness.status).toBe(503);
      expect(((await readiness.json()) as { checks: { store: string } }).checks.store).toBe('failing');

      const running = service;
      const summary = await waitFor('the start-up summary', async () => logLines(running).find((line) => line.msg === 'ci-job-telemetry started'));
      expect(summary.store).toBe(`Redis ${redis.url} (unreachable)`);
      const warnings = logLines(service).filter((line) => line.context === 'GrantStore');
      expect(warnings).toEqual([
        expect.objectContaining({
          level: 40,
          msg: `store: Redis ${redis.url} is unreachable (connection refused); pickups answer degraded, exports 503, and readiness fails until it is back`,
        }),
      ]);
      expect(service.output()).not.toContain("Stream isn't writeable");

      await redis.start();
      await waitFor('the store to be back', async () =>
        logLines(running).some((line) => line.msg === `store: Redis ${redis.url} is reachable again`) ? true : undefined,
      );
      await waitFor('readiness', async () => ((await fetch(`${url}/-/readiness`)).status === 200 ? true : undefined));
    });
  });

  it('says what is wrong, and what to do, when the flag file is missing', async () => {
    const flagsFile = join(makeSecretFiles().dir, 'flags.json');
    service = await startService({ ...SERVICE_ENV, FLAGS_FILE: flagsFile }, { waitReady: false });
    const running = service;
    const summary = await waitFor('the start-up summary', async () => logLines(running).find((line) => line.msg === 'ci-job-telemetry started'));
    expect(summary.flags).toBe(`file ${flagsFile} (no definitions yet: telemetry is off)`);
    // The file is polled every second: a problem that still holds is not said again.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(logLines(service).filter((line) => line.context === 'FlagsService')).toEqual([
      expect.objectContaining({
        level: 40,
        msg: `flag file ${flagsFile} does not exist: there are no flag definitions, so telemetry is off for every job and readiness fails; create it (the repository's config/flags.json is an example) or point FLAGS_FILE at yours, or UNLEASH_URL at an Unleash server`,
      }),
    ]);
    expect(service.output()).not.toContain('keeping the last good definitions');
    expect((await fetch(`${service.url}/-/readiness`)).status).toBe(503);
  });

  describe('the internal API', () => {
    it('answers a text/plain job payload with 415 in its error shape', async () => {
      service = await startService(SERVICE_ENV);
      const response = await fetch(service.url + JOB_PAYLOAD, {
        method: 'POST',
        headers: { 'content-type': 'text/plain', ...(await internalApiHeaders(service.secrets.internalApiSecret)) },
        body: JSON.stringify(jobPayloadRequest()),
      });
      const body = (await response.json()) as { error: string; request_id: string };
      expect(response.status).toBe(415);
      expect(body.error).toBe('content-type must be application/json (got text/plain)');
      expectMatchesOpenApi(JOB_PAYLOAD, 'post', response.status, response.headers.get('content-type') ?? undefined, body);
    });

    it('says expired to a caller whose token is, and logs every 401 with its reason, never the token', async () => {
      service = await startService(SERVICE_ENV);
      const now = Math.floor(Date.now() / 1000);
      const expired = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setIssuer(ISSUER)
        .setIssuedAt(now - 30)
        .setExpirationTime(now - 10)
        .sign(createSecretKey(service.secrets.internalApiSecret));
      const forged = (await internalApiHeaders(randomBytes(32)))['gitlab-ci-telemetry-api-request'];
      const calls: Array<[string, string, string]> = [
        [JOB_PAYLOAD, 'POST', expired],
        [JOB_PAYLOAD, 'POST', forged],
        ['/internal/ci/telemetry/auth', 'POST', forged],
        ['/internal/ci/telemetry/grants/1001', 'DELETE', forged],
      ];
      const answers = [];
      for (const [path, method, token] of calls) {
        const response = await fetch(service.url + path, {
          method,
          headers: { ...(method === 'POST' ? { 'content-type': 'application/json' } : {}), 'gitlab-ci-telemetry-api-request': token },
          body: method === 'POST' ? JSON.stringify(jobPayloadRequest()) : undefined,
        });
        const body = (await response.json()) as { error: string; request_id: string };
        expectMatchesOpenApi(path.replace(/\/1001$/, '/{job_id}'), method, response.status, response.headers.get('content-type') ?? undefined, body);
        answers.push({ status: response.status, ...body });
      }
      expect(answers.map(({ status, error }) => ({ status, error }))).toEqual([
        { status: 401, error: 'expired gitlab-ci-telemetry-api-request token' },
        { status: 401, error: 'invalid gitlab-ci-telemetry-api-request token' },
        { status: 401, error: 'invalid gitlab-ci-telemetry-api-request token' },
        { status: 401, error: 'invalid gitlab-ci-telemetry-api-request token' },
      ]);

      const running = service;
      const refusals = await waitFor('a log line per refusal', async () => {
        const lines = logLines(running).filter((line) => line.msg === 'internal API caller refused');
        return lines.length === calls.length ? lines : undefined;
      });
      const signature = 'signature does not verify with the secret of INTERNAL_API_SECRET_FILE: GitLab must sign with the same secret';
      expect(refusals.map(({ refusal, reason, request_id }) => ({ refusal, reason, request_id }))).toEqual([
        { refusal: 'unauthenticated', reason: expect.stringMatching(/^expired (9|10|11) s ago \(exp\)$/), request_id: answers[0].request_id },
        { refusal: 'unauthenticated', reason: signature, request_id: answers[1].request_id },
        { refusal: 'unauthenticated', reason: signature, request_id: answers[2].request_id },
        { refusal: 'unauthenticated', reason: signature, request_id: answers[3].request_id },
      ]);
      expect(service.output()).not.toContain(expired);
      expect(service.output()).not.toContain(forged);
    });
  });
});
