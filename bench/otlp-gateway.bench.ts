/**
 * OTLP gateway throughput (SPEC §6): the same protobuf trace export sent
 *   direct   straight to an OTLP/HTTP sink (the baseline: reads the body, answers 200 with the empty
 *            all-accepted response, decodes nothing; its own process),
 *   gateway  through the built service's gateway port (ROLE=all: auth with the decision cache, per-runner
 *            rate window and span quota in redis, trace binding and identity stamping, forwarding),
 *   nginx    through nginx with the repository's deploy/nginx/ci-job-telemetry-auth.conf (auth_request to
 *            the same service's auth endpoint with a caller key on every export, proxy to the same sink),
 *   proxy    through the least a Node.js gateway can be (otlp-gateway.proxy.ts: Fastify and our upstream
 *            client, forwarding and nothing else, its own process): what bounds any gateway on this runtime,
 *   floor    through the same proxy also doing what SPEC §6 makes every export do, as the gateway does it (the
 *            runner's window and the job's span quota from the lease ledger's blocks, enforcement, forwarding the
 *            enforced body) but no credential check, log line or metric: what bounds this gateway,
 *   ledger   (not run unless asked) the floor without enforcement: the window and quota charged, the body forwarded
 *            as it came. Beside the floor, what enforcement costs inside a busy process,
 * plus a gzip variant of the export for direct and gateway.
 * The gateway and nginx run in both credential forms (issue 29's targets hold for each), side by side in every round:
 *   gateway, nginx          header credentials (`Authorization: Bearer <job token>`, `Runner-Token`) on /v1/traces,
 *   gateway-cap, nginx-cap  the capability URL a stock runner is handed: the path of the job_payload answer's
 *                           features.tracing.otel_endpoints[0].url (RUNNER_ENDPOINT_FORM=capability), no header;
 *                           nginx takes it as the example configuration does, through its second server
 *                           (${CAPABILITY_HOP}), which passes it to the auth endpoint as X-Original-URI.
 *
 * Run (needs redis-server and nginx; the service is the BUILT one, dist/main.js, which the runner builds first):
 *
 *   npm run bench -- otlp-gateway [options]
 *
 * Options: --targets direct,gateway,nginx,proxy,floor (and ledger)  --credentials headers,capability (the forms of
 *          gateway and nginx)  --variants protobuf,gzip  --rounds 3  --round-seconds 5
 *          --warmup-seconds 2  --connections 16  --spans 100  --attributes 10
 *          --cpu-prof (profiles the service and the proxy, floor and ledger processes, prints each one's busiest
 *                      functions and keeps the .cpuprofile files, named after the process)
 *          experiments: --store memory (no redis: what the store's round trips cost)
 *                       --service-env NAME=VALUE, repeatable (e.g. LOG_LEVEL=warn: what the access log costs;
 *                       OTLP_UPSTREAM_LINGER_MS=0: every export its own upstream request, in the service, the
 *                       proxy and the floor alike, as before issue 29)
 *
 * The machine is shared and noisy, so only ratios against the baseline measured in the same run mean
 * anything: rounds alternate the targets (order rotated each round, so drift hits all alike) and medians
 * are compared. Everything runs on the same few cores (load generator, sink, service, redis, nginx), so
 * the least noisy figure is CPU per request of each process, read from /proc/<pid>/stat (10 ms ticks)
 * around each round ("(sys)": the service's kernel share of it); "total" adds them up, which is what a
 * request costs the machine. The sink's "conn/req" shows who reuses connections to the collector, "upstream
 * req/export" how many requests reached it per export answered (below 1: exports joined upstream, issue 29), and
 * p50/p99 the export's answer time as the load generator saw it.
 * Exits 1 if any request was not answered 2xx, any span was rejected, or the sink did not receive what
 * was answered 2xx.
 *
 * Production-like: dist/main.js as operators run it, LOG_LEVEL info with stdout to a file (every export pays
 * for its access-log line), redis store, a JWT job token checked against a JWKS file, a grant made through
 * the job_payload endpoint. Only the span quota and rate (SPANS_PER_JOB, SPANS_PER_SECOND_PER_JOB) and the per-runner rate limits
 * (GATEWAY_RUNNER_RATE_LIMIT, and RUNNER_RATE_LIMIT of the auth endpoint nginx asks) are raised, so that
 * one job can be replayed for the whole run. That world is lib/gateway-world.ts, shared with runtimes.bench.ts.
 */
