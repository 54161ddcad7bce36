import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { callerKeyDigest, generateCallerKey } from '../../src/internal-api/caller-keys';
import { mintCapability } from '../../src/runner-auth/job-capability';
import { JobPayloadRequestBody, jobPayloadRequest, RUNNER_TOKEN } from '../fixtures/job-payload';
import { HttpSink, startHttpSink } from '../helpers/http-sink';
import { GitLabKeys, makeGitLabKeys } from '../helpers/job-tokens';
import { documentedEnvsubst, NGINX_LOGS, NginxLog, NginxServer, startNginx } from '../helpers/nginx';
import { pickUpJob } from '../helpers/ci-job';
import { freePort, waitFor } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';
import { readTracingAsRunner } from '../../simulator/runner-tracing';

const EXAMPLE = join(__dirname, '..', '..', 'deploy', 'nginx', 'ci-job-telemetry-auth.conf');
const OTLP_BODY = JSON.stringify({ resourceSpans: [] });

interface CapabilityUrl {
  readonly jobId: number;
  /** The capability URL's traces endpoint, at `server`'s origin instead of the gateway's. */
  readonly url: string;
  /** The credential segment of its path. */
  readonly capability: string;
}

/** The capability URL a stock runner is handed for a job picked up through `service`, pointed at `server`. */
async function capabilityUrl(
  service: ServiceProcess,
  server: NginxServer,
  jobId: number,
  runner: Partial<JobPayloadRequestBody['runner']> = {},
): Promise<CapabilityUrl> {
  const pickup = await pickUpJob(service, jobPayloadRequest({ job: { id: jobId }, runner }));
  expect(pickup.status).toBe(200);
  const [plan] = readTracingAsRunner(pickup.payload.features).plans;
  const target = new URL(plan.target);
  return { jobId, url: `${server.url}${target.pathname}`, capability: target.pathname.split('/')[3] };
}

const exportTo = (url: string) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: OTLP_BODY });

/** The error log, the http-level `combined` access log and the example's own: which of them hold `secret`. */
const logsHolding = (server: NginxServer, secret: string) => (Object.keys(NGINX_LOGS) as NginxLog[]).filter((name) => server.log(name).includes(secret));

/** The public server's access lines for `jobId`'s exports answered `status`. */
const accessLines = (server: NginxServer, jobId: number, status: number) =>
  server
    .log('example')
    .split('\n')
    .filter((line) => line.includes(`"POST /jobs/${jobId}/<capability>/v1/traces" ${status} `));

/**
 * Once nginx has written its `count`th access line for `jobId`'s exports answered `status` (it writes
 * the line after the answer has gone out), or has written `capability` anywhere: no log holds the
 * capability, and the access log has that line.
 */
async function expectLoggedWithout(capability: string, server: NginxServer, jobId: number, status: number, count = 1): Promise<void> {
  await waitFor(`nginx's access line for job ${jobId} answered ${status}`, async () =>
    accessLines(server, jobId, status).length >= count || logsHolding(server, capability).length > 0 ? true : undefined,
  ).catch(() => undefined);
  expect({ capabilityIn: logsHolding(server, capability) }).toEqual({ capabilityIn: [] });
  expect(accessLines(server, jobId, status)).toHaveLength(count);
}

/** Sends `data` on a connection of its own and hangs up `afterMs` later, reading nothing. */
async function hangUp(server: NginxServer, data: string, afterMs: number): Promise<void> {
  const socket = connect(server.port, '127.0.0.1');
  await once(socket, 'connect');
  socket.write(data);
  await new Promise((resolve) => setTimeout(resolve, afterMs));
  socket.destroy();
}

