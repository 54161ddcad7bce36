import { copyFileSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { internalApiHeaders } from '../helpers/internal-api';
import { waitFor } from '../helpers/ports';
import { ServiceProcess, startService } from '../helpers/service';

/**
 * Issue 26: replicas started at the same moment in one directory without key files all generate
 * `.secrets/*`; one of them used to exit 70 with EEXIST. Every one must start and use the same keys.
 */
const REPLICAS = 5;

interface Decorated {
  readonly telemetry: { readonly trace_id: string };
  readonly payload: { readonly features: { readonly tracing: { readonly otel_endpoints: ReadonlyArray<{ readonly url: string }> } } };
}

describe('replicas started together in a fresh directory', () => {
  let replicas: ServiceProcess[] = [];
  afterEach(async () => {
    await Promise.all(replicas.map((replica) => replica.stop('SIGKILL')));
    replicas = [];
  });

  it('all start, and all use the keys one of them generated', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cjt-replicas-'));
    copyFileSync(join(__dirname, '..', '..', 'config', 'flags.json'), join(dir, 'flags.json'));
    const env = {
      INTERNAL_API_SECRET_FILE: '',
      TRACE_KEY_FILE: '',
      CAPABILITY_KEY_FILE: '',
      FLAGS_FILE: join(dir, 'flags.json'),
      OTLP_UPSTREAM_URL: 'http://127.0.0.1:1',
    };
    // Spawned without waiting, so they race, and each is stopped afterwards even if it never gets ready.
    replicas = await Promise.all(Array.from({ length: REPLICAS }, () => startService(env, { cwd: dir, waitReady: false })));
    // Five starts at once on a shared machine take longer than one: a wider wait than startService's.
    await Promise.all(
      replicas.map((replica) =>
        waitFor(
          `replica on ${replica.url}`,
          async () => {
            if ((await fetch(`${replica.url}/-/readiness`).catch(() => undefined))?.status === 200) return true;
            throw new Error(`not ready; its output: ${replica.output()}`);
          },
          60_000,
        ),
      ),
    );

    const secrets = join(dir, '.secrets');
    expect(readdirSync(secrets).sort()).toEqual(['capability_key', 'internal_api_secret', 'trace_key']);
    const internalApiSecret = Buffer.from(readFileSync(join(secrets, 'internal_api_secret'), 'utf8').trim(), 'base64');
    const answers = await Promise.all(
      replicas.map(async (replica) => {
        const response = await fetch(`${replica.url}/internal/ci/telemetry/job_payload`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(await internalApiHeaders(internalApiSecret)) },
          body: JSON.stringify(jobPayloadRequest()),
        });
        expect(response.status).toBe(200);
        const body = (await response.json()) as Decorated;
        // The trace id is an HMAC under the trace key, the capability a MAC under the capability key: one job, one answer.
        return { traceId: body.telemetry.trace_id, capability: new URL(body.payload.features.tracing.otel_endpoints[0].url).pathname };
      }),
    );
    expect(new Set(answers.map((answer) => JSON.stringify(answer))).size).toBe(1);
  }, 90_000);
});