import autocannon from 'autocannon';
import { BytesSink, guardedRun, startBytesSink, startChildServer } from './lib/child-process';
import { printTable } from './lib/table';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { generateCallerKey } from '../src/internal-api/caller-keys';
import { RUNNER_TOKEN } from '../test/fixtures/job-payload';
import { makeSecretFiles, SecretFiles } from '../test/helpers/internal-api';
import { ServiceProcess, startService } from '../test/helpers/service';
import { makeGitLabKeys } from '../test/helpers/job-tokens';
import { RedisServer, startRedis } from '../test/helpers/redis';
import { printCpuProfiles } from './lib/cpu-profile-summary';
import { median } from './lib/percentiles';
import { childPids, procCpuMicros, procCpuTimes } from './lib/proc-cpu';
import { repoRoot } from '../simulator/repo-root';
import { runBench } from './lib/bench-env';
import { describeExport, otlpTypes, traceExport } from './otlp-gateway.payload';
import { AuthNginx, gatewayServiceEnv, nginxErrorKinds, pickUpJob, startAuthNginx } from './lib/gateway-world';

type Target = 'direct' | 'gateway' | 'nginx' | 'proxy' | 'floor' | 'ledger';
/** How the runner authenticates: tokens in headers, or the per-job capability URL (docs/gateway.md). */
type Form = 'headers' | 'capability';
/** What one round measures: a target, and for the gateway and nginx one credential form (the plain name is headers). */
type Lane = Target | 'gateway-cap' | 'nginx-cap';
type Variant = 'protobuf' | 'gzip';
type Component = 'generator' | 'service' | 'sink' | 'redis' | 'nginx' | 'proxy' | 'floor' | 'ledger';
/** The service's kernel time apart: syscalls, and on loopback the receiving side's TCP work too. */
type Measured = Component | 'serviceSystem';
const COMPONENTS: readonly Component[] = ['generator', 'service', 'sink', 'redis', 'nginx', 'proxy', 'floor', 'ledger'];
const DEFAULT_TARGETS: readonly Target[] = ['direct', 'gateway', 'nginx', 'proxy', 'floor'];
const ALL_TARGETS: readonly Target[] = [...DEFAULT_TARGETS, 'ledger'];
/**
 * nginx and the bare proxy only see the wire bytes, so their gzip figures would say nothing new; the gateway's gzip
 * cost is the same whatever credential came with the export, so it is measured once.
 */
const GZIP_LANES: readonly Lane[] = ['direct', 'gateway', 'gateway-cap'];
const FORMS: readonly Form[] = ['headers', 'capability'];
const JOB_ID = 7_300_001;
const EXPORT_PATH = '/v1/traces';

const { values: args } = parseArgs({
  options: {
    targets: { type: 'string', default: DEFAULT_TARGETS.join(',') },
    credentials: { type: 'string', default: FORMS.join(',') },
    variants: { type: 'string', default: 'protobuf,gzip' },
    rounds: { type: 'string', default: '3' },
    'round-seconds': { type: 'string', default: '5' },
    'warmup-seconds': { type: 'string', default: '2' },
    connections: { type: 'string', default: '16' },
    spans: { type: 'string', default: '100' },
    attributes: { type: 'string', default: '10' },
    'cpu-prof': { type: 'boolean', default: false },
    store: { type: 'string', default: 'redis' },
    'service-env': { type: 'string', multiple: true, default: [] },
  },
});
const options = {
  targets: args.targets.split(',').map((target) => target.trim()) as Target[],
  credentials: args.credentials.split(',').map((form) => form.trim()) as Form[],
  variants: args.variants.split(',').map((variant) => variant.trim()) as Variant[],
  rounds: Number(args.rounds),
  roundSeconds: Number(args['round-seconds']),
  warmupSeconds: Number(args['warmup-seconds']),
  connections: Number(args.connections),
  spans: Number(args.spans),
  attributes: Number(args.attributes),
  cpuProf: args['cpu-prof'],
  store: args.store as 'redis' | 'memory',
  /** Experiments, e.g. --service-env LOG_LEVEL=warn: what the gateway would gain without its access log. */
  serviceEnv: Object.fromEntries(args['service-env'].map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)])),
};
if (options.store !== 'redis' && options.store !== 'memory') throw new Error(`unknown store ${options.store}`);
for (const target of options.targets) if (!ALL_TARGETS.includes(target)) throw new Error(`unknown target ${target}`);
// The floor charges its quota in redis, as the gateway does; with --store memory there is no redis to charge.
if (options.store === 'memory') options.targets = options.targets.filter((target) => target !== 'floor' && target !== 'ledger');
for (const variant of options.variants) if (variant !== 'protobuf' && variant !== 'gzip') throw new Error(`unknown variant ${variant}`);

for (const form of options.credentials) if (!FORMS.includes(form)) throw new Error(`unknown credential form ${form}`);

