import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deliverWebhook } from '../../simulator/gitlab-webhooks';
import { BUILD_STAGES } from '../../simulator/stock-runner';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { pickUpJob } from '../helpers/ci-job';
import { writeFlagsFile } from '../helpers/flags-file';
import { WebhookSecret } from '../helpers/gitlab-webhooks';
import { SecretFiles } from '../helpers/internal-api';
import Redis from 'ioredis';
import { RedisServer } from '../helpers/redis';
import { waitFor } from '../helpers/ports';
import { ServiceProcess, startService } from '../helpers/service';
import { CollectedSpan, CollectorStandIn, traceRequestType } from './collector-stand-in';
import { expectedOf, Expected, JobRef, POLICY, Step, Timeline, World } from './pipeline-world';

/**
 * Runs one generated world against the built service, through its public surfaces only: the decorator's route, the
 * webhook route, the gateway's capability URLs, the flag file, /metrics; and reads the verdict at the collector.
 */

export interface Bench {
  readonly collector: CollectorStandIn;
  readonly secrets: SecretFiles;
  readonly webhookSecret: WebhookSecret;
  readonly redis?: RedisServer;
  readonly replicas: number;
}

interface Picked {
  readonly job: JobRef;
  readonly enabled: boolean;
  readonly provisional: boolean;
  readonly traceId: string;
  readonly spanParentId: string;
  readonly path: string;
  /** The runner's span ids, made once so a split export and a retry carry the same spans. */
  readonly runnerSpanIds: string[];
}

export interface RunResult {
  readonly expected: Expected;
  readonly reasons: string[];
  /** The head decision at the pipeline's first traced pickup (undefined: no job was traced). */
  readonly headSampled: boolean | undefined;
  readonly traceId: string | undefined;
  readonly received: CollectedSpan[];
  /** Runner spans the gateway acknowledged with 2xx, and in which part of the story. */
  readonly acknowledged: Array<{ spanId: string; epoch: 1 | 2 }>;
  /**
   * Runner spans of exports the gateway never acknowledged (answered retryable until the exporter gave up, as while
   * the store was away): not the control plane's to deliver, so a span whose parent is one of them is no defect.
   */
  readonly givenUp: string[];
  /** Job spans (span_parent_id) of every traced job, and in which part of the story. */
  readonly jobSpans: Array<{ spanId: string; epoch: 1 | 2 }>;
  readonly parkedBytes: number[];
  readonly outboxSpans: number[];
  readonly log: string[];
  /** What the replicas logged (warnings and errors), crashed ones included: read when a run breaks an invariant. */
  readonly said: string[];
  /** Epoch ms the run started (log lines and a duplicate's arrivals are told relative to it). */
  readonly startedAt: number;
  /**
   * Outbox entries the service said it sent again because a replica stopped between the collector's 2xx and its
   * acknowledgement: the one way a span can reach the collector twice, which no sender can close (readers keep one
   * copy per span id and version). With none, every span must have come once.
   */
  readonly redelivered: number;
  /** When a replica was killed ([at, at]) or the store away (paused or restarting), epoch ms. */
  readonly interruptions: Array<{ from: number; to: number }>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const UPSTREAM_TIMEOUT_MS = 1000;
/** An outbox claim's lease, as the deliverer sizes it: a dead replica's entries are claimed again after it. */
const OUTBOX_LEASE_MS = UPSTREAM_TIMEOUT_MS * 2 + 5000;

/** The service's count of outbox entries sent again after a deliverer stopped mid-delivery (SPEC §10's one exception to "once"). */
const REDELIVERED = 'ci_job_telemetry_outbox_redelivered_total';

async function metricOf(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) && !line.startsWith('#'))
    .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
}

const nanos = (date: Date) => (BigInt(date.getTime()) * 1_000_000n).toString();

