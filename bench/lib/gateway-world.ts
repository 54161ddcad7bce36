import { chmodSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callerKeyDigest } from '../../src/internal-api/caller-keys';
import { jobPayloadRequest, JobPayloadRequestBody } from '../../test/fixtures/job-payload';
import { internalApiHeaders } from '../../test/helpers/internal-api';
import { startNginx } from '../../test/helpers/nginx';
import type { ServiceProcess } from '../../test/helpers/service';
import { repoRoot } from '../../simulator/repo-root';

/**
 * The gateway's world as the benches that measure it (otlp-gateway, runtimes) set it up, so their figures are of the
 * same service: the built service production-like (dist/main.js, ROLE=all, LOG_LEVEL info with stdout to a file, the
 * redis store, JWT job tokens checked against a JWKS file, a grant made through the job_payload endpoint), nginx with
 * the repository's example configuration in front of it, the collector a bytes sink.
 */

/** What the gateway's service is wired to. */
export interface GatewayWiring {
  /** Its store; the in-memory one when absent (an experiment: what the store's round trips cost). */
  readonly redisUrl?: string;
  /** The collector: the bytes sink's origin. */
  readonly upstream: string;
  readonly jwksFile: string;
  /** The key nginx calls the auth endpoint with; the service gets its digest. */
  readonly callerKey: string;
}

/**
 * The service's environment. Only the span quota and rate (SPANS_PER_JOB, SPANS_PER_SECOND_PER_JOB) and the per-runner
 * rate limits (GATEWAY_RUNNER_RATE_LIMIT, and RUNNER_RATE_LIMIT of the auth endpoint nginx asks) are raised, so that
 * one job can be replayed for the whole run.
 */
export function gatewayServiceEnv(wiring: GatewayWiring): Record<string, string> {
  return {
    ROLE: 'all',
    LOG_LEVEL: 'info',
    // What a stock runner is handed (the default, said here since capability exports depend on it).
    RUNNER_ENDPOINT_FORM: 'capability',
    FLAGS_FILE: join(repoRoot(), 'config', 'flags.json'),
    ...(wiring.redisUrl === undefined ? {} : { REDIS_URL: wiring.redisUrl }),
    OTLP_UPSTREAM_URL: wiring.upstream,
    JOB_TOKEN_JWKS_FILE: wiring.jwksFile,
    AUTH_CALLER_KEY_DIGESTS: callerKeyDigest(wiring.callerKey),
    SPANS_PER_JOB: String(2_000_000_000),
    SPANS_PER_SECOND_PER_JOB: String(2_000_000_000),
    GATEWAY_RUNNER_RATE_LIMIT: String(1_000_000_000),
    RUNNER_RATE_LIMIT: String(1_000_000_000),
  };
}

/** nginx in front of one service, with what a bench reads of it. */
export interface AuthNginx {
  readonly url: string;
  /** Its master's pid (its workers are the master's children, proc-cpu.ts childPids); undefined if not found. */
  readonly masterPid: number | undefined;
  /** Stops it, removes its prefix and answers what its error log held. */
  stop(): Promise<string>;
}

/** startNginx keeps its prefix to itself: found by the port its configuration listens on. */
function nginxPrefix(port: number): string | undefined {
  for (const entry of readdirSync(tmpdir())) {
    if (!entry.startsWith('cjt-nginx-')) continue;
    const conf = join(tmpdir(), entry, 'nginx.conf');
    try {
      if (new RegExp(`listen ${port};`).test(readFileSync(conf, 'utf8'))) return join(tmpdir(), entry);
    } catch {
      // another run's, going away
    }
  }
  return undefined;
}

/**
 * nginx with deploy/nginx/ci-job-telemetry-auth.conf: auth_request to `service`'s auth endpoint with the caller key on
 * every export, exports proxied to `upstream`.
 */
