import { ROOT_CONTEXT, defaultTextMapGetter } from '@opentelemetry/api';
import { ExportResult, ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { jobPayloadRequest, RUNNER_TOKEN } from '../fixtures/job-payload';
import { internalApiHeaders } from '../helpers/internal-api';
import { pickUpJob } from '../helpers/ci-job';
import { GitLabKeys, makeGitLabKeys } from '../helpers/job-tokens';
import { OtlpSink, startOtlpSink } from '../helpers/otlp-sink';
import { ClusterDeployment, RedisNode, SentinelDeployment, startRedisCluster, startSentinelRedis } from '../helpers/redis-topologies';
import { ServiceProcess, startService } from '../helpers/service';

/*
 * SPEC §7 on a real failover: the store's primary is killed (SIGKILL, no goodbye) while job pickups
 * keep arriving and jobs keep exporting through the gateway with the OpenTelemetry SDK. What a user
 * must see: pickups never fail (at worst `degraded`), exports get retryable answers and are retried
 * by the SDK, nothing the gateway acknowledged is lost, and everything flows again afterwards.
 */

const EXPORTING_JOBS = 6;
const SPANS_PER_EXPORT = 5;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Pickup {
  readonly jobId: number;
  readonly at: number;
  readonly status: number;
  readonly reason: string;
}

interface Export {
  readonly names: string[];
  readonly result: ExportResult;
}

interface ExportingJob {
  readonly jobId: number;
  readonly traceparent: string;
  readonly exporter: OTLPTraceExporter;
}

async function pickUp(service: ServiceProcess, jobId: number): Promise<{ status: number; reason: string; traceparent?: string; endpoint?: string }> {
  const job = await pickUpJob(service, jobPayloadRequest({ job: { id: jobId, root_pipeline_id: jobId * 10 } }));
  const tracing = job.payload.features.tracing as { otel_endpoints: Array<{ url: string }> } | undefined;
  return { status: job.status, reason: job.telemetry.reason, traceparent: job.telemetry.traceparent, endpoint: tracing?.otel_endpoints[0].url };
}

/** Spans as a job's instrumented program makes them, parented on the job's TRACEPARENT. */
function recordSpans(traceparent: string, names: string[]): ReadableSpan[] {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'rspec' }),
    spanProcessors: [new SimpleSpanProcessor(memory)],
  });
  const parent = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, { traceparent }, defaultTextMapGetter);
  for (const name of names) provider.getTracer('ci-job').startSpan(name, {}, parent).end();
  return memory.getFinishedSpans();
}

async function authStatus(service: ServiceProcess, keys: GitLabKeys, jobId: number): Promise<number> {
  const response = await fetch(`${service.url}/internal/ci/telemetry/auth`, {
    method: 'POST',
    headers: {
      ...(await internalApiHeaders(service.secrets.internalApiSecret)),
      authorization: `Bearer ${await keys.sign(jobId)}`,
      'runner-token': RUNNER_TOKEN,
    },
  });
  await response.arrayBuffer();
  return response.status;
}

async function metricSum(service: ServiceProcess, pattern: string): Promise<number> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  return [...text.matchAll(new RegExp(pattern, 'gm'))].reduce((sum, match) => sum + Number(match[1]), 0);
}

/** Statuses the gateway answered exports with, from its own metrics. */
async function exportStatuses(service: ServiceProcess): Promise<Record<string, number>> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  const statuses: Record<string, number> = {};
  for (const match of text.matchAll(/^ci_job_telemetry_gateway_requests_total\{signal="traces",status="(\d+)"\} (\d+)/gm)) {
    statuses[match[1]] = Number(match[2]);
  }
  return statuses;
}

/**
 * Runs pickups and exports against the service, kills a primary, and reports what happened. The
 * loops keep going until pickups have been enabled again for a while after the kill.
 */