/** The runner's export as the OpenTelemetry JS OTLP/HTTP protobuf exporter encodes it. */
function runnerExport(picked: Picked, batch: 'all' | 'stages' | 'last', malformed: boolean): Buffer {
  const hook = picked.job.hook;
  const start = hook.startedAt ?? hook.createdAt;
  const end = hook.finishedAt ?? start;
  const stageMs = (end.getTime() - start.getTime()) / BUILD_STAGES.length;
  const [jobSpanId, ...stageIds] = picked.runnerSpanIds;
  const bytes = (hex: string) => Buffer.from(hex, 'hex');
  const stages = BUILD_STAGES.map((stage, index) => ({
    traceId: bytes(picked.traceId),
    spanId: bytes(stageIds[index]),
    parentSpanId: bytes(jobSpanId),
    flags: 0x101,
    name: stage,
    kind: 1,
    startTimeUnixNano: nanos(new Date(start.getTime() + index * stageMs)),
    endTimeUnixNano: nanos(new Date(start.getTime() + (index + 1) * stageMs)),
    status: {},
  }));
  const jobExecution = {
    traceId: bytes(picked.traceId),
    spanId: bytes(jobSpanId),
    parentSpanId: bytes(picked.spanParentId),
    flags: 0x301,
    name: 'job_execution',
    kind: 1,
    startTimeUnixNano: nanos(start),
    endTimeUnixNano: nanos(end),
    attributes: [
      { key: 'ci.job.id', value: { intValue: String(picked.job.jobId) } },
      { key: 'ci.pipeline.id', value: { stringValue: String(picked.job.pipelineId) } },
      { key: 'ci.job.status', value: { stringValue: hook.status } },
    ],
    status: hook.status === 'failed' ? { code: 2, message: 'job failed' } : {},
  };
  // A span id the Collector cannot decode (5 bytes): what a broken in-job exporter might send.
  const broken = { ...stages[0], spanId: randomBytes(5), name: 'broken', parentSpanId: bytes(jobSpanId) };
  const spans = malformed ? [broken] : batch === 'stages' ? stages : batch === 'last' ? [jobExecution] : [...stages, jobExecution];
  const type = traceRequestType();
  const request = {
    resourceSpans: [
      {
        resource: {
          attributes: [
            { key: 'service.name', value: { stringValue: malformed ? 'in-job' : 'runner' } },
            { key: 'service.version', value: { stringValue: '18.6.0' } },
            { key: 'telemetry.sdk.language', value: { stringValue: 'nodejs' } },
            { key: 'telemetry.sdk.name', value: { stringValue: 'opentelemetry' } },
          ],
        },
        scopeSpans: [{ scope: { name: 'gitlab-ci-runner' }, spans }],
      },
    ],
  };
  return Buffer.from(type.encode(type.fromObject(request)).finish());
}

/** The world's service replicas: started fresh for each run, crashed (SIGKILL) and replaced on the same store. */
class Replicas {
  readonly services: Array<ServiceProcess | undefined> = [];
  private readonly dataDirs: string[] = [];
  /** Output of replicas that crashed, which the fresh ones replacing them do not hold. */
  private readonly crashedOutput: string[] = [];
  /** Redeliveries the crashed replicas had counted, scraped just before each crash. */
  private crashedRedelivered = 0;

  constructor(
    private readonly bench: Bench,
    private readonly flagsFile: string,
  ) {
    for (let index = 0; index < bench.replicas; index++) this.dataDirs.push(mkdtempSync(join(tmpdir(), 'cjt-prop-data-')));
  }