const targetOf = (lane: Lane): Target => (lane === 'gateway-cap' ? 'gateway' : lane === 'nginx-cap' ? 'nginx' : lane);
const formOf = (lane: Lane): Form => (lane === 'gateway-cap' || lane === 'nginx-cap' ? 'capability' : 'headers');
const lanes: readonly Lane[] = options.targets.flatMap((target): Lane[] =>
  target === 'gateway' || target === 'nginx' ? options.credentials.map((form) => (form === 'headers' ? target : (`${target}-cap` as const))) : [target],
);
/** gzip once for the gateway: with header credentials when they are measured, else with the capability. */
const gzipLanes = GZIP_LANES.filter((lane) => lane !== 'gateway-cap' || !lanes.includes('gateway'));
const lanesOf = (variant: Variant) => lanes.filter((lane) => variant === 'protobuf' || gzipLanes.includes(lane));

/** One load run against one target. CPU figures are µs per answered request, NaN when not measured. */
interface RunStats {
  readonly ok: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly reqPerSec: number;
  readonly cpuPerRequest: Record<Measured, number>;
  /** Share of one core the load generator (this process) used: near 100 % means it, not the target, was the limit. */
  readonly generatorCpuShare: number;
  readonly sink: { readonly requests: number; readonly bytes: number; readonly connections: number };
  /** Export answer times as the load generator saw them: what coalescing adds shows here (issue 29). */
  readonly latencyMs: { readonly p50: number; readonly p99: number };
}

const failures: string[] = [];

// ---------------------------------------------------------------------------------------------------

async function metricsText(service: ServiceProcess): Promise<string> {
  return (await fetch(`${service.url}/metrics`)).text();
}

/** `name{labels} value` lines of one metric, keyed by the label set as written. */
function metricValues(text: string, name: string): Record<string, number> {
  const values: Record<string, number> = {};
  for (const match of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) values[match[1]] = Number(match[2]);
  return values;
}