/** Sends `data` on a connection of its own and answers the status line nginx sends back. */
async function rawExchange(server: NginxServer, data: string): Promise<string> {
  const socket = connect(server.port, '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  socket.write(data);
  try {
    return await waitFor('an answer from nginx', async () => /^HTTP\/1\.1 \d{3}[^\r]*/.exec(received)?.[0]);
  } finally {
    socket.destroy();
  }
}

/** The documented nginx example, for real, in front of a sink, asking the built service. */
describe('nginx auth_request in front of an OTLP endpoint', () => {
  let redis: RedisServer;
  let keys: GitLabKeys;
  let service: ServiceProcess;
  let sink: HttpSink;
  let nginx: NginxServer;
  const callerKey = generateCallerKey();

  beforeAll(async () => {
    [redis, keys, sink] = await Promise.all([startRedis(), makeGitLabKeys(), startHttpSink()]);
    service = await startService({
      REDIS_URL: redis.url,
      JOB_TOKEN_JWKS_FILE: keys.jwksFile,
      AUTH_CALLER_KEY_DIGESTS: callerKeyDigest(callerKey),
    });
    nginx = await startNginx(EXAMPLE, { OTLP_UPSTREAM: new URL(sink.url).host, CONTROL_UPSTREAM: new URL(service.url).host, CALLER_KEY: callerKey });

    expect((await pickUpJob(service, jobPayloadRequest({ job: { id: 4001 } }))).status).toBe(200);
    // A second job, checked for the first time during the store outage (no decision to reuse).
    expect((await pickUpJob(service, jobPayloadRequest({ job: { id: 4002 } }))).status).toBe(200);
  });

  afterAll(async () => {
    await nginx?.stop();
    await service?.stop();
    await sink?.stop();
    await redis?.stop();
  });

  const exportThroughNginx = (headers: Record<string, string>) =>
    fetch(`${nginx.url}/v1/traces`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: OTLP_BODY });

  it('documents one envsubst command, naming every placeholder and none of nginx own variables, in docs/nginx.md too', () => {
    const template = readFileSync(EXAMPLE, 'utf8');
    const { command, variables } = documentedEnvsubst(template);
    const directives = template.replace(/^\s*#.*$/gm, '');
    const placeholders = new Set([...directives.matchAll(/\$\{(\w+)\}/g)].map((match) => match[1]));
    expect([...variables].sort()).toEqual([...placeholders].sort());
    const nginxOwn = new Set([...directives.matchAll(/\$([a-z_][a-z0-9_]*)/g)].map((match) => match[1]));
    expect(nginxOwn.size).toBeGreaterThan(3);
    expect(variables.filter((name) => nginxOwn.has(name))).toEqual([]);
    expect(readFileSync(join(__dirname, '..', '..', 'docs', 'nginx.md'), 'utf8')).toContain(command);
  });

  it('passes an export with valid tokens to the upstream, without the runner credentials', async () => {
    const response = await exportThroughNginx({ authorization: `Bearer ${await keys.sign(4001)}`, 'runner-token': RUNNER_TOKEN });
    expect(response.status).toBe(200);
    const forwarded = sink.received.at(-1)!;
    expect(forwarded.path).toBe('/v1/traces');
    expect(forwarded.body.toString()).toBe(OTLP_BODY);
    expect(forwarded.headers.authorization).toBeUndefined();
    expect(forwarded.headers['runner-token']).toBeUndefined();
  });

  it('serves the capability URL a stock runner is handed, forwarding the plain OTLP path, logging no capability', async () => {
    const { url, capability } = await capabilityUrl(service, nginx, 4003);

    const response = await exportTo(url);
    expect(response.status).toBe(200);
    const forwarded = sink.received.at(-1)!;
    expect(forwarded.path).toBe('/v1/traces');
    expect(forwarded.body.toString()).toBe(OTLP_BODY);
    // Not in a header either: the second hop's X-Original-URI stops at nginx.
    expect(JSON.stringify(forwarded.headers)).not.toContain(capability);
    expect(forwarded.headers['x-original-uri']).toBeUndefined();

    await expectLoggedWithout(capability, nginx, 4003, 200);
  });

  it('passes a large export (over nginx default 16 KiB body buffer) intact', async () => {
    const large = JSON.stringify({ resourceSpans: [{ resource: { attributes: [{ key: 'pad', value: { stringValue: 'x'.repeat(512 * 1024) } }] } }] });
    const response = await fetch(`${nginx.url}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await keys.sign(4001)}`, 'runner-token': RUNNER_TOKEN },
      body: large,
    });
    expect(response.status).toBe(200);
    expect(sink.received.at(-1)!.body.toString()).toBe(large);
  });

  it('answers 401 for bad tokens and forwards nothing', async () => {
    const before = sink.received.length;
    const jwt = await keys.sign(4001);
    expect((await exportThroughNginx({ authorization: `Bearer ${jwt}`, 'runner-token': 'glrt-someone-else' })).status).toBe(401);
    expect((await exportThroughNginx({ authorization: 'Bearer glcbt-forged', 'runner-token': RUNNER_TOKEN })).status).toBe(401);
    expect((await exportThroughNginx({})).status).toBe(401);
    expect(sink.received.length).toBe(before);
  });

  it('answers 403 for a job without telemetry', async () => {
    expect((await exportThroughNginx({ authorization: `Bearer ${await keys.sign(4999)}`, 'runner-token': RUNNER_TOKEN })).status).toBe(403);
  });

  describe('keeps the capability out of every nginx log, whatever the answer', () => {
    it('401 for a forged capability and 403 for a job without telemetry, forwarding nothing', async () => {
      const { url, capability } = await capabilityUrl(service, nginx, 4006);
      const forged = url.replace(capability, 'A'.repeat(32));
      const capabilityKey = Buffer.from(readFileSync(service.secrets.capabilityKeyFile, 'utf8'), 'base64');
      // A genuine capability, of a job nobody picked up: no grant.
      const withoutGrant = mintCapability(capabilityKey, 4998);
      const before = sink.received.length;

      const unauthenticated = await exportTo(forged);
      expect(unauthenticated.status).toBe(401);
      const forbidden = await exportTo(url.replace('/jobs/4006/', '/jobs/4998/').replace(capability, withoutGrant));
      expect(forbidden.status).toBe(403);
      expect(sink.received.length).toBe(before);

      await expectLoggedWithout('A'.repeat(32), nginx, 4006, 401);
      await expectLoggedWithout(withoutGrant, nginx, 4998, 403);
      expect(logsHolding(nginx, capability)).toEqual([]);
    });

    it('413 for a body over the limit, refused by the second server, which says so', async () => {
      const { url, capability } = await capabilityUrl(service, nginx, 4007);
      const status = await rawExchange(
        nginx,
        `POST ${new URL(url).pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 25000000\r\n\r\n`,
      );
      expect(status).toMatch(/^HTTP\/1\.1 413/);
      await expectLoggedWithout(capability, nginx, 4007, 413);
      // Refused, and said so, by the second server.
      expect(nginx.log('error')).toMatch(
        /client intended to send too large body: 25000000 bytes.*server: ci-job-telemetry-capability, request: "POST \/v1\/traces HTTP\/1\.1"/,
      );
    });

    it('400 for a client gone mid-body or mid-headers (why, nginx logs at level info only)', async () => {
      const { url, capability } = await capabilityUrl(service, nginx, 4005);
      const path = new URL(url).pathname;
      const before = sink.received.length;
      // Mid-body: the headers and part of the body, then gone.
      await hangUp(nginx, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{"resourceSpans":[`, 500);
      await expectLoggedWithout(capability, nginx, 4005, 400);
      // Mid-headers: refused before nginx chose a location.
      await hangUp(nginx, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl`, 200);
      await expectLoggedWithout(capability, nginx, 4005, 400, 2);
      expect(sink.received.length).toBe(before);
    });

    describe('behind a collector that is down, asking an auth endpoint that allows one lookup per runner and minute', () => {
      let limited: ServiceProcess;
      let lonely: NginxServer;

      beforeAll(async () => {
        limited = await startService({
          REDIS_URL: redis.url,
          JOB_TOKEN_JWKS_FILE: keys.jwksFile,
          AUTH_CALLER_KEY_DIGESTS: callerKeyDigest(callerKey),
          RUNNER_RATE_LIMIT: '1',
          RUNNER_RATE_WINDOW_SECONDS: '60',
        });
        // Nobody listens there: the collector cannot be reached.
        const collector = `127.0.0.1:${await freePort()}`;
        lonely = await startNginx(EXAMPLE, { OTLP_UPSTREAM: collector, CONTROL_UPSTREAM: new URL(limited.url).host, CALLER_KEY: callerKey });
      });

      afterAll(async () => {
        await lonely?.stop();
        await limited?.stop();
      });

      // A runner of its own: the window is per runner and shared through the store.
      const runner = { id: 71 };

      it('502 when the collector cannot be reached', async () => {
        const { url, capability } = await capabilityUrl(limited, lonely, 5101, runner);
        expect((await exportTo(url)).status).toBe(502);
        await expectLoggedWithout(capability, lonely, 5101, 502);
        expect(lonely.log('error')).toMatch(
          /connect\(\) failed .*server: ci-job-telemetry-capability, request: "POST \/v1\/traces HTTP\/1\.1", upstream: "http:\/\/127\.0\.0\.1:\d+\/v1\/traces"/,
        );
      });

      it('429 with Retry-After when the runner is over its rate limit', async () => {
        const { url, capability } = await capabilityUrl(limited, lonely, 5102, runner);
        const response = await exportTo(url);
        expect(response.status).toBe(429);
        expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
        await expectLoggedWithout(capability, lonely, 5102, 429);
        expect(lonely.log('error')).toMatch(
          /auth request unexpected status: 429 .*server: ci-job-telemetry-capability, request: "POST \/v1\/traces HTTP\/1\.1"/,
        );
      });
    });
  });

  // Last: the store comes back empty.
  it('turns a store outage into a retryable 503 with Retry-After, not a 500 or a 401, on both ways in, logging no capability', async () => {
    const { url, capability } = await capabilityUrl(service, nginx, 4004);
    await redis.stop();
    try {
      const response = await exportThroughNginx({ authorization: `Bearer ${await keys.sign(4002)}`, 'runner-token': RUNNER_TOKEN });
      expect(response.status).toBe(503);
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);

      // Checked for the first time during the outage: no decision to reuse.
      const viaCapability = await exportTo(url);
      expect(viaCapability.status).toBe(503);
      expect(Number(viaCapability.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await redis.start();
    }
    await expectLoggedWithout(capability, nginx, 4004, 503);
    // nginx logs the auth endpoint's 503 as an error of the second server, whose request line has no path.
    expect(nginx.log('error')).toMatch(/auth request unexpected status: 503 .*server: ci-job-telemetry-capability, request: "POST \/v1\/traces HTTP\/1\.1"/);
  });
});