  private env(index: number): Record<string, string> {
    const { bench } = this;
    return {
      INTERNAL_API_SECRET_FILE: bench.secrets.internalApiSecretFile,
      TRACE_KEY_FILE: bench.secrets.traceKeyFile,
      CAPABILITY_KEY_FILE: bench.secrets.capabilityKeyFile,
      FLAGS_FILE: this.flagsFile,
      GITLAB_WEBHOOK_SECRET_FILE: bench.webhookSecret.file,
      OTLP_UPSTREAM_URL: bench.collector.url,
      OTLP_UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS),
      OUTBOX_MAX_BACKOFF_SECONDS: '1',
      WEBHOOK_STORE_TIMEOUT_MS: '300',
      WEBHOOK_REPLAY_MAX_BACKOFF_SECONDS: '1',
      OUTCOME_SAMPLING_MAX_WAIT_SECONDS: '3600',
      // A drop waits this long for facts that come after the root's end: longer than any run's steps take, shorter
      // than the quiet wait (a dropped pipeline's parked bytes must be back to zero by then).
      OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '3',
      DATA_DIR: this.dataDirs[index],
      LOG_LEVEL: process.env.PROPERTY_LOG_LEVEL ?? 'warn',
      ...(bench.redis === undefined ? {} : { REDIS_URL: bench.redis.url }),
    };
  }

  /**
   * Started and ready; or, for a replica replacing a crashed one, answering (its liveness, not its readiness): one
   * that starts while the store is paused is rightly not ready until the store is back, and the world goes on.
   */
  async start(index: number, ready = true): Promise<void> {
    if (ready) {
      this.services[index] = await startService(this.env(index));
      return;
    }
    const service = await startService(this.env(index), { waitReady: false });
    try {
      await waitFor(`replica ${index} answering`, async () => ((await fetch(`${service.url}/-/liveness`)).status === 200 ? true : undefined), 30_000);
    } catch (error) {
      await service.stop('SIGKILL');
      throw error;
    }
    this.services[index] = service;
  }

  async startAll(): Promise<void> {
    await Promise.all(this.dataDirs.map((_, index) => this.start(index)));
  }

  async crash(index: number): Promise<void> {
    const url = this.services[index]?.url;
    if (url !== undefined) this.crashedRedelivered += await metricOf(url, REDELIVERED).catch(() => 0);
    await this.services[index]?.stop('SIGKILL');
    this.crashedOutput.push(...this.linesOf(index, this.services[index], ' (crashed)'));
    this.services[index] = undefined;
    await this.start(index, false);
  }

  at(index: number): ServiceProcess {
    const service = this.services[index % this.services.length];
    if (service === undefined) throw new Error(`replica ${index} is down`);
    return service;
  }

  /** Outbox entries the replicas, crashed ones included, sent again after a lease ran out unanswered. */
  async redelivered(): Promise<number> {
    const live = this.services.flatMap((service) => (service === undefined ? [] : [service.url]));
    return this.crashedRedelivered + (await Promise.all(live.map((url) => metricOf(url, REDELIVERED).catch(() => 0)))).reduce((a, b) => a + b, 0);
  }

  /** Every line the replicas wrote, each with its replica. */
  said(): string[] {
    return [...this.crashedOutput, ...this.services.flatMap((service, index) => this.linesOf(index, service, ''))];
  }

  private linesOf(index: number, service: ServiceProcess | undefined, note: string): string[] {
    return (service?.output() ?? '')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => `replica ${index}${note}: ${line.slice(0, 400)}`);
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.services.map((service) => service?.stop('SIGKILL')));
  }
}

