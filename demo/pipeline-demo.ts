import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signInternalApiToken } from '../src/internal-api/internal-api-token';
import { startLocalCollector } from './local-collector';
import { repoRoot } from './repo-root';
import { BUILD_STAGES, BuildStage, exportJobAsRunner, RunnerJob, TracingFeature } from './stock-runner';
import { formatDuration, renderWaterfall } from './waterfall';

const ROOT = repoRoot();
const PROJECT_ID = 7;
const PIPELINE_ID = 500;
const RUNNER = { id: 17, runner_type: 'project_type', token: 'glrt-demo-runner-token', features: { tracing: true } };

/** A three-job pipeline, build → test → deploy, with what each build stage took (seconds). */
const PIPELINE: ReadonlyArray<{ jobId: number; name: string; stageSeconds: Record<BuildStage, number> }> = [
  {
    jobId: 1001,
    name: 'build',
    stageSeconds: { prepare_executor: 4, get_sources: 3, restore_cache: 6, step_script: 48, after_script: 1, archive_cache: 5, upload_artifacts: 3 },
  },
  {
    jobId: 1002,
    name: 'test',
    stageSeconds: { prepare_executor: 4, get_sources: 2, restore_cache: 7, step_script: 95, after_script: 1, archive_cache: 2, upload_artifacts: 4 },
  },
  {
    jobId: 1003,
    name: 'deploy',
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 1, step_script: 21, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
  },
];
const GAP_BETWEEN_JOBS_SECONDS = 2;

const say = (line = '') => process.stdout.write(`${line}\n`);

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no free port'))));
    });
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface Decorated {
  readonly payload: { features?: { tracing?: TracingFeature }; variables?: Array<{ key: string; value: string }> };
  readonly telemetry: { enabled: boolean; reason: string; trace_id?: string };
}

async function main(): Promise<void> {
  const entry = join(ROOT, 'dist', 'main.js');
  if (!existsSync(entry)) throw new Error('dist/main.js is missing: run `npm run demo`, which builds it first');

  // The service runs on its embedded defaults (in-memory store, the flag file, secrets generated on
  // first start) in a scratch directory, so the demo leaves nothing behind in the clone.
  const workDir = mkdtempSync(join(tmpdir(), 'ci-job-telemetry-demo-'));
  const collector = await startLocalCollector();
  const [internalPort, gatewayPort] = [await freePort(), await freePort()];
  const gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
  let output = '';
  const service: ChildProcess = spawn(process.execPath, [entry], {
    cwd: workDir,
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      INTERNAL_PORT: String(internalPort),
      GATEWAY_PORT: String(gatewayPort),
      GATEWAY_PUBLIC_URL: gatewayUrl,
      OTLP_UPSTREAM_URL: collector.url,
      FLAGS_FILE: join(ROOT, 'config', 'flags.json'),
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  service.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  service.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const internalUrl = `http://127.0.0.1:${internalPort}`;

  try {
    await until('the service to be ready', async () => {
      if (service.exitCode !== null) throw new Error(`the service exited with ${service.exitCode}:\n${output}`);
      return (await fetch(`${internalUrl}/-/readiness`)).status === 200 ? true : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}\n${output}`);
    });
    const internalApiSecret = Buffer.from(readFileSync(join(workDir, '.secrets', 'internal_api_secret'), 'utf8').trim(), 'base64');
    say(`ci-job-telemetry on ${internalUrl} (internal API) and ${gatewayUrl} (OTLP gateway); local collector on ${collector.url}`);
    say();

    const total = PIPELINE.reduce((sum, job) => sum + Object.values(job.stageSeconds).reduce((a, b) => a + b, 0) + GAP_BETWEEN_JOBS_SECONDS, 0);
    let startedAt = Date.now() - total * 1000;
    let traceId = '';
    for (const job of PIPELINE) {
      const response = await fetch(`${internalUrl}/internal/ci/telemetry/job_payload`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'gitlab-ci-telemetry-api-request': await signInternalApiToken(internalApiSecret, 'gitlab') },
        body: JSON.stringify({
          runner: RUNNER,
          job: {
            id: job.jobId,
            project_id: PROJECT_ID,
            pipeline_id: PIPELINE_ID,
            root_pipeline_id: PIPELINE_ID,
            timeout: 3600,
            token: `glcbt-demo-${job.jobId}`,
          },
          payload: {
            id: job.jobId,
            token: `glcbt-demo-${job.jobId}`,
            variables: [
              { key: 'CI_JOB_NAME', value: job.name, public: true },
              { key: 'CI_PIPELINE_ID', value: String(PIPELINE_ID), public: true },
              { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
            ],
            features: { trace_sections: true },
          },
        }),
      });
      if (response.status !== 200) throw new Error(`job ${job.jobId}: the decorator answered ${response.status}: ${await response.text()}`);
      const decorated = (await response.json()) as Decorated;
      const tracing = decorated.payload.features?.tracing;
      if (!decorated.telemetry.enabled || tracing === undefined) throw new Error(`job ${job.jobId}: telemetry not enabled (${decorated.telemetry.reason})`);
      traceId = tracing.trace_id;
      const variable = (key: string) => decorated.payload.variables?.find((entry) => entry.key === key)?.value ?? '';
      // The endpoint URL carries the job's capability, a credential: shown without it.
      const shownUrl = (tracing.otel_endpoints?.[0]?.url ?? '').replace(/\/jobs\/(\d+)\/[^/]+\//, '/jobs/$1/…/');
      say(`job ${job.jobId} (${job.name}) picked up: trace ${tracing.trace_id}, parent span ${tracing.span_parent_id}, export to ${shownUrl}`);

      const runnerJob: RunnerJob = {
        jobId: job.jobId,
        projectId: PROJECT_ID,
        runnerId: RUNNER.id,
        pipelineId: variable('CI_PIPELINE_ID'),
        pipelineSource: variable('CI_PIPELINE_SOURCE'),
        executor: 'shell',
        status: 'success',
        startedAt: new Date(startedAt),
        stageSeconds: job.stageSeconds,
      };
      await exportJobAsRunner(tracing, runnerJob);
      startedAt += (Object.values(job.stageSeconds).reduce((a, b) => a + b, 0) + GAP_BETWEEN_JOBS_SECONDS) * 1000;
    }

    const expected = PIPELINE.length * (1 + BUILD_STAGES.length);
    await until(`${expected} spans at the collector`, () => (collector.spans.length >= expected ? true : undefined), 10_000).catch(() => {
      throw new Error(`the collector received ${collector.spans.length} of ${expected} spans\n${output}`);
    });

    const spans = collector.spans.filter((span) => span.traceId === traceId);
    const first = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
    const last = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
    say();
    say(`pipeline ${PIPELINE_ID} of project ${PROJECT_ID}: trace ${traceId}, ${PIPELINE.length} jobs, ${spans.length} spans, ${formatDuration(last - first)}`);
    say();
    for (const line of renderWaterfall(spans)) say(line);
  } finally {
    if (service.exitCode === null) service.kill('SIGTERM');
    await new Promise((resolve) => (service.exitCode !== null ? resolve(undefined) : service.once('exit', resolve)));
    await collector.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`demo failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
