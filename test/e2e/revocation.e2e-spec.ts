import { join } from 'node:path';
import { callerKeyDigest, generateCallerKey } from '../../src/internal-api/caller-keys';
import { jobPayloadRequest, RUNNER_TOKEN } from '../fixtures/job-payload';
import { HttpSink, startHttpSink } from '../helpers/http-sink';
import { internalApiHeaders } from '../helpers/internal-api';
import { pickUpJob } from '../helpers/ci-job';
import { GitLabKeys, makeGitLabKeys } from '../helpers/job-tokens';
import { NginxServer, startNginx } from '../helpers/nginx';
import { waitFor } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';

const NGINX_EXAMPLE = join(__dirname, '..', '..', 'deploy', 'nginx', 'ci-job-telemetry-auth.conf');
const GRACE_SECONDS = 1;
const EMPTY_EXPORT = JSON.stringify({ resourceSpans: [] });

/**
 * SPEC §5: a revoked job is refused everywhere within its grace. Every place that decides or reuses
 * a decision for one job at once: the gateway of two replicas (one of them ROLE=gateway, asking
 * the other over HTTP) and nginx asking the auth endpoint. All decide before the revocation.
 */
describe('revocation reaches every replica and gateway within the grace', () => {
  let redis: RedisServer;
  let keys: GitLabKeys;
  let sink: HttpSink;
  let control: ServiceProcess;
  let gatewayOnly: ServiceProcess;
  let nginx: NginxServer;

  beforeAll(async () => {
    const callerKey = generateCallerKey();
    [redis, keys, sink] = await Promise.all([startRedis(), makeGitLabKeys(), startHttpSink()]);
    control = await startService({
      REDIS_URL: redis.url,
      JOB_TOKEN_JWKS_FILE: keys.jwksFile,
      OTLP_UPSTREAM_URL: sink.url,
      AUTH_CALLER_KEY_DIGESTS: callerKeyDigest(callerKey),
      GRANT_REVOKE_GRACE_SECONDS: String(GRACE_SECONDS),
      AUTH_DECISION_MAX_AGE_SECONDS: '60',
    });
    gatewayOnly = await startService({
      ROLE: 'gateway',
      AUTH_URL: `${control.url}/internal/ci/telemetry/auth`,
      REDIS_URL: redis.url,
      OTLP_UPSTREAM_URL: sink.url,
      INTERNAL_API_SECRET_FILE: control.secrets.internalApiSecretFile,
      TRACE_KEY_FILE: control.secrets.traceKeyFile,
    });
    nginx = await startNginx(NGINX_EXAMPLE, { OTLP_UPSTREAM: new URL(sink.url).host, CONTROL_UPSTREAM: new URL(control.url).host, CALLER_KEY: callerKey });
  });

  afterAll(async () => {
    await nginx?.stop();
    await gatewayOnly?.stop();
    await control?.stop();
    await sink?.stop();
    await redis?.stop();
  });

  const exportTo = async (url: string, headers: Record<string, string>, requestId: string) =>
    (await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': requestId, ...headers }, body: EMPTY_EXPORT })).status;

  it('refuses the job at the gateways and behind nginx once the grace is over, whatever the credential, and logs why', async () => {
    const pickup = await pickUpJob(control, jobPayloadRequest({ job: { id: 7001 } }));
    expect(pickup.telemetry.reason).toBe('enabled');
    // The capability URL's path, as a stock runner is handed it (SPEC §4), and the header credentials.
    const capabilityPath = new URL((pickup.payload.features.tracing as { otel_endpoints: Array<{ url: string }> }).otel_endpoints[0].url).pathname;
    const tokens = { authorization: `Bearer ${await keys.sign(7001)}`, 'runner-token': RUNNER_TOKEN };
    const exports = [control.gatewayUrl, gatewayOnly.gatewayUrl, nginx.url].flatMap((base) => [
      { url: `${base}/v1/traces`, headers: tokens },
      { url: `${base}${capabilityPath}`, headers: {} },
    ]);
    const exportAll = (phase: string) => Promise.all(exports.map(({ url, headers }, i) => exportTo(url, headers, `${phase}-${i}`)));
    expect(await exportAll('before')).toEqual([200, 200, 200, 200, 200, 200]);

    const revoked = await fetch(`${control.url}/internal/ci/telemetry/grants/7001`, {
      method: 'DELETE',
      headers: await internalApiHeaders(control.secrets.internalApiSecret),
    });
    expect(revoked.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, GRACE_SECONDS * 1000 + 1100));

    expect(await exportAll('after')).toEqual([403, 403, 403, 403, 403, 403]);
    // Both gateways say why, with the request id, and never with a token or the capability.
    for (const [service, requestId] of [
      [control, 'after-0'],
      [control, 'after-1'],
      [gatewayOnly, 'after-2'],
      [gatewayOnly, 'after-3'],
    ] as const) {
      // The line may reach this process's pipe after the answer did.
      const refusal = await waitFor(`the refusal log of ${requestId}`, async () =>
        service
          .output()
          .split('\n')
          .find((line) => line.includes(`"request_id":"${requestId}"`) && line.includes('export refused')),
      );
      expect(JSON.parse(refusal)).toMatchObject({ refusal: 'forbidden', reason: 'grant revoked' });
      expect(service.output()).not.toContain(tokens.authorization.slice('Bearer '.length));
      expect(service.output()).not.toContain(capabilityPath.split('/')[3]);
    }
  });
});
