import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { callerKeyDigest, generateCallerKey } from '../../src/internal-api/caller-keys';
import { jobPayloadRequest, RUNNER_TOKEN } from '../fixtures/job-payload';
import { HttpSink, startHttpSink } from '../helpers/http-sink';
import { GitLabKeys, makeGitLabKeys } from '../helpers/job-tokens';
import { documentedEnvsubst, NginxServer, startNginx } from '../helpers/nginx';
import { pickUpJob } from '../helpers/ci-job';
import { RedisServer, startRedis } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';
import { readTracingAsRunner } from '../helpers/stock-runner';

const EXAMPLE = join(__dirname, '..', '..', 'deploy', 'nginx', 'ci-job-telemetry-auth.conf');
const OTLP_BODY = JSON.stringify({ resourceSpans: [] });

/** The documented nginx example, for real, in front of a sink, asking the built service. */
describe('nginx auth_request in front of an OTLP endpoint', () => {
  let redis: RedisServer;
  let keys: GitLabKeys;
  let service: ServiceProcess;
  let sink: HttpSink;
  let nginx: NginxServer;

  beforeAll(async () => {
    const callerKey = generateCallerKey();
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

  it('documents one envsubst command, naming every placeholder and none of nginx own variables, in README too', () => {
    const template = readFileSync(EXAMPLE, 'utf8');
    const { command, variables } = documentedEnvsubst(template);
    const directives = template.replace(/^\s*#.*$/gm, '');
    const placeholders = new Set([...directives.matchAll(/\$\{(\w+)\}/g)].map((match) => match[1]));
    expect([...variables].sort()).toEqual([...placeholders].sort());
    const nginxOwn = new Set([...directives.matchAll(/\$([a-z_][a-z0-9_]*)/g)].map((match) => match[1]));
    expect(nginxOwn.size).toBeGreaterThan(3);
    expect(variables.filter((name) => nginxOwn.has(name))).toEqual([]);
    expect(readFileSync(join(__dirname, '..', '..', 'README.md'), 'utf8')).toContain(command);
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
    const { payload } = await pickUpJob(service, jobPayloadRequest({ job: { id: 4003 } }));
    const [plan] = readTracingAsRunner(payload.features).plans;
    const viaNginx = plan.target.replace(new URL(plan.target).origin, nginx.url);
    const capability = new URL(plan.target).pathname.split('/')[3];

    const response = await fetch(viaNginx, { method: 'POST', headers: { 'content-type': 'application/json' }, body: OTLP_BODY });
    expect(response.status).toBe(200);
    expect(sink.received.at(-1)!.path).toBe('/v1/traces');

    const forged = viaNginx.replace(capability, 'A'.repeat(32));
    const before = sink.received.length;
    expect((await fetch(forged, { method: 'POST', headers: { 'content-type': 'application/json' }, body: OTLP_BODY })).status).toBe(401);
    expect(sink.received.length).toBe(before);
    expect(nginx.logs()).toContain('/jobs/…/v1/traces');
    expect(nginx.logs()).not.toContain(capability);
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

  it('turns a store outage into a retryable 503 with Retry-After, not a 500 or a 401', async () => {
    await redis.stop();
    try {
      const response = await exportThroughNginx({ authorization: `Bearer ${await keys.sign(4002)}`, 'runner-token': RUNNER_TOKEN });
      expect(response.status).toBe(503);
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await redis.start();
    }
  });
});