async function throughFailover(
  service: ServiceProcess,
  sink: OtlpSink,
  keys: GitLabKeys,
  deployment: { replicated(): Promise<void> },
  killPrimary: () => Promise<void>,
  firstJobId: number,
) {
  const jobs: ExportingJob[] = [];
  for (let i = 0; i < EXPORTING_JOBS; i++) {
    const jobId = firstJobId + i;
    const pickup = await pickUp(service, jobId);
    expect(pickup.reason).toBe('enabled');
    // The job's capability URL, used as a stock runner uses it: no credentials of its own.
    const exporter = new OTLPTraceExporter({
      url: pickup.endpoint!,
      // The SDK's own retry budget: enough for the store's Retry-After and a few seconds of election.
      timeoutMillis: 30_000,
    });
    jobs.push({ jobId, traceparent: pickup.traceparent!, exporter });
  }
  // These jobs' grants are on the replica too before anything dies.
  await deployment.replicated();

  let running = true;
  const exports: Export[] = [];
  const exporting = jobs.map(async (job) => {
    for (let batch = 0; running; batch++) {
      const names = Array.from({ length: SPANS_PER_EXPORT }, (_, i) => `job ${job.jobId} batch ${batch} span ${i}`);
      // One export at a time per job, as the SDK's batch processor sends them.
      const result = await new Promise<ExportResult>((resolve) => job.exporter.export(recordSpans(job.traceparent, names), resolve));
      exports.push({ names, result });
      await sleep(100);
    }
  });

  const pickups: Pickup[] = [];
  let killedAt = 0;
  let nextJobId = firstJobId + 1000;
  const picking = (async () => {
    while (running) {
      const jobId = nextJobId++;
      const { status, reason } = await pickUp(service, jobId);
      pickups.push({ jobId, at: Date.now(), status, reason });
      await sleep(20);
    }
  })();

  let notReadyFor = 0;
  const watchingReadiness = (async () => {
    while (running) {
      const started = Date.now();
      const ready = (await fetch(`${service.url}/-/readiness`)).status === 200;
      await sleep(100);
      if (!ready && killedAt > 0) notReadyFor += Date.now() - started;
    }
  })();

  await sleep(1000);
  killedAt = Date.now();
  await killPrimary();

  // Until pickups have been enabled for 1.5 s in a row after the kill (the store is back for the service).
  const deadline = Date.now() + 30_000;
  let switchedAt: number | undefined;
  while (Date.now() < deadline) {
    await sleep(100);
    const afterKill = pickups.filter((pickup) => pickup.at > killedAt);
    const lastNotEnabled = afterKill.filter((pickup) => pickup.reason !== 'enabled').at(-1);
    const firstEnabledAfter = afterKill.find((pickup) => pickup.reason === 'enabled' && (lastNotEnabled === undefined || pickup.at > lastNotEnabled.at));
    if (lastNotEnabled !== undefined && firstEnabledAfter !== undefined && Date.now() - firstEnabledAfter.at > 1500) {
      switchedAt = firstEnabledAfter.at;
      break;
    }
  }
  running = false;
  await Promise.all([...exporting, picking, watchingReadiness]);

  const delivered = new Set(sink.spans().map((span) => span.name));
  const acknowledged = exports.filter((entry) => entry.result.code === ExportResultCode.SUCCESS).flatMap((entry) => entry.names);
  const sent = exports.flatMap((entry) => entry.names);
  const statuses = await exportStatuses(service);
  // What a failover can lose: a grant the old primary acknowledged but had not yet replicated. The
  // job was told `enabled`; the auth endpoint now answers 403 for it.
  const grantChecks = await Promise.all(pickups.filter((pickup) => pickup.reason === 'enabled').map((pickup) => authStatus(service, keys, pickup.jobId)));
  return {
    grantChecks,
    pickups,
    exports,
    switchedAt,
    statuses,
    summary: {
      switchSeenByServiceMs: switchedAt === undefined ? undefined : switchedAt - killedAt,
      notReadyMs: notReadyFor,
      pickups: pickups.length,
      pickupsDegraded: pickups.filter((pickup) => pickup.reason === 'degraded').length,
      pickupsNot200: pickups.filter((pickup) => pickup.status !== 200).length,
      exports: exports.length,
      exportsFailedForTheSdk: exports.filter((entry) => entry.result.code !== ExportResultCode.SUCCESS).length,
      exportAnswersByStatus: statuses,
      spansSent: sent.length,
      spansAcknowledged: acknowledged.length,
      spansDelivered: sent.filter((name) => delivered.has(name)).length,
      acknowledgedButLost: acknowledged.filter((name) => !delivered.has(name)).length,
      enabledPickupsWithoutGrant: grantChecks.filter((status) => status === 403).length,
      storeReconnects: await metricSum(service, /^ci_job_telemetry_store_reconnects_total\{[^}]*\} (\d+)/.source),
      storeFailovers: await metricSum(service, /^ci_job_telemetry_store_failovers_total\{[^}]*\} (\d+)/.source),
    },
  };
}