async function main(): Promise<void> {
  const root = repoRoot();
  const work = mkdtempSync(join(tmpdir(), 'cjt-otlp-gateway-bench-'));
  /** With --cpu-prof, a process's node arguments that profile it into `<name>.cpuprofile`. */
  const profiled = (name: string): string[] =>
    options.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${join(work, 'profiles')}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
  const started = performance.now();
  const planned = options.variants.reduce((sum, variant) => sum + lanesOf(variant).length * (options.warmupSeconds + options.rounds * options.roundSeconds), 0);
  const { stops, stopAll } = guardedRun(planned + 90);

  const types = otlpTypes();
  const secrets: SecretFiles = makeSecretFiles();
  const keys = await makeGitLabKeys();
  const callerKey = generateCallerKey();
  let redis: RedisServer | undefined;
  let sink: BytesSink | undefined;
  let service: ServiceProcess | undefined;
  let nginx: AuthNginx | undefined;
  let proxy: { origin: string; pid: number; stop(): Promise<void> } | undefined;
  let floor: { origin: string; pid: number; stop(): Promise<void> } | undefined;
  let ledger: { origin: string; pid: number; stop(): Promise<void> } | undefined;
  const reports: Record<Variant, Partial<Record<Lane, RunStats[]>>> = { protobuf: {}, gzip: {} };
  let payloadBytes = 0;
  let gzipBytes = 0;
  let counters: { before: string; after: string } | undefined;
  let logBytes = 0;
  let totalOk = 0;
  let nginxErrors = '';

  try {
    if (options.store === 'redis') {
      redis = await startRedis();
      stops.push(() => redis!.stop());
    }
    sink = await startBytesSink(join(__dirname, 'otlp-gateway.sink.js'));
    stops.push(() => sink!.stop());
    const logFile = join(work, 'service.log');
    const wiring = { redisUrl: redis?.url, upstream: sink.origin, jwksFile: keys.jwksFile, callerKey };
    service = await startService({ ...gatewayServiceEnv(wiring), ...options.serviceEnv }, { logFile, nodeArgs: profiled('service'), secrets });
    stops.push(async () => {
      await service!.stop();
      logBytes = existsSync(logFile) ? statSync(logFile).size : 0;
    });
    if (options.targets.includes('nginx')) {
      nginx = await startAuthNginx(service, wiring);
      stops.push(async () => void (nginxErrors = await nginx!.stop()));
    }
    // The proxy and the floor join exports upstream as the service does (issue 29), with its linger: the bound
    // stays honest. `--service-env OTLP_UPSTREAM_LINGER_MS=0` measures all three sending each export alone.
    const lingerEnv = { OTLP_UPSTREAM_LINGER_MS: options.serviceEnv.OTLP_UPSTREAM_LINGER_MS ?? '2' };
    if (options.targets.includes('proxy')) {
      proxy = await startChildServer(join(__dirname, 'otlp-gateway.proxy.js'), { OTLP_UPSTREAM_URL: sink.origin, ...lingerEnv }, profiled('proxy'));
      stops.push(() => proxy!.stop());
    }
    const nginxMaster = nginx?.masterPid;
    const redisProcess = redis?.pid;

    // The grant, as GitLab's job pickup makes it; the job token as GitLab signs it.
    const { request: pickupRequest, traceId, capabilityPath } = await pickUpJob(service, JOB_ID);
    const { job, runner } = pickupRequest;
    const identity = { jobId: job.id, projectId: job.project_id, pipelineId: job.pipeline_id, runnerId: runner.id, traceId };
    const floorEnv = { OTLP_UPSTREAM_URL: sink.origin, REDIS_URL: redis?.url ?? '', FLOOR_IDENTITY: JSON.stringify(identity), ...lingerEnv };
    if (options.targets.includes('floor')) {
      floor = await startChildServer(join(__dirname, 'otlp-gateway.proxy.js'), floorEnv, profiled('floor'));
      stops.push(() => floor!.stop());
    }
    if (options.targets.includes('ledger')) {
      // Charged the spans each export carries, as the floor is after enforcing them.
      ledger = await startChildServer(
        join(__dirname, 'otlp-gateway.proxy.js'),
        { ...floorEnv, FLOOR_ENFORCE: 'no', FLOOR_SPANS: String(options.spans) },
        profiled('ledger'),
      );
      stops.push(() => ledger!.stop());
    }
    const jobToken = await keys.sign(JOB_ID, { expiresIn: 3600 });

    const payload = traceExport(types, { traceId, spans: options.spans, attributesPerSpan: options.attributes });
    const gzipped = gzipSync(payload);
    payloadBytes = payload.length;
    gzipBytes = gzipped.length;
    const bodies: Record<Variant, Buffer> = { protobuf: payload, gzip: gzipped };
    const headersFor = (variant: Variant, lane: Lane): Record<string, string> => ({
      'content-type': 'application/x-protobuf',
      ...(formOf(lane) === 'headers' && (targetOf(lane) === 'gateway' || targetOf(lane) === 'nginx')
        ? { authorization: `Bearer ${jobToken}`, 'runner-token': RUNNER_TOKEN }
        : {}),
      ...(variant === 'gzip' ? { 'content-encoding': 'gzip' } : {}),
    });
    const origins: Record<Target, string> = {
      direct: sink.origin,
      gateway: service.gatewayUrl,
      nginx: nginx?.url ?? '',
      proxy: proxy?.origin ?? '',
      floor: floor?.origin ?? '',
      ledger: ledger?.origin ?? '',
    };
    const urlOf = (lane: Lane) => origins[targetOf(lane)] + (formOf(lane) === 'capability' ? capabilityPath : EXPORT_PATH);

    console.log(
      'OTLP gateway: protobuf trace exports direct to a sink vs through the gateway vs through nginx auth_request (ratios are the result; absolute numbers are noise)',
    );
    console.log(
      `load average ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')} at start · export ${options.spans} spans × ${options.attributes} attributes = ${(payloadBytes / 1024).toFixed(1)} KiB ` +
        `(gzip ${(gzipBytes / 1024).toFixed(1)} KiB) · ${options.connections} connections · ${options.rounds}×${options.roundSeconds} s alternating rounds per variant · ` +
        `~${planned} s of load · store ${options.store} · ${cpus().length} CPUs` +
        (Object.keys(options.serviceEnv).length === 0 ? '' : ` · service env ${JSON.stringify(options.serviceEnv)}`),
    );

    // Smoke: one export each, checked where it landed: a gateway that answers 200 without forwarding would be a cheap lie.
    for (const variant of options.variants) {
      for (const lane of lanesOf(variant)) {
        const target = targetOf(lane);
        const response = await fetch(urlOf(lane), { method: 'POST', headers: headersFor(variant, lane), body: bodies[variant] });
        const answer = Buffer.from(await response.arrayBuffer());
        if (response.status !== 200) throw new Error(`${lane} ${variant}: smoke export answered ${response.status}: ${answer.toString('utf8', 0, 300)}`);
        const received = await sink.last('application/x-protobuf');
        // The floor enforces as the gateway does, so the sink must get the same.
        if (target === 'gateway' || target === 'floor') {
          const partial = types.response.toObject(types.response.decode(answer)) as { partialSuccess?: unknown };
          if (partial.partialSuccess !== undefined) throw new Error(`gateway ${variant}: partial success ${JSON.stringify(partial.partialSuccess)}`);
          const forwarded = describeExport(types, received.body);
          const identity = forwarded.resources[0] ?? {};
          if (
            received.contentEncoding !== '' ||
            forwarded.spans !== options.spans ||
            forwarded.traceIds.join() !== traceId ||
            String(identity['ci.job.id']) !== String(JOB_ID) ||
            String(identity['ci.project.id']) !== '7'
          ) {
            throw new Error(
              `${lane} ${variant}: the sink got ${forwarded.spans} spans in ${forwarded.traceIds.join()} with ${JSON.stringify(identity)} (encoding '${received.contentEncoding}')`,
            );
          }
        } else if (!received.body.equals(bodies[variant])) {
          throw new Error(`${lane} ${variant}: the sink did not get the export as sent (${received.body.length} bytes)`);
        }
      }
    }
    // Auth really is in the path of both, in either form: no tokens, or a forged capability, no export.
    for (const lane of lanes.filter((l) => targetOf(l) === 'gateway' || targetOf(l) === 'nginx')) {
      const forged = urlOf(lane).replace(/\/jobs\/(\d+)\/[^/]+\//, (_, job: string) => `/jobs/${job}/${'A'.repeat(32)}/`);
      const refused = await fetch(forged, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: payload });
      await refused.arrayBuffer();
      if (refused.status !== 401) throw new Error(`${lane}: an export without credentials answered ${refused.status}, not 401`);
    }

    const cpuNow = (): Record<Measured, number> => {
      const generator = process.cpuUsage();
      const serviceCpu = procCpuTimes(service!.pid);
      const nginxCpu = nginxMaster === undefined ? Number.NaN : [nginxMaster, ...childPids(nginxMaster)].reduce((sum, pid) => sum + procCpuMicros(pid), 0);
      return {
        generator: generator.user + generator.system,
        service: serviceCpu.user + serviceCpu.system,
        serviceSystem: serviceCpu.system,
        sink: procCpuMicros(sink!.pid),
        redis: redisProcess === undefined ? Number.NaN : procCpuMicros(redisProcess),
        nginx: nginxCpu,
        proxy: proxy === undefined ? Number.NaN : procCpuMicros(proxy.pid),
        floor: floor === undefined ? Number.NaN : procCpuMicros(floor.pid),
        ledger: ledger === undefined ? Number.NaN : procCpuMicros(ledger.pid),
      };
    };

    const run = async (lane: Lane, variant: Variant, seconds: number, label: string): Promise<RunStats> => {
      const sinkBefore = await sink!.stats();
      const cpuBefore = cpuNow();
      const wallBefore = performance.now();
      const result = await autocannon({
        url: urlOf(lane),
        method: 'POST',
        headers: headersFor(variant, lane),
        body: bodies[variant],
        connections: options.connections,
        pipelining: 1,
        duration: seconds,
        timeout: 10,
      });
      const wallMicros = (performance.now() - wallBefore) * 1000;
      const cpuAfter = cpuNow();
      const sinkAfter = await sink!.stats();
      const answered = result['2xx'] + result.non2xx;
      const errors = result.errors + result.mismatches; // autocannon counts timeouts in errors too
      if (result.non2xx > 0 || errors > 0) failures.push(`${label}: ${result.non2xx} non-2xx answers, ${errors} errors/timeouts`);
      const sinkDelta = {
        requests: sinkAfter.requests - sinkBefore.requests,
        bytes: sinkAfter.bytes - sinkBefore.bytes,
        connections: sinkAfter.connections - sinkBefore.connections,
      };
      // Requests in flight when autocannon stops are forwarded but not counted, so the sink may see a few more. Exports
      // coalesced upstream (issue 29) arrive fewer requests than exports, so what is checked is bytes: each export
      // answered 2xx reached the sink with at least the bytes it was sent with (enforcement only adds identity).
      if (sinkDelta.bytes < result['2xx'] * bodies[variant].length) {
        failures.push(`${label}: ${result['2xx']} exports answered 2xx but the sink got ${sinkDelta.bytes} bytes, less than they were sent with`);
      }
      totalOk += targetOf(lane) === 'gateway' ? result['2xx'] : 0;
      const cpuPerRequest = Object.fromEntries(
        [...COMPONENTS, 'serviceSystem' as const].map((component) => [
          component,
          answered === 0 ? Number.NaN : (cpuAfter[component] - cpuBefore[component]) / answered,
        ]),
      ) as Record<Measured, number>;
      return {
        ok: result['2xx'],
        non2xx: result.non2xx,
        errors,
        reqPerSec: result['2xx'] / result.duration,
        cpuPerRequest,
        generatorCpuShare: (cpuAfter.generator - cpuBefore.generator) / wallMicros,
        sink: sinkDelta,
        latencyMs: { p50: result.latency.p50, p99: result.latency.p99 },
      };
    };

    counters = { before: await metricsText(service), after: '' };
    for (const variant of options.variants) {
      const measured = lanesOf(variant);
      for (const lane of measured) await run(lane, variant, options.warmupSeconds, `${lane} ${variant} warm-up`);
      for (let round = 0; round < options.rounds; round++) {
        const order = measured.map((_, i) => measured[(i + round) % measured.length]);
        for (const lane of order) {
          const stats = await run(lane, variant, options.roundSeconds, `${lane} ${variant} round ${round + 1}`);
          (reports[variant][lane] ??= []).push(stats);
        }
      }
    }
    counters.after = await metricsText(service);
  } catch (error) {
    failures.push(String((error as Error).stack ?? error));
  } finally {
    await stopAll();
  }

  printReport(reports, payloadBytes, gzipBytes);
  if (counters !== undefined && counters.after !== '') checkCounters(counters.before, counters.after, totalOk);
  console.log(
    `service log ${(logBytes / 1024 / 1024).toFixed(1)} MiB · total ${((performance.now() - started) / 1000).toFixed(0)} s · load average at end ${loadavg()
      .map((load) => load.toFixed(1))
      .join(' ')}`,
  );

  // e.g. "a client request body is buffered to a temporary file": a cost of the example configuration.
  const errorKinds = nginxErrorKinds(nginxErrors);
  if (errorKinds !== undefined) console.log(`nginx error log: ${errorKinds}`);
  if (options.cpuProf) printCpuProfiles(join(work, 'profiles'), root);
  else rmSync(work, { recursive: true, force: true });
  rmSync(secrets.dir, { recursive: true, force: true });
  rmSync(dirname(keys.jwksFile), { recursive: true, force: true });

  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

/** The gateway's own counters over the measured part: every span accepted, every answer 200. */
function checkCounters(before: string, after: string, gatewayOk: number): void {
  const delta = (name: string) => {
    const was = metricValues(before, name);
    return Object.fromEntries(Object.entries(metricValues(after, name)).map(([labels, value]) => [labels, value - (was[labels] ?? 0)]));
  };
  const items = delta('ci_job_telemetry_gateway_items_total');
  const requests = delta('ci_job_telemetry_gateway_requests_total');
  const cache = delta('ci_job_telemetry_gateway_decision_cache_total');
  const accepted = items['signal="traces",outcome="accepted"'] ?? 0;
  const rejected = Object.entries(items).filter(([labels, value]) => !labels.includes('outcome="accepted"') && value > 0);
  const refused = Object.entries(requests).filter(([labels, value]) => !labels.includes('status="200"') && value > 0);
  if (rejected.length > 0) failures.push(`gateway rejected spans: ${JSON.stringify(Object.fromEntries(rejected))}`);
  if (refused.length > 0) failures.push(`gateway answered other than 200: ${JSON.stringify(Object.fromEntries(refused))}`);
  if (accepted < gatewayOk * options.spans) failures.push(`gateway accepted ${accepted} spans for ${gatewayOk} exports of ${options.spans}`);
  console.log(
    `checked (gateway counters, measured part): ${accepted} spans accepted for ${gatewayOk} exports counted 2xx, ` +
      `rejected ${rejected.length === 0 ? 0 : JSON.stringify(Object.fromEntries(rejected))}; decision cache ${JSON.stringify(cache)}`,
  );
  // Issue 21: the leases' store calls per export (goal under 0.05 on a steady job), warm-up included in neither.
  const storeCalls = delta('ci_job_telemetry_gateway_store_calls_total');
  const calls = Object.values(storeCalls).reduce((sum, value) => sum + value, 0);
  console.log(
    `store round trips per gateway export: ${fixed(ratio(calls, gatewayOk), 4)} (${calls} calls for ${gatewayOk} exports: ` +
      `${Object.entries(storeCalls)
        .map(([labels, value]) => `${labels.replace(/^kind="(.*)"$/, '$1')} ${value}`)
        .join(', ')}; goal under 0.05)`,
  );
}

const fixed = (value: number | undefined, digits: number) => (value === undefined || Number.isNaN(value) ? '-' : value.toFixed(digits));
const ratio = (a: number, b: number) => (b === 0 ? Number.NaN : a / b);

function printReport(reports: Record<Variant, Partial<Record<Lane, RunStats[]>>>, payloadBytes: number, gzipBytes: number): void {
  const medianOf = (runs: RunStats[] | undefined, pick: (run: RunStats) => number) =>
    runs === undefined || runs.length === 0 ? Number.NaN : median(runs.map(pick));
  const header = [
    'variant',
    'target',
    'req/s by round',
    'median',
    'spans/s',
    'µs CPU/req: svc',
    '(sys)',
    'sink',
    'redis',
    'nginx',
    'proxy',
    'gen',
    'total',
    'gen CPU',
    'sink B/req',
    'sink conn/req',
    'upstream req/export',
    'p50 ms',
    'p99 ms',
  ];
  const rows: string[][] = [header];
  const verdicts: string[] = [];
  for (const variant of options.variants) {
    const runs = reports[variant];
    for (const lane of lanesOf(variant)) {
      const target = targetOf(lane);
      const rounds = runs[lane];
      if (rounds === undefined) continue;
      const cpu = (component: Measured) => medianOf(rounds, (run) => run.cpuPerRequest[component]);
      const total = medianOf(rounds, (run) =>
        COMPONENTS.reduce((sum, component) => sum + (Number.isNaN(run.cpuPerRequest[component]) ? 0 : run.cpuPerRequest[component]), 0),
      );
      const reqPerSec = medianOf(rounds, (run) => run.reqPerSec);
      rows.push([
        variant,
        lane,
        rounds.map((run) => fixed(run.reqPerSec, 0)).join(' '),
        fixed(reqPerSec, 0),
        fixed(reqPerSec * options.spans, 0),
        fixed(cpu('service'), 0),
        fixed(cpu('serviceSystem'), 0),
        fixed(cpu('sink'), 0),
        fixed(cpu('redis'), 0),
        target === 'nginx' ? fixed(cpu('nginx'), 0) : '-',
        target === 'proxy' || target === 'floor' || target === 'ledger' ? fixed(cpu(target), 0) : '-',
        fixed(cpu('generator'), 0),
        fixed(total, 0),
        `${fixed(
          medianOf(rounds, (run) => run.generatorCpuShare * 100),
          0,
        )}%`,
        fixed(
          medianOf(rounds, (run) => run.sink.bytes / Math.max(1, run.sink.requests)),
          0,
        ),
        fixed(
          medianOf(rounds, (run) => run.sink.connections / Math.max(1, run.sink.requests)),
          2,
        ),
        fixed(
          medianOf(rounds, (run) => run.sink.requests / Math.max(1, run.ok)),
          3,
        ),
        fixed(
          medianOf(rounds, (run) => run.latencyMs.p50),
          2,
        ),
        fixed(
          medianOf(rounds, (run) => run.latencyMs.p99),
          2,
        ),
      ]);
    }
    const pair = (a: Lane, b: Lane) => {
      const ra = runs[a];
      const rb = runs[b];
      if (ra === undefined || rb === undefined) return undefined;
      const throughput = ratio(
        medianOf(ra, (run) => run.reqPerSec),
        medianOf(rb, (run) => run.reqPerSec),
      );
      // Per-round ratios (each round ran the targets back to back) show how much of the median ratio is noise.
      const perRound = ra.map((run, i) => fixed(ratio(run.reqPerSec, rb[i]?.reqPerSec ?? Number.NaN), 2)).join(' ');
      return `${a}/${b} ${fixed(throughput, 2)} (per round ${perRound})`;
    };
    const pairs = [
      pair('gateway', 'direct'),
      pair('nginx', 'direct'),
      pair('gateway', 'nginx'),
      pair('gateway-cap', 'nginx-cap'),
      pair('proxy', 'nginx'),
      pair('floor', 'nginx'),
      pair('gateway', 'proxy'),
      pair('gateway', 'floor'),
      pair('gateway-cap', 'floor'),
      // What each form costs against the other, through the same process.
      pair('gateway-cap', 'gateway'),
      pair('nginx-cap', 'nginx'),
      pair('floor', 'ledger'),
    ].filter((text) => text !== undefined);
    if (pairs.length > 0) verdicts.push(`${variant}: throughput ${pairs.join(' · ')}`);
  }
  // What gzip costs the gateway, per request, against plain protobuf in the same run (one credential form: see GZIP_LANES).
  const gzipLane: Lane = gzipLanes.includes('gateway') ? 'gateway' : 'gateway-cap';
  const gatewayPlain = reports.protobuf[gzipLane];
  const gatewayGzip = reports.gzip[gzipLane];
  if (gatewayPlain !== undefined && gatewayGzip !== undefined) {
    const svc = (runs: RunStats[]) => median(runs.map((run) => run.cpuPerRequest.service));
    verdicts.push(
      `gzip: gateway service CPU/request ×${fixed(ratio(svc(gatewayGzip), svc(gatewayPlain)), 2)} of plain protobuf ` +
        `(${fixed(svc(gatewayPlain), 0)} → ${fixed(svc(gatewayGzip), 0)} µs); it forwards the export inflated: ` +
        `${(gzipBytes / 1024).toFixed(1)} KiB in, ${(median(gatewayGzip.map((run) => run.sink.bytes / Math.max(1, run.sink.requests))) / 1024).toFixed(1)} KiB out`,
    );
  }
  // The gateway and nginx in each credential form measured: [gateway lane, nginx lane, what the form is called].
  const formPairs = options.credentials.map((form) =>
    form === 'headers' ? (['gateway', 'nginx', 'header credentials'] as const) : (['gateway-cap', 'nginx-cap', 'capability URL'] as const),
  );
  for (const [gateway, nginx, called] of formPairs) {
    const gatewayRuns = reports.protobuf[gateway];
    const nginxRuns = reports.protobuf[nginx];
    if (gatewayRuns === undefined || nginxRuns === undefined) continue;
    const svc = (runs: RunStats[]) => median(runs.map((run) => run.cpuPerRequest.service));
    verdicts.push(
      `service CPU/request, ${called}: gateway (auth cached + quota + enforce + forward) ${fixed(svc(gatewayRuns), 0)} µs vs auth endpoint behind nginx (full auth every export) ${fixed(svc(nginxRuns), 0)} µs`,
    );
  }
  // Issue 12's and 29's targets, judged here and never in a test, for each credential form against nginx taking the
  // same form: throughput ratios of the same run, path CPU per export; gzip as service CPU.
  const protobufRuns = reports.protobuf;
  const throughputOf = (lane: Lane) => medianOf(protobufRuns[lane], (run) => run.reqPerSec);
  const judged = (name: string, value: number, holds: (value: number) => boolean, bound: string) =>
    Number.isNaN(value) ? undefined : `${name} ${fixed(value, 2)} (target ${bound}: ${holds(value) ? 'met' : 'MISSED'})`;
  const svcOf = (runs: RunStats[] | undefined) => medianOf(runs, (run) => run.cpuPerRequest.service);
  const pathCpu = (runs: RunStats[] | undefined, parts: Measured[]) =>
    medianOf(runs, (run) => parts.reduce((sum, part) => sum + (Number.isNaN(run.cpuPerRequest[part]) ? 0 : run.cpuPerRequest[part]), 0));
  const targets = [
    ...formPairs.flatMap(([gateway, nginx]) => [
      judged(`${gateway}/${nginx}`, ratio(throughputOf(gateway), throughputOf(nginx)), (value) => value >= 1.5, '≥ 1.5'),
      judged(`${gateway}/direct`, ratio(throughputOf(gateway), throughputOf('direct')), (value) => value >= 0.25, '≥ 0.25'),
      // Issue 21: CPU per export of the whole path, each with the store it needs: service + redis, against service + redis + nginx.
      judged(
        `${gateway} path CPU/${nginx} path CPU`,
        ratio(pathCpu(protobufRuns[gateway], ['service', 'redis']), pathCpu(protobufRuns[nginx], ['service', 'redis', 'nginx'])),
        (value) => value <= 0.67,
        '≤ 0.67',
      ),
    ]),
    judged('gzip/protobuf service CPU', ratio(svcOf(reports.gzip[gzipLane]), svcOf(reports.protobuf[gzipLane])), (value) => value <= 1.3, '≤ 1.3'),
  ].filter((text) => text !== undefined);
  if (targets.length > 0) verdicts.push(`targets: ${targets.join(' · ')}`);
  const proxyOverNginx = ratio(throughputOf('proxy'), throughputOf('nginx'));
  if (!Number.isNaN(proxyOverNginx)) {
    verdicts.push(
      `bound: a Node.js proxy that checks nothing reaches ${fixed(proxyOverNginx, 2)}× nginx auth_request; the gateway reaches ` +
        `${fixed(ratio(throughputOf('gateway'), throughputOf('proxy')), 2)}× that proxy (${fixed(ratio(throughputOf('gateway-cap'), throughputOf('proxy')), 2)}× with the capability URL)`,
    );
  }
  const floorOverNginx = ratio(throughputOf('floor'), throughputOf('nginx'));
  const floorOverDirect = ratio(throughputOf('floor'), throughputOf('direct'));
  if (!Number.isNaN(floorOverNginx) || !Number.isNaN(floorOverDirect)) {
    verdicts.push(
      `bound: a proxy doing only what every export must (quota and window from leased blocks, enforcement, forwarding) reaches ` +
        `${fixed(floorOverNginx, 2)}× nginx auth_request and ${fixed(floorOverDirect, 2)}× direct; the gateway (which also authenticates, logs and counts) ` +
        `reaches ${fixed(ratio(throughputOf('gateway'), throughputOf('floor')), 2)}× that (${fixed(ratio(throughputOf('gateway-cap'), throughputOf('floor')), 2)}× with the capability URL)`,
    );
  }
  // The CPU target's bound, in the same run: what the proxy that checks nothing, and the floor, cost per export against the nginx path.
  for (const [gateway, nginx, called] of formPairs) {
    const nginxPathCpu = pathCpu(protobufRuns[nginx], ['service', 'redis', 'nginx']);
    const proxyCpu = ratio(pathCpu(protobufRuns.proxy, ['proxy']), nginxPathCpu);
    if (Number.isNaN(proxyCpu)) continue;
    verdicts.push(
      `bound (CPU, ${called}): per export, the Node.js proxy that checks nothing costs ${fixed(proxyCpu, 2)}× the nginx path's CPU, ` +
        `the floor (with its redis) ${fixed(ratio(pathCpu(protobufRuns.floor, ['floor', 'redis']), nginxPathCpu), 2)}×, ` +
        `the gateway (with its redis) ${fixed(ratio(pathCpu(protobufRuns[gateway], ['service', 'redis']), nginxPathCpu), 2)}×`,
    );
  }
  console.log('');
  printTable(rows);
  console.log('');
  console.log(`export ${payloadBytes} B (gzip ${gzipBytes} B); "sink B/req" is what reached the collector per export`);
  for (const verdict of verdicts) console.log(verdict);
}

runBench(main);