export async function startAuthNginx(service: ServiceProcess, wiring: Pick<GatewayWiring, 'upstream' | 'callerKey'>): Promise<AuthNginx> {
  const nginx = await startNginx(join(repoRoot(), 'deploy', 'nginx', 'ci-job-telemetry-auth.conf'), {
    OTLP_UPSTREAM: new URL(wiring.upstream).host,
    CONTROL_UPSTREAM: new URL(service.url).host,
    CALLER_KEY: wiring.callerKey,
  });
  const prefix = nginxPrefix(nginx.port);
  // The example leaves client_body_buffer_size at its default (16 KiB on 64-bit), so every export above it
  // is spooled to client_body_temp_path; startNginx's prefix is mkdtemp's 0700 and a worker started by
  // root runs as nobody, which then fails every such export (500, turned into 503 by the example). Made
  // traversable here, as a real nginx's temp path is: the spooling itself is part of what is measured.
  if (prefix !== undefined) chmodSync(prefix, 0o755);
  return {
    url: nginx.url,
    masterPid: prefix === undefined ? undefined : Number(readFileSync(join(prefix, 'nginx.pid'), 'utf8').trim()),
    stop: async () => {
      await nginx.stop();
      if (prefix === undefined) return '';
      const errors = readFileSync(join(prefix, 'logs', 'error.log'), 'utf8');
      rmSync(prefix, { recursive: true, force: true });
      return errors;
    },
  };
}

/** nginx's error-log lines counted by kind (numbers, clients and times left out); undefined when there were none. */
export function nginxErrorKinds(errorLog: string): string | undefined {
  const lines = errorLog.split('\n').filter((line) => line.length > 0);
  if (lines.length === 0) return undefined;
  const kinds = new Map<string, number>();
  for (const line of lines) {
    const kind = line
      .replace(/^\S+ \S+ \[(\w+)\] \d+#\d+: \*?\d* ?/, '[$1] ')
      .replace(/, client: .*$/, '')
      .replace(/\d+/g, 'N');
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  return [...kinds.entries()].map(([kind, count]) => `${count}× ${kind}`).join('; ');
}

/** A job granted as GitLab's job pickup grants it, and what its pickup answered the runner. */
export interface PickedUpJob {
  readonly request: JobPayloadRequestBody;
  readonly traceId: string;
  /** The path of the capability URL the runner was handed (a credential: never printed). */
  readonly capabilityPath: string;
}

/** Picks up job `jobId` on `service` through its job_payload endpoint: the grant every export of the job is checked against. */
export async function pickUpJob(service: ServiceProcess, jobId: number): Promise<PickedUpJob> {
  const request = jobPayloadRequest({ job: { id: jobId } });
  const pickup = await fetch(`${service.url}/internal/ci/telemetry/job_payload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(await internalApiHeaders(service.secrets.internalApiSecret)) },
    body: JSON.stringify(request),
  });
  const decorated = (await pickup.json()) as {
    telemetry?: { reason?: string; trace_id?: string };
    payload?: { features?: { tracing?: { otel_endpoints?: Array<{ url: string }> } } };
  };
  const endpoint = decorated.payload?.features?.tracing?.otel_endpoints?.[0]?.url;
  if (pickup.status !== 200 || decorated.telemetry?.trace_id === undefined || endpoint === undefined) {
    throw new Error(`job_payload answered ${pickup.status} ${JSON.stringify(decorated.telemetry)}, endpoint ${endpoint === undefined ? 'none' : 'given'}`);
  }
  // The runner exports to the URL it was handed; a bench to its path, on the gateway's port or nginx's.
  const capabilityPath = new URL(endpoint).pathname;
  if (!/^\/jobs\/\d+\/[A-Za-z0-9_-]+\/v1\/traces$/.test(capabilityPath)) throw new Error('job_payload handed no capability URL');
  return { request, traceId: decorated.telemetry.trace_id, capabilityPath };
}