function expectAUsableFailover(outcome: Awaited<ReturnType<typeof throughFailover>>) {
  const { summary } = outcome;
  // Printed for the record: the numbers docs/redis.md quotes under "Failover".
  process.stdout.write(`failover: ${JSON.stringify(summary)}\n`);
  expect(outcome.switchedAt).toBeDefined();
  expect(summary.pickupsNot200).toBe(0);
  expect(new Set(outcome.pickups.map((pickup) => pickup.reason))).toEqual(new Set(['enabled', 'degraded']));
  expect(summary.pickupsDegraded).toBeGreaterThan(0);
  // Readiness said so while the store could not take writes, and says ready again afterwards.
  expect(summary.notReadyMs).toBeGreaterThan(0);
  // Every answer an export got was a success or one an OTLP exporter retries; none was a refusal.
  expect(Object.keys(outcome.statuses).filter((status) => !['200', '429', '502', '503', '504'].includes(status))).toEqual([]);
  expect(summary.exportsFailedForTheSdk).toBe(0);
  expect(summary.acknowledgedButLost).toBe(0);
  expect(summary.spansDelivered).toBe(summary.spansSent);
  expect(summary.storeFailovers).toBe(1);
  // Afterwards every enabled job is answered from the store: its grant, or (if the failover lost it) 403.
  expect(new Set(outcome.grantChecks.filter((status) => status !== 200 && status !== 403))).toEqual(new Set());
  expect(summary.storeReconnects).toBeGreaterThanOrEqual(1);
}

describe('store failover under load (SPEC §7)', () => {
  let sink: OtlpSink;
  let keys: GitLabKeys;
  beforeAll(async () => ([sink, keys] = await Promise.all([startOtlpSink(), makeGitLabKeys()])));
  afterAll(() => sink?.stop());

  describe('Sentinel: the primary dies, the sentinels promote its replica', () => {
    let deployment: SentinelDeployment;
    let service: ServiceProcess;
    beforeAll(async () => {
      deployment = await startSentinelRedis();
      service = await startService({ ...deployment.env, OTLP_UPSTREAM_URL: sink.url, JOB_TOKEN_JWKS_FILE: keys.jwksFile, LOG_LEVEL: 'warn' });
    }, 60_000);
    afterAll(async () => {
      await service?.stop();
      await deployment?.stop();
    });

    it('keeps pickups answered and loses no acknowledged span, then flows on the new primary', async () => {
      const before = await deployment.primaryPort();
      const outcome = await throughFailover(service, sink, keys, deployment, async () => findNode(deployment.nodes, before).kill(), 70_000);
      expectAUsableFailover(outcome);
      expect(await deployment.primaryPort()).not.toBe(before);
      expect((await fetch(`${service.url}/-/readiness`)).status).toBe(200);
    }, 90_000);
  });

  describe('Cluster: one of three primaries dies, its replica takes its slots', () => {
    let deployment: ClusterDeployment;
    let service: ServiceProcess;
    beforeAll(async () => {
      deployment = await startRedisCluster();
      service = await startService({ ...deployment.env, OTLP_UPSTREAM_URL: sink.url, JOB_TOKEN_JWKS_FILE: keys.jwksFile, LOG_LEVEL: 'warn' });
    }, 60_000);
    afterAll(async () => {
      await service?.stop();
      await deployment?.stop();
    });

    it('keeps pickups answered and loses no acknowledged span, then flows with the promoted replica', async () => {
      const [victim] = await deployment.primaryPorts();
      const outcome = await throughFailover(service, sink, keys, deployment, async () => findNode(deployment.nodes, victim).kill(), 80_000);
      expectAUsableFailover(outcome);
      expect(await deployment.primaryPorts()).not.toContain(victim);
      expect((await fetch(`${service.url}/-/readiness`)).status).toBe(200);
    }, 90_000);
  });
});

function findNode(nodes: RedisNode[], port: number): RedisNode {
  const node = nodes.find((candidate) => candidate.port === port);
  if (node === undefined) throw new Error(`no node on port ${port}`);
  return node;
}