export async function runWorld(bench: Bench, world: World, timeline: Timeline): Promise<RunResult> {
  const log: string[] = [];
  const startedAt = Date.now();
  /** A line of the run's story, with when it happened (ms since the run started), to set beside the collector's arrivals. */
  const note = (...lines: string[]) => log.push(...lines.map((line) => `+${String(Date.now() - startedAt).padStart(5)} ms ${line}`));
  const flagsFile = writeFlagsFile({ sampling: world.rate, outcomeSampling: POLICY });
  const replicas = new Replicas(bench, flagsFile);
  await bench.collector.mode('up');
  bench.collector.reset();
  if (bench.redis !== undefined) await bench.redis.flush();
  await replicas.startAll();
  const picked = new Map<number, Picked>();
  const delivered: Step[] = [];
  const acknowledged: RunResult['acknowledged'] = [];
  const givenUp: string[] = [];
  let headSampled: boolean | undefined;
  let redisPaused = false;
  const interruptions: RunResult['interruptions'] = [];
  let pausedAt = 0;

  const redisSignal = (signal: NodeJS.Signals) => {
    const pid = bench.redis?.pid;
    if (pid !== undefined) process.kill(pid, signal);
  };

  const deliver = async (step: Extract<Step, { kind: 'hook' }>) => {
    // GitLab retries a failed delivery; after a few it would give up, so the model counts only what was accepted.
    for (let attempt = 0; attempt < 4; attempt++) {
      try {
        const answer = await deliverWebhook(replicas.at(step.replica).url, step.event, step.body, { token: bench.webhookSecret.secret, uuid: step.uuid });
        if (answer.status < 300) return true;
        note(`  ${step.event} answered ${answer.status}`);
      } catch (error) {
        note(`  ${step.event} failed: ${String(error)}`);
      }
      await sleep(300);
    }
    return false;
  };

  const exportOnce = async (step: Extract<Step, { kind: 'export' }>, job: Picked) => {
    const body = runnerExport(job, step.batch, step.malformed === true);
    // As the SDK exporter does: retry 429/502/503/504 and network errors a few times, then give up.
    for (let attempt = 0; attempt < 4; attempt++) {
      try {
        const response = await fetch(`${replicas.at(step.replica).gatewayUrl}${job.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-protobuf', 'user-agent': 'OTel-OTLP-Exporter-JavaScript/0.223.1' },
          body,
        });
        const answer = Buffer.from(await response.arrayBuffer());
        if (response.status >= 200 && response.status < 300) {
          const type = traceRequestType().root.lookupType('otlp.ExportTraceServiceResponse');
          const decoded = type.toObject(type.decode(answer), { longs: Number }) as { partialSuccess?: { rejectedSpans?: number } };
          return (decoded.partialSuccess?.rejectedSpans ?? 0) === 0 ? 'acknowledged' : `partly rejected`;
        }
        if (![429, 502, 503, 504].includes(response.status)) return `refused ${response.status}`;
        note(`  export answered ${response.status}, retrying`);
      } catch (error) {
        note(`  export failed: ${String(error)}`);
      }
      await sleep(250);
    }
    return 'gave up';
  };

  try {
    for (const step of timeline.steps) {
      switch (step.kind) {
        case 'pickup': {
          const { job } = step;
          const request = jobPayloadRequest({
            job: {
              id: job.jobId,
              project_id: 7,
              pipeline_id: job.pipelineId,
              root_pipeline_id: job.rootPipelineId,
              queued_at: job.queuedAt.toISOString(),
              token: `glcbt-opaque-job-token-${job.jobId}`,
            },
          });
          const decorated = await pickUpJob({ url: replicas.at(step.replica).url, secrets: { internalApiSecret: bench.secrets.internalApiSecret } }, request);
          const tracing = decorated.payload?.features?.tracing as
            { trace_id: string; span_parent_id: string; otel_endpoints: Array<{ url: string }>; tracestate?: string } | undefined;
          const enabled = decorated.status === 200 && tracing !== undefined;
          const provisional = decorated.telemetry?.provisional === true || tracing?.tracestate === 'ot=th:0';
          note(
            `pickup job ${job.jobId} (pipeline ${job.pipelineId}) on replica ${step.replica}: ${enabled ? (provisional ? 'provisional' : 'head') : decorated.telemetry?.reason}`,
          );
          if (enabled && headSampled === undefined) headSampled = !provisional;
          // The model reads which jobs the service traced, and when (a pickup refused as degraded traced nothing).
          if (enabled) delivered.push(step);
          if (enabled) {
            picked.set(job.jobId, {
              job,
              enabled,
              provisional,
              traceId: tracing.trace_id,
              spanParentId: tracing.span_parent_id,
              path: new URL(tracing.otel_endpoints[0].url).pathname,
              runnerSpanIds: Array.from({ length: 1 + BUILD_STAGES.length }, () => randomBytes(8).toString('hex')),
            });
          }
          break;
        }
        case 'export': {
          const job = picked.get(step.job.jobId);
          if (job === undefined) break;
          const outcome = await exportOnce(step, job);
          note(`export ${step.malformed === true ? 'malformed' : step.batch} of job ${job.job.jobId} on replica ${step.replica}: ${outcome}`);
          const ids = step.batch === 'stages' ? job.runnerSpanIds.slice(1) : step.batch === 'last' ? job.runnerSpanIds.slice(0, 1) : job.runnerSpanIds;
          if (outcome === 'acknowledged' && step.malformed !== true) for (const spanId of ids) acknowledged.push({ spanId, epoch: job.job.epoch });
          else if (outcome === 'gave up' && step.malformed !== true) givenUp.push(...ids);
          break;
        }
        case 'hook': {
          const ok = await deliver(step);
          const attributes = step.body.object_attributes as Record<string, unknown> | undefined;
          note(
            `${step.event} ${step.event === 'Pipeline Hook' ? `pipeline ${String(attributes?.id)} ${String(attributes?.status)}` : `job ${String(step.body.build_id)} ${String(step.body.build_status)}`}${step.fact.about === 'root' && step.fact.stale ? ' (stale replay)' : ''} uuid ${step.uuid.slice(0, 8)} on replica ${step.replica}: ${ok ? 'accepted' : 'not accepted'}`,
          );
          if (ok) delivered.push(step);
          break;
        }
        case 'rate':
          note(`sampling rate → ${step.to} %`);
          writeFlagsFile({ sampling: step.to, outcomeSampling: POLICY }, flagsFile);
          // The file is polled every second: give the change time to apply, so the next pickups see it.
          await sleep(1300);
          break;
        case 'collector':
          note(`collector ${step.mode}`);
          await bench.collector.mode(step.mode);
          break;
        case 'redis':
          note(`redis ${step.action}`);
          if (step.action === 'pause' && !redisPaused) {
            redisSignal('SIGSTOP');
            redisPaused = true;
            pausedAt = Date.now();
          } else if (step.action === 'resume' && redisPaused) {
            redisSignal('SIGCONT');
            redisPaused = false;
            interruptions.push({ from: pausedAt, to: Date.now() });
          } else if (step.action === 'restart') {
            const from = redisPaused ? pausedAt : Date.now();
            if (redisPaused) redisSignal('SIGCONT');
            redisPaused = false;
            await bench.redis?.stop();
            await bench.redis?.start();
            interruptions.push({ from, to: Date.now() });
          }
          break;
        case 'crash':
          note(`replica ${step.replica} crashes (SIGKILL) and a fresh one starts on the same store`);
          interruptions.push({ from: Date.now(), to: Date.now() });
          await replicas.crash(step.replica);
          break;
      }
    }

    // Quiescence: the collector up, the store back, then wait until the outbox is empty and the collector has
    // received nothing new for a while (or the deadline passes: the assertions then say what is missing).
    if (redisPaused) {
      redisSignal('SIGCONT');
      interruptions.push({ from: pausedAt, to: Date.now() });
    }
    await bench.collector.mode('up');
    const deadline = Date.now() + 15_000;
    let seen = -1;
    let stableSince = Date.now();
    let parkedBytes: number[] = [];
    let outboxSpans: number[] = [];
    while (Date.now() < deadline) {
      await sleep(300);
      const urls = replicas.services.flatMap((service) => (service === undefined ? [] : [service.url]));
      parkedBytes = await Promise.all(urls.map((url) => metricOf(url, 'ci_job_telemetry_parked_bytes').catch(() => NaN)));
      outboxSpans = await Promise.all(urls.map((url) => metricOf(url, 'ci_job_telemetry_outbox_spans').catch(() => NaN)));
      if (bench.collector.spans.length !== seen) {
        seen = bench.collector.spans.length;
        stableSince = Date.now();
      }
      const drained = [...parkedBytes, ...outboxSpans].every((value) => value === 0);
      if (drained && Date.now() - stableSince > 1500) break;
    }
    if (bench.redis !== undefined && outboxSpans.some((spans) => spans !== 0)) {
      // What is left in the outbox, for the report: each entry's key, when it is due and its attempts.
      const client = new Redis(bench.redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
      try {
        await client.connect();
        const due = await client.zrange('cjt:{outbox}:due', 0, -1, 'WITHSCORES');
        const attempts = await client.hgetall('cjt:{outbox}:attempts');
        const left = [];
        for (let i = 0; i + 1 < due.length; i += 2) left.push(`${due[i]} due in ${Number(due[i + 1]) - Date.now()} ms, ${attempts[due[i]] ?? 0} attempts`);
        note(`outbox left: ${left.join('; ')}`);
        for (const service of replicas.services) {
          const said = (service?.output() ?? '').split('\n').filter((line) => /outbox|parked|trace /.test(line));
          note(...said.slice(-5).map((line) => `  replica said: ${line.slice(0, 400)}`));
        }
      } finally {
        client.disconnect();
      }
    }
    const traceId = [...picked.values()][0]?.traceId;
    const { expected, reasons } = expectedOf(timeline, delivered, headSampled);
    return {
      expected,
      reasons,
      headSampled,
      traceId,
      received: bench.collector.spans.filter((span) => span.traceId === traceId),
      acknowledged,
      givenUp,
      jobSpans: [...picked.values()].map((job) => ({ spanId: job.spanParentId, epoch: job.job.epoch })),
      parkedBytes,
      outboxSpans,
      log,
      said: replicas.said(),
      redelivered: await replicas.redelivered(),
      interruptions,
      startedAt,
    };
  } finally {
    if (redisPaused) redisSignal('SIGCONT');
    await replicas.stopAll();
  }
}

/** Copies of a span as they arrived: version (or unversioned) and when, in ms since the run started. */
function arrivalsOf(copies: readonly CollectedSpan[], startedAt: number): string {
  return [...copies]
    .sort((a, b) => a.arrival - b.arrival)
    .map((copy) => `${copy.version === undefined ? 'unversioned' : `v${copy.version}`} at +${copy.receivedAt - startedAt} ms`)
    .join(', ');
}

/**
 * The copies of one span less those sent again after a replica stopped mid-delivery: the service counted such
 * redeliveries (without a count, none is excused), the first copy came before an interruption ended (a crash, the
 * store away) and the later one at least a lease after it, when the entry the dead delivery held was claimed again.
 */
function withoutRedeliveries(copies: readonly CollectedSpan[], result: RunResult): CollectedSpan[] {
  if (result.redelivered === 0) return [...copies];
  const kept: CollectedSpan[] = [];
  for (const copy of [...copies].sort((a, b) => a.arrival - b.arrival)) {
    const first = kept.find((earlier) => earlier.version === copy.version);
    const again =
      first !== undefined &&
      copy.receivedAt - first.receivedAt >= OUTBOX_LEASE_MS - 100 &&
      result.interruptions.some((interruption) => first.receivedAt <= interruption.to + 100);
    if (!again) kept.push(copy);
  }
  return kept;
}

/** Every invariant the run breaks, in words (empty when the run is right). */
export function brokenInvariants(result: RunResult): string[] {
  const broken: string[] = [];
  const { received } = result;
  if (result.parkedBytes.some((bytes) => bytes !== 0))
    broken.push(`parking budget not back to zero when nothing waits: parked bytes ${result.parkedBytes.join(', ')}`);
  if (result.outboxSpans.some((spans) => spans !== 0)) broken.push(`outbox not drained with the collector up: ${result.outboxSpans.join(', ')}`);
  // Heard or not (see Expected): nothing at all is right, and so is the pipeline whole.
  if (result.expected === 'either' && received.length === 0) return broken;
  if (result.expected === 'nothing') {
    if (received.length > 0)
      broken.push(`a pipeline the policy drops sent ${received.length} spans: ${[...new Set(received.map((span) => span.name))].join(', ')}`);
    return broken;
  }
  const ids = new Set(received.map((span) => span.spanId));
  const roots = new Set(received.filter((span) => span.parentSpanId === '').map((span) => span.spanId));
  if (roots.size !== 1) broken.push(`${roots.size} roots instead of one`);
  const givenUp = new Set(result.givenUp);
  const orphans = received.filter((span) => span.parentSpanId !== '' && !ids.has(span.parentSpanId) && !givenUp.has(span.parentSpanId));
  if (orphans.length > 0) broken.push(`spans whose parent is missing: ${orphans.map((span) => `${span.name} ${span.spanId}`).join(', ')}`);
  const bySpanId = new Map<string, CollectedSpan[]>();
  for (const span of received) bySpanId.set(span.spanId, [...(bySpanId.get(span.spanId) ?? []), span]);
  for (const [spanId, all] of bySpanId) {
    if (all.length === 1) continue;
    const copies = withoutRedeliveries(all, result);
    // A job span is sent unversioned when the job ends, then as a version when the path is written at the root
    // pipeline's end (SPEC §12): readers take the unversioned copy as version 0, so it may come once, first.
    if (copies.filter((copy) => copy.version === undefined).length > 1) {
      broken.push(`${copies[0].name} ${spanId} delivered ${copies.length} times (${arrivalsOf(copies, result.startedAt)})`);
      continue;
    }
    // Each version once. Their order of arrival is not checked: a version the collector was down for is retried
    // with backoff and can arrive after a newer one, and every reader (the CI view, the read API, npm run -s trace)
    // takes the highest version, which is what SPEC §10's "never an older one over a newer" asks of the trace.
    const versions = [...copies].sort((a, b) => a.arrival - b.arrival).map((copy) => copy.version ?? 0);
    if (new Set(versions).size !== versions.length)
      broken.push(`${copies[0].name} ${spanId}: a version delivered twice (${versions.join(' → ')}; ${arrivalsOf(copies, result.startedAt)})`);
  }
  broken.push(...unexplainedKeeps(result));
  const epochs = result.expected === 'whole-after-reopen' ? [2] : [1, 2];
  const missingAcknowledged = result.acknowledged.filter((span) => epochs.includes(span.epoch) && !ids.has(span.spanId));
  if (missingAcknowledged.length > 0) broken.push(`${missingAcknowledged.length} runner spans acknowledged with 2xx never reached the collector`);
  const missingJobs = result.jobSpans.filter((span) => epochs.includes(span.epoch) && !ids.has(span.spanId));
  if (missingJobs.length > 0) broken.push(`job spans of ${missingJobs.length} traced jobs missing`);
  return broken;
}

/** What a span reaching the collector says of why it was kept, by how its pipeline was (SPEC §11 "Counts stay estimable"). */
const OUTCOME_REASONS: ReadonlySet<string> = new Set(['failed', 'slow', 'queued', 'no_outcome']);
const OUTCOME_TRACE_STATE = 'ot=th:0';

/**
 * Every span says why it was kept, and its trace_state lets a reader weight it: a head-sampled pipeline's runner spans
 * say `head` with the trace_state the runner gave them (none, here); every span of a pipeline kept by its outcome, the
 * runner's and the control plane's, says an outcome and `ot=th:0`, whenever and however it was delivered (parked and
 * released, or forwarded at once after the decision). No span ever says the placeholder of a slot never settled.
 */
function unexplainedKeeps(result: RunResult): string[] {
  const described = (spans: readonly CollectedSpan[]) =>
    [...new Set(spans.map((span) => `${span.name} (${span.serviceName}): reason '${span.samplingReason}', trace_state '${span.traceState}'`))].join(', ');
  const wrong =
    result.headSampled === true
      ? result.received.filter((span) =>
          span.serviceName === 'runner' ? span.samplingReason !== 'head' || span.traceState !== '' : span.samplingReason === 'pending',
        )
      : result.received.filter((span) => !OUTCOME_REASONS.has(span.samplingReason) || span.traceState !== OUTCOME_TRACE_STATE);
  if (wrong.length === 0) return [];
  return [`${result.headSampled === true ? 'head-sampled' : 'kept by its outcome'}, yet ${wrong.length} spans say otherwise: ${described(wrong)}`];
}
