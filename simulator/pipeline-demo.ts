import { ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { localCollectorDirectory } from '../src/collector/collector-files';
import { signInternalApiToken } from '../src/internal-api/internal-api-token';
import { deliverWebhook, jobHook, pipelineHook, WebhookJob, WebhookPipeline } from './gitlab-webhooks';
import { ReceivedSpan, startLocalCollector } from './local-collector';
import { repoRoot } from './repo-root';
import { BUILD_STAGES, BuildStage, exportJobAsRunner, RunnerJob, TracingFeature } from './stock-runner';
import { formatDuration, formatSeconds, latestVersions, renderWaterfall } from '../src/cli/waterfall';
import type { Regressions } from '../src/across/regressions';
import type { RunnerQueue, WhatIf } from '../src/across/runner-queue';
import type { WasteLedger } from '../src/across/waste';
import { Comparison, comparisonLines, queueLines, regressionLines, shortSha, wasteLines, whatIfLines } from './across-answers';
import { pipelineSeries, SeriesPipeline } from './pipeline-series';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { MCP_PATH } from '../src/mcp/mcp.route';

const ROOT = repoRoot();
const PROJECT_ID = 7;
const PIPELINE_ID = 500;
const RUNNER = { id: 17, runner_type: 'project_type', token: 'glrt-demo-runner-token', features: { tracing: true } };
const RUNNER_DESCRIPTION = 'demo shell runner';
const WEBHOOK_SECRET = 'demo-webhook-secret';

/**
 * A three-job pipeline whose jobs run side by side (`needs: []`): how long each waited in the queue before
 * the runner picked it up, and what each build stage took (seconds).
 */
const PIPELINE: ReadonlyArray<{ jobId: number; name: string; stage: string; queuedSeconds: number; stageSeconds: Record<BuildStage, number> }> = [
  {
    jobId: 1001,
    name: 'build',
    stage: 'build',
    queuedSeconds: 14,
    stageSeconds: { prepare_executor: 4, get_sources: 3, restore_cache: 6, step_script: 48, after_script: 1, archive_cache: 5, upload_artifacts: 3 },
  },
  {
    jobId: 1002,
    name: 'test',
    stage: 'test',
    queuedSeconds: 12,
    stageSeconds: { prepare_executor: 4, get_sources: 2, restore_cache: 7, step_script: 95, after_script: 1, archive_cache: 2, upload_artifacts: 4 },
  },
  {
    jobId: 1003,
    name: 'lint',
    stage: 'test',
    queuedSeconds: 9,
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 1, step_script: 21, after_script: 1, archive_cache: 1, upload_artifacts: 1 },
  },
];

/**
 * The demo's timeline, in seconds from the pickup (the one moment that is real: the decorator stamps it).
 * The pipeline was created before its jobs were queued; each runner starts its job a second after picking
 * it up; GitLab marks a job finished a second after the runner's last stage, and the pipeline a second
 * after its last job.
 */
const PIPELINE_CREATED = -15;
const RUNNER_STARTS = 1;
const GITLAB_SEES_THE_END = 1;
/** How much earlier than the timeline's pickup the decorator is called (see main). */
const PICKUP_EARLY_MS = 250;

const spanCount = (count: number) => `${count} span${count === 1 ? '' : 's'}`;

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
  readonly telemetry: { enabled: boolean; reason: string; trace_id?: string; tracestate?: string; provisional?: boolean };
}

/** A job picked up through the decorator: its `features.tracing`, its payload's variables, and how it is sampled. */
interface PickedUp {
  readonly tracing: TracingFeature;
  readonly variable: (key: string) => string;
  /** The decorator's `telemetry.tracestate`: the head decision's `ot=th`, or `ot=th:0` for a provisional pipeline. */
  readonly tracestate?: string;
  /** `telemetry.provisional`: head sampling left the pipeline out, and its outcome will keep or drop it (SPEC §11). */
  readonly provisional: boolean;
}

/**
 * What GitLab's job-request API does when a runner picks a job up: the job, queued at `queuedAt`, through the decorator.
 * Without `queuedAt` the service stamps no queue wait at the pickup: GitLab's hooks say when the job became pending.
 */
async function pickUp(
  internalUrl: string,
  internalApiSecret: Buffer,
  jobId: number,
  name: string,
  queuedAt: Date | undefined,
  pipelineId = PIPELINE_ID,
  runner: typeof RUNNER = RUNNER,
): Promise<PickedUp> {
  const response = await fetch(`${internalUrl}/internal/ci/telemetry/job_payload`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'gitlab-ci-telemetry-api-request': await signInternalApiToken(internalApiSecret, 'gitlab') },
    body: JSON.stringify({
      runner,
      job: {
        id: jobId,
        project_id: PROJECT_ID,
        pipeline_id: pipelineId,
        root_pipeline_id: pipelineId,
        timeout: 3600,
        token: `glcbt-demo-${jobId}`,
        ...(queuedAt === undefined ? {} : { queued_at: queuedAt.toISOString() }),
      },
      payload: {
        id: jobId,
        token: `glcbt-demo-${jobId}`,
        variables: [
          { key: 'CI_JOB_NAME', value: name, public: true },
          { key: 'CI_PIPELINE_ID', value: String(pipelineId), public: true },
          { key: 'CI_PIPELINE_SOURCE', value: 'push', public: true },
        ],
        features: { trace_sections: true },
      },
    }),
  });
  if (response.status !== 200) throw new Error(`job ${jobId}: the decorator answered ${response.status}: ${await response.text()}`);
  const decorated = (await response.json()) as Decorated;
  const tracing = decorated.payload.features?.tracing;
  if (!decorated.telemetry.enabled || tracing === undefined) throw new Error(`job ${jobId}: telemetry not enabled (${decorated.telemetry.reason})`);
  return {
    tracing,
    variable: (key) => decorated.payload.variables?.find((entry) => entry.key === key)?.value ?? '',
    ...(decorated.telemetry.tracestate === undefined ? {} : { tracestate: decorated.telemetry.tracestate }),
    provisional: decorated.telemetry.provisional === true,
  };
}

/** The next whole second at which a pickup can be stamped (see main), not before `notBefore`; waits until just before it. */
async function pickupMoment(notBefore = 0): Promise<number> {
  const pickup = Math.max(notBefore, Math.ceil((Date.now() + PICKUP_EARLY_MS + 1) / 1000) * 1000);
  while (Date.now() < pickup - PICKUP_EARLY_MS) await new Promise((resolve) => setTimeout(resolve, Math.max(1, pickup - PICKUP_EARLY_MS - Date.now())));
  return pickup;
}

/** What the stories after the first one run on: the service, the local collector, and how hooks are delivered. */
interface Demo {
  readonly internalUrl: string;
  readonly internalApiSecret: Buffer;
  readonly collector: Awaited<ReturnType<typeof startLocalCollector>>;
  readonly deliver: (what: string, event: 'Job Hook' | 'Pipeline Hook', body: Record<string, unknown>) => Promise<void>;
}

const RETRIED_PIPELINE_ID = 501;
/** Short jobs, so that the retry is picked up a few real seconds after the failure. */
const quickStages = (script: number): Record<BuildStage, number> => ({
  prepare_executor: 0.25,
  get_sources: 0.25,
  restore_cache: 0.25,
  step_script: script,
  after_script: 0.25,
  archive_cache: 0.25,
  upload_artifacts: 0.25,
});

/**
 * The second pipeline: its `test` job fails, the pipeline with it; someone retries it (GitLab makes a new
 * job, same name, `retries_count` 1, and puts the pipeline back to running), the retry passes, and the
 * pipeline finishes again, `success`. Its span is sent again, same id, as a newer version (SPEC §10);
 * printed is the final picture, each span in its latest version.
 */
async function retriedPipeline(demo: Demo): Promise<void> {
  say();
  say(`Then a flaky test: pipeline ${RETRIED_PIPELINE_ID}'s test job fails, is retried, and passes.`);
  say();
  const pickup = await pickupMoment();
  const at = (seconds: number) => new Date(pickup + seconds * 1000);
  const runner = { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER_DESCRIPTION };
  const run = async (jobId: number, name: string, status: 'success' | 'failed', queuedAt: Date, script: number, retriesCount = 0): Promise<WebhookJob> => {
    const picked = await pickUp(demo.internalUrl, demo.internalApiSecret, jobId, name, queuedAt, RETRIED_PIPELINE_ID);
    const startedAt = new Date(Math.round(Date.now() / 1000) * 1000);
    const stages = quickStages(script);
    await exportJobAsRunner(picked.tracing, {
      jobId,
      projectId: PROJECT_ID,
      runnerId: RUNNER.id,
      pipelineId: picked.variable('CI_PIPELINE_ID'),
      pipelineSource: picked.variable('CI_PIPELINE_SOURCE'),
      executor: 'shell',
      status,
      startedAt,
      stageSeconds: stages,
    });
    const seconds = BUILD_STAGES.reduce((sum, stage) => sum + stages[stage], 0);
    return {
      id: jobId,
      name,
      stage: name,
      status,
      createdAt: queuedAt,
      startedAt,
      finishedAt: new Date(startedAt.getTime() + seconds * 1000),
      queuedSeconds: (pickup - queuedAt.getTime()) / 1000,
      retriesCount,
      runner,
      ...(status === 'failed' ? { failureReason: 'script_failure' } : {}),
    };
  };
  // GitLab marks the pipeline finished on the whole second after its last job, as Pipeline Hooks write times.
  const pipeline = (status: string, jobs: WebhookJob[], lastJobEnd?: Date): WebhookPipeline => ({
    id: RETRIED_PIPELINE_ID,
    projectId: PROJECT_ID,
    status,
    createdAt: at(-2),
    finishedAt: lastJobEnd === undefined ? undefined : new Date(Math.ceil(lastJobEnd.getTime() / 1000 + GITLAB_SEES_THE_END) * 1000),
    jobs,
  });

  const [build, test] = await Promise.all([run(2001, 'build', 'success', at(-2), 2), run(2002, 'test', 'failed', at(-2), 1)]);
  for (const job of [test, build])
    await demo.deliver(`job ${job.id} (${job.name}) ${job.status}`, 'Job Hook', jobHook(pipeline('running', [build, test]), job));
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} failed`, 'Pipeline Hook', pipelineHook(pipeline('failed', [build, test], build.finishedAt)));

  // Retried when the pipeline had failed: a new job, queued then, picked up a second later.
  const retryQueued = build.finishedAt!;
  await pickupMoment(retryQueued.getTime() + 1000);
  const running = { ...test, id: 2003, status: 'running', createdAt: retryQueued, startedAt: undefined, finishedAt: undefined, retriesCount: 1 };
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} running again`, 'Pipeline Hook', pipelineHook(pipeline('running', [build, running])));
  const retry = await run(2003, 'test', 'success', retryQueued, 1, 1);
  await demo.deliver(`job ${retry.id} (${retry.name}, retry 1) ${retry.status}`, 'Job Hook', jobHook(pipeline('running', [build, retry]), retry));
  await demo.deliver(`pipeline ${RETRIED_PIPELINE_ID} success`, 'Pipeline Hook', pipelineHook(pipeline('success', [build, retry], retry.finishedAt)));

  // Two versions of the pipeline span: 8 of the runners' spans, a job and a queue_wait span per job, and the job spans
  // again at each end, with the critical path of the pipeline's story then.
  const traceOf = demo.collector.spans.find((span) => span.attributes['ci.job.id'] === 2001)?.traceId ?? '';
  const expected = 3 * (1 + BUILD_STAGES.length) + 2 * 3 + 2 + 2 + 3;
  const inTrace = () => demo.collector.spans.filter((span) => span.traceId === traceOf);
  await until(`${expected} spans of pipeline ${RETRIED_PIPELINE_ID} at the collector`, () => (inTrace().length >= expected ? true : undefined));
  const versions = inTrace()
    .filter((span) => span.name === 'pipeline')
    .sort((a, b) => Number(a.attributes['ci.pipeline.span.version']) - Number(b.attributes['ci.pipeline.span.version']));
  const spans = latestVersions(inTrace());
  const first = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
  const last = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
  say();
  say(
    `pipeline ${RETRIED_PIPELINE_ID}'s span reached the collector ${versions.length} times, one span id, each a newer version: ${versions.map((span) => span.attributes['ci.pipeline.status']).join(', then ')}`,
  );
  say(
    `pipeline ${RETRIED_PIPELINE_ID} of project ${PROJECT_ID}, final picture: trace ${traceOf}, 3 jobs (test twice), ${spans.length} spans, ${formatDuration(last - first)}`,
  );
  say();
  for (const line of renderWaterfall(spans)) say(line);
}

/** The service's Prometheus samples of `name`, by their labels as written (`decision="kept",reason="failed"`; `` when none). */
async function samples(internalUrl: string, name: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${internalUrl}/metrics`)).text();
  const found = new Map<string, number>();
  for (const line of text.split('\n')) {
    const sample = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (sample?.[1] === name) found.set(sample[2] ?? '', Number(sample[3]));
  }
  return found;
}

/** The operator's edit of the flag file, live: in force once the service has read it. */
async function replaceFlagFile(demo: Demo & { flagsFile: string }, flags: string): Promise<void> {
  // Written whole and renamed over the old one, as an editor saves: the service never reads half a file.
  const writtenAt = Date.now();
  writeFileSync(`${demo.flagsFile}.new`, flags);
  renameSync(`${demo.flagsFile}.new`, demo.flagsFile);
  // In force once the service has read it: its flag definitions are younger than the file.
  await until('the service to read the new flag file', async () => {
    const asked = Date.now();
    const age = (await samples(demo.internalUrl, 'ci_job_telemetry_flag_definitions_age_seconds')).get('');
    return age !== undefined && age * 1000 < asked - writtenAt ? true : undefined;
  });
}

const SAMPLED_PERCENT = 10;
/**
 * What outcome keeping keeps, the policy docs/sampling.md shows: failed pipelines, those over 30 minutes, those with
 * a job that waited over 10 minutes for a runner; and those whose outcome never comes.
 */
const OUTCOME_POLICY = { keep: { statuses: ['failed'], slower_than_seconds: 1800, queued_longer_than_seconds: 600 }, when_no_outcome: 'keep' };
/** Why a pipeline was kept, by its `ci.sampling.reason`, as a person says it. */
const KEPT_BECAUSE: Record<string, string> = {
  failed: 'it failed',
  slow: `it ran longer than ${OUTCOME_POLICY.keep.slower_than_seconds / 60} minutes`,
  queued: `a job of it waited longer than ${OUTCOME_POLICY.keep.queued_longer_than_seconds / 60} minutes for a runner`,
  no_outcome: 'its outcome never came',
};

/**
 * The flag file at 10 % head sampling with outcome keeping on: the repository's example (config/flags.json) with
 * the sampling toggle's rollout at 10, and `ci_job_telemetry_outcome_sampling` on for every project, its policy the
 * variant's JSON payload, as an operator writes it in Unleash (docs/sampling.md).
 */
function flagsWithOutcomeKeeping(example: string): string {
  const flags = JSON.parse(example) as { features: Array<{ name: string; strategies: Array<{ parameters: Record<string, string> }> }> };
  for (const feature of flags.features) if (feature.name === 'ci_job_telemetry_sampling') feature.strategies[0].parameters.rollout = String(SAMPLED_PERCENT);
  const outcomeSampling = {
    name: 'ci_job_telemetry_outcome_sampling',
    description: 'Keep the pipelines head sampling left out when their outcome is worth it (SPEC §11)',
    enabled: true,
    strategies: [
      {
        name: 'flexibleRollout',
        parameters: { rollout: '100', stickiness: 'projectId', groupId: 'ci_job_telemetry_outcome_sampling' },
        constraints: [],
      },
    ],
    variants: [
      { name: 'policy', weight: 1000, weightType: 'variable', stickiness: 'default', payload: { type: 'json', value: JSON.stringify(OUTCOME_POLICY) } },
    ],
  };
  return `${JSON.stringify({ ...flags, features: [...flags.features, outcomeSampling] }, null, 2)}\n`;
}

/** The two jobs of the pipelines of the outcome story, side by side, on the demo's timeline (seconds). */
const OUTCOME_JOBS: ReadonlyArray<{ name: string; queuedSeconds: number; stageSeconds: Record<BuildStage, number> }> = [
  {
    name: 'build',
    queuedSeconds: 8,
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 4, step_script: 38, after_script: 1, archive_cache: 3, upload_artifacts: 2 },
  },
  {
    name: 'test',
    queuedSeconds: 6,
    stageSeconds: { prepare_executor: 3, get_sources: 2, restore_cache: 5, step_script: 64, after_script: 1, archive_cache: 2, upload_artifacts: 1 },
  },
];
const OUTCOME_PIPELINE_CREATED = -10;
const FIRST_OUTCOME_PIPELINE_ID = 600;
/** Job ids: pipeline 601's are 6011 and 6012. */
const outcomeJobId = (pipelineId: number, index: number) => pipelineId * 10 + 1 + index;
/** Every span of such a pipeline: the pipeline's; per job, the runner's job_execution and its stages, and the job's and its queue wait's. */
const OUTCOME_PIPELINE_SPANS = 1 + OUTCOME_JOBS.length * (1 + BUILD_STAGES.length + 2);

interface ProvisionalRun {
  readonly pipeline: WebhookPipeline;
  readonly traceId: string;
  /** Spans the service parked for it before its Pipeline Hook (its counter `ci_job_telemetry_parked_spans_total`). */
  readonly parked: number;
}

/**
 * The first pipeline from `fromId` that head sampling leaves out, run as in the first story with the `test` job
 * ending `testStatus`: found by picking up its first job, whose answer says `telemetry.provisional: true` (a
 * pipeline's jobs share its trace id, so its head decision). One the head decision keeps is said and left there.
 * Everything up to the pipeline's terminal Pipeline Hook, which is the caller's to deliver.
 */
async function provisionalPipeline(
  demo: Demo,
  fromId: number,
  testStatus: 'success' | 'failed',
): Promise<{ run: ProvisionalRun; finish: () => Promise<void> }> {
  const parkedBefore = (await samples(demo.internalUrl, 'ci_job_telemetry_parked_spans_total')).get('') ?? 0;
  for (let pipelineId = fromId; pipelineId < fromId + 100; pipelineId++) {
    const pickup = await pickupMoment();
    const at = (seconds: number) => new Date(pickup + seconds * 1000);
    const first = await pickUp(
      demo.internalUrl,
      demo.internalApiSecret,
      outcomeJobId(pipelineId, 0),
      OUTCOME_JOBS[0].name,
      at(-OUTCOME_JOBS[0].queuedSeconds),
      pipelineId,
    );
    if (!first.provisional) {
      // Its first job is traced now, as any head-sampled job: not the case this story is about.
      say(
        `pipeline ${pipelineId}: head sampling keeps it (one in ${100 / SAMPLED_PERCENT}, tracestate ${first.tracestate ?? 'none'}), traced as before; the next one`,
      );
      continue;
    }
    const picked = [first];
    for (const [i, job] of OUTCOME_JOBS.entries())
      if (i > 0) picked.push(await pickUp(demo.internalUrl, demo.internalApiSecret, outcomeJobId(pipelineId, i), job.name, at(-job.queuedSeconds), pipelineId));
    const traceId = first.tracing.trace_id;
    for (const [i, job] of OUTCOME_JOBS.entries()) {
      say(
        `job ${outcomeJobId(pipelineId, i)} (${job.name}) of pipeline ${pipelineId} picked up after ${job.queuedSeconds}s in the queue: trace ${picked[i].tracing.trace_id}, ` +
          `left out by head sampling, traced provisionally (telemetry.provisional: ${picked[i].provisional}, tracestate ${picked[i].tracestate ?? 'none'})`,
      );
    }

    const status = (i: number) => (OUTCOME_JOBS[i].name === 'test' ? testStatus : 'success');
    await Promise.all(
      OUTCOME_JOBS.map((job, i) =>
        exportJobAsRunner(picked[i].tracing, {
          jobId: outcomeJobId(pipelineId, i),
          projectId: PROJECT_ID,
          runnerId: RUNNER.id,
          pipelineId: picked[i].variable('CI_PIPELINE_ID'),
          pipelineSource: picked[i].variable('CI_PIPELINE_SOURCE'),
          executor: 'shell',
          status: status(i),
          startedAt: at(RUNNER_STARTS),
          stageSeconds: job.stageSeconds,
        }),
      ),
    );
    const jobs: WebhookJob[] = OUTCOME_JOBS.map((job, i) => ({
      id: outcomeJobId(pipelineId, i),
      name: job.name,
      stage: job.name,
      status: status(i),
      createdAt: at(OUTCOME_PIPELINE_CREATED),
      startedAt: at(0),
      finishedAt: at(RUNNER_STARTS + BUILD_STAGES.reduce((sum, stage) => sum + job.stageSeconds[stage], 0) + GITLAB_SEES_THE_END),
      queuedSeconds: job.queuedSeconds,
      runner: { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER_DESCRIPTION },
      ...(status(i) === 'failed' ? { failureReason: 'script_failure' } : {}),
    }));
    const pipeline: WebhookPipeline = {
      id: pipelineId,
      projectId: PROJECT_ID,
      status: testStatus,
      createdAt: at(OUTCOME_PIPELINE_CREATED),
      finishedAt: new Date(Math.max(...jobs.map((job) => job.finishedAt!.getTime())) + GITLAB_SEES_THE_END * 1000),
      jobs,
    };
    for (const job of [...jobs].sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime()))
      await demo.deliver(`job ${job.id} (${job.name}) ${job.status}`, 'Job Hook', jobHook({ ...pipeline, status: 'running', finishedAt: undefined }, job));

    // Before the outcome: the runners' spans and the control plane's (a job span and a queue wait per job) are
    // parked in the service, and none has reached the collector.
    const before = OUTCOME_PIPELINE_SPANS - 1;
    const parked = await until(`${before} spans of pipeline ${pipelineId} parked`, async () => {
      const count = ((await samples(demo.internalUrl, 'ci_job_telemetry_parked_spans_total')).get('') ?? 0) - parkedBefore;
      return count >= before ? count : undefined;
    });
    const arrived = demo.collector.spans.filter((span) => span.traceId === traceId).length;
    say(`Before its outcome: ${spanCount(parked)} of pipeline ${pipelineId} parked in the service, ${spanCount(arrived)} at the collector`);
    return {
      run: { pipeline, traceId, parked },
      finish: () => demo.deliver(`pipeline ${pipelineId} ${pipeline.status}`, 'Pipeline Hook', pipelineHook(pipeline)),
    };
  }
  throw new Error(`head sampling at ${SAMPLED_PERCENT} % kept 100 pipelines in a row from ${fromId}: is the flag file in force?`);
}

const durationOf = (pipeline: WebhookPipeline) => formatDuration(BigInt(pipeline.finishedAt!.getTime() - pipeline.createdAt.getTime()) * 1_000_000n);
/** The decisions the service counted since `before` (`ci_job_telemetry_outcome_decisions_total`), by their labels. */
async function decisionsSince(internalUrl: string, before: Map<string, number>): Promise<Map<string, number>> {
  const now = await samples(internalUrl, 'ci_job_telemetry_outcome_decisions_total');
  return new Map([...now].filter(([labels, value]) => value > (before.get(labels) ?? 0)).map(([labels, value]) => [labels, value - (before.get(labels) ?? 0)]));
}
const labelsOf = (labels: string) => Object.fromEntries([...labels.matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value]));

/**
 * The third story (SPEC §11): the operator samples 10 % of pipelines and turns outcome keeping on, in the flag file,
 * live. Pipelines head sampling leaves out are traced provisionally and parked; each one's terminal Pipeline Hook
 * decides: the one that failed reaches the collector whole, the one that passed fast never does.
 */
async function outcomeKeeping(demo: Demo & { flagsFile: string }): Promise<void> {
  say();
  say(`Then the operator samples ${SAMPLED_PERCENT} % of pipelines and turns outcome keeping on, in the flag file, with no restart:`);
  say(`ci_job_telemetry_sampling at ${SAMPLED_PERCENT} %, ci_job_telemetry_outcome_sampling on with the policy ${JSON.stringify(OUTCOME_POLICY)}`);
  await replaceFlagFile(demo, flagsWithOutcomeKeeping(readFileSync(join(ROOT, 'config', 'flags.json'), 'utf8')));
  say('Two pipelines that head sampling leaves out: one fails, one passes.');
  say();

  const decisionsBefore = await samples(demo.internalUrl, 'ci_job_telemetry_outcome_decisions_total');
  const failing = await provisionalPipeline(demo, FIRST_OUTCOME_PIPELINE_ID, 'failed');
  say();
  const passing = await provisionalPipeline(demo, failing.run.pipeline.id + 1, 'success');
  say();
  // The passing one ends first; its decision is read before the failing one's Pipeline Hook, so each decision
  // counted is known to be whose. The failing one's kept spans then go through the outbox: by the time they have
  // all arrived, anything of the dropped one that had been on its way would have too.
  await passing.finish();
  const decided = await until(`the decision on pipeline ${passing.run.pipeline.id}`, async () => {
    const counted = await decisionsSince(demo.internalUrl, decisionsBefore);
    return counted.size > 0 ? counted : undefined;
  });
  await failing.finish();
  const { pipeline, traceId } = failing.run;
  const inTrace = () => demo.collector.spans.filter((span) => span.traceId === traceId);
  // Each job span comes twice: at the job's end, and with the critical path at the pipeline's.
  await until(`${OUTCOME_PIPELINE_SPANS} spans of pipeline ${pipeline.id} at the collector`, () =>
    inTrace().length >= OUTCOME_PIPELINE_SPANS + OUTCOME_JOBS.length ? true : undefined,
  );

  const kept = latestVersions(inTrace());
  const ids = new Set(kept.map((span) => span.spanId));
  const roots = kept.filter((span) => !ids.has(span.parentSpanId));
  const values = (of: (span: ReceivedSpan) => unknown) => [...new Set(kept.map((span) => String(of(span))))].join(', ');
  const reasons = [...new Set(kept.map((span) => String(span.resource['ci.sampling.reason'])))];
  const because = reasons.map((reason) => KEPT_BECAUSE[reason] ?? `of ${reason}`).join(' and ');
  const first = kept.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), kept[0].startNanos);
  const last = kept.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), kept[0].endNanos);
  say();
  say(`pipeline ${pipeline.id} ${pipeline.status}: kept. Head sampling left it out; outcome keeping kept it because ${because}.`);
  say(
    `It reached the collector whole: trace ${traceId}, ${OUTCOME_JOBS.length} jobs, ${kept.length} spans, ` +
      `${roots.length} root (${roots.map((span) => span.name).join(', ')}), ${formatDuration(last - first)}; ` +
      `every span: trace_state ${values((span) => span.traceState)}, ci.sampling.reason ${values((span) => span.resource['ci.sampling.reason'])}`,
  );
  say();
  for (const line of renderWaterfall(kept)) say(line);

  const dropped = passing.run.pipeline;
  const decision = labelsOf([...decided.keys()][0]);
  const reached = demo.collector.spans.filter((span) => span.traceId === passing.run.traceId).length;
  say();
  say(
    decision.decision === 'dropped' && decision.reason === 'outcome'
      ? `pipeline ${dropped.id} ${dropped.status}: dropped. Head sampling left it out; outcome keeping dropped it because it passed fast: ` +
          `${dropped.status} in ${durationOf(dropped)}, under the policy's ${OUTCOME_POLICY.keep.slower_than_seconds / 60} minutes, ` +
          `no job failed and none waited ${OUTCOME_POLICY.keep.queued_longer_than_seconds / 60} minutes for a runner.`
      : `pipeline ${dropped.id} ${dropped.status}: ${decision.decision}, reason ${decision.reason}.`,
  );
  say(
    `Nothing of it reached the collector: ${spanCount(reached)} of trace ${passing.run.traceId} among the ${demo.collector.spans.length} it received; ` +
      `the ${spanCount(passing.run.parked)} parked for it were dropped with it.`,
  );
  const counted = await decisionsSince(demo.internalUrl, decisionsBefore);
  say(
    `The service counted both (ci_job_telemetry_outcome_decisions_total): ${[...counted]
      .map(([labels, value]) => `${labelsOf(labels).decision}, reason ${labelsOf(labels).reason}: ${value}`)
      .join('; ')}`,
  );
}

interface CriticalPathAnswer {
  readonly duration_seconds: number;
  readonly final: boolean;
  readonly path: ReadonlyArray<{
    readonly job_id: number;
    readonly name: string | null;
    readonly blocked_by: number | null;
    readonly delay_seconds: number;
    readonly queue_seconds: number;
    readonly duration_seconds: number;
    readonly parts: Readonly<Record<string, number>>;
  }>;
  readonly totals: Readonly<Record<string, number>>;
  readonly slack: ReadonlyArray<{ readonly job_id: number; readonly name: string | null; readonly slack_seconds: number }>;
}

const PARTS_SHOWN = 3;
/**
 * The API's seconds (to the millisecond) as a person reads them, to the second: a pickup is a real moment, which lands
 * within half a second of the demo's timeline.
 */
const secondsAsRead = (seconds: number) => formatSeconds(BigInt(Math.round(seconds * 1000)) * 1_000_000n);

/** The largest parts of a time split, `step_script 1m 35s, restore_cache 7s, …`, none of them zero. */
function largestParts(parts: Readonly<Record<string, number>>, shown = PARTS_SHOWN): string {
  const named = Object.entries(parts)
    .filter(([, seconds]) => seconds > 0)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const listed = named.slice(0, shown).map(([part, seconds]) => `${part} ${secondsAsRead(seconds)}`);
  return named.length > shown ? `${listed.join(', ')}, …` : listed.join(', ');
}

/**
 * Which job held the pipeline up, and where its time went (SPEC §12): as GitLab would ask the service's read API (the
 * internal API's JWT, as the decorator's calls), and as `npm run -s trace` prints it from the collector's files.
 */
async function showCriticalPath(internalUrl: string, internalApiSecret: Buffer, dataDir: string, traceId: string, pipeline: WebhookPipeline): Promise<void> {
  const route = `/internal/ci/telemetry/projects/${PROJECT_ID}/pipelines/${PIPELINE_ID}/critical_path`;
  // GitLab names the pipeline's times, which bound the read: the demo's runners stamped theirs ahead of the clock.
  const window = `from=${pipeline.createdAt.toISOString()}&to=${pipeline.finishedAt!.toISOString()}`;
  const response = await fetch(`${internalUrl}${route}?${window}`, {
    headers: { 'gitlab-ci-telemetry-api-request': await signInternalApiToken(internalApiSecret, 'gitlab') },
  });
  if (response.status !== 200) throw new Error(`GET ${route}: ${response.status} ${await response.text()}`);
  const answer = (await response.json()) as CriticalPathAnswer;
  const seconds = secondsAsRead;
  say();
  say(`Which job held pipeline ${PIPELINE_ID} up? GET ${route} answers (final: ${answer.final}):`);
  for (const element of answer.path) {
    const after = element.blocked_by === null ? 'first' : `after job ${element.blocked_by}`;
    say(
      `  job ${element.job_id} (${element.name}), ${after}: ${seconds(element.delay_seconds)} waiting for GitLab, ${seconds(element.queue_seconds)} in the queue, ` +
        `${seconds(element.duration_seconds - element.queue_seconds)} running (${largestParts(element.parts)})`,
    );
  }
  say(`  the path: ${seconds(answer.duration_seconds)}: ${largestParts(answer.totals, 4)}`);
  for (const entry of answer.slack) say(`  off the path: job ${entry.job_id} (${entry.name}), ${seconds(entry.slack_seconds)} of slack`);

  // The CLI reads the same files; run as `npm run -s trace <trace id>` runs it.
  const { stdout } = await promisify(execFile)(process.execPath, [join(ROOT, 'dist', 'cli', 'show-trace.js'), traceId], {
    env: { PATH: process.env.PATH, DATA_DIR: dataDir },
  });
  say();
  say(`npm run -s trace ${traceId} marks it on the waterfall:`);
  for (const line of stdout.trimEnd().split('\n')) if (/critical path/.test(line)) say(line);
}

/**
 * The slowdown (SPEC §13): a series of pipelines on one branch, each a push of its own commit, as GitLab scheduled them
 * on the project's one `docker,arm64` runner (simulator/pipeline-series.ts); from one commit on, test restores its
 * cache a minute longer. Times are simulated over the last hours, as the runners' spans above are: GitLab's hooks say
 * every time, so the pickups stamp none (no `queued_at`).
 */
const SERIES = {
  count: 30,
  firstPipelineId: 900,
  everyMs: 10 * 60_000,
  slowFrom: 20,
  slowJob: 'test',
  slowdownSeconds: 60,
  flakyAt: 7,
  seed: 58,
} as const;
const SERIES_REF = 'main';
/** Where the demo's last story, an assistant asking over MCP, begins. */
const AGENT_STORY = 'Then an assistant asks the same over MCP: ';
const SERIES_RUNNER = { id: 18, runner_type: 'project_type', token: 'glrt-demo-arm64-runner-token', features: { tracing: true } };
const SERIES_RUNNER_TAGS = ['docker', 'arm64'];
/** The tag set as the reads name it: the runner's tags, sorted, joined by ','. */
const SERIES_TAG_SET = [...SERIES_RUNNER_TAGS].sort().join(',');
/** What the operator's RUNNER_PRICES_FILE says a minute of that runner costs. */
const SERIES_PRICES = { per_minute: { tags: { [SERIES_TAG_SET]: 0.008 } } };

/** One pipeline of the series, as GitLab and the runner make it: pickups through the decorator, the runner's exports, then GitLab's hooks. */
async function deliverSeriesPipeline(demo: Demo, pipeline: SeriesPipeline): Promise<string> {
  const picked = await Promise.all(
    pipeline.jobs.map((job) => pickUp(demo.internalUrl, demo.internalApiSecret, job.id, job.name, undefined, pipeline.id, SERIES_RUNNER)),
  );
  await Promise.all(
    pipeline.jobs.map((job, i) =>
      exportJobAsRunner(picked[i].tracing, {
        jobId: job.id,
        projectId: PROJECT_ID,
        runnerId: SERIES_RUNNER.id,
        pipelineId: picked[i].variable('CI_PIPELINE_ID'),
        pipelineSource: picked[i].variable('CI_PIPELINE_SOURCE'),
        executor: 'docker',
        status: job.status,
        startedAt: job.runnerStartedAt,
        stageSeconds: job.stageSeconds,
      }),
    ),
  );
  const runner = { id: SERIES_RUNNER.id, runnerType: SERIES_RUNNER.runner_type, description: 'demo arm64 runner', tags: SERIES_RUNNER_TAGS };
  const jobs: WebhookJob[] = pipeline.jobs.map((job) => ({
    id: job.id,
    name: job.name,
    stage: job.stage,
    status: job.status,
    createdAt: job.createdAt,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
    queuedSeconds: (job.startedAt.getTime() - job.pendingAt.getTime()) / 1000,
    retriesCount: job.retriesCount,
    runner,
    ...(job.status === 'failed' ? { failureReason: 'script_failure' } : {}),
  }));
  const facts: WebhookPipeline = {
    id: pipeline.id,
    projectId: PROJECT_ID,
    status: 'success',
    createdAt: pipeline.createdAt,
    finishedAt: pipeline.finishedAt,
    jobs,
    ref: SERIES_REF,
    sha: pipeline.sha,
  };
  const deliver = async (event: 'Job Hook' | 'Pipeline Hook', body: Record<string, unknown>) => {
    const answer = await deliverWebhook(demo.internalUrl, event, body, { token: WEBHOOK_SECRET });
    if (answer.status !== 200) throw new Error(`${event} of pipeline ${pipeline.id}: the service answered ${answer.status} ${JSON.stringify(answer.body)}`);
  };
  for (const job of [...jobs].sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime()))
    await deliver('Job Hook', jobHook({ ...facts, status: 'running', finishedAt: undefined }, job));
  // The Pipeline Hook lists a job's latest attempt, as GitLab's does.
  const latest = jobs.filter((job) => !jobs.some((other) => other.name === job.name && other.id > job.id));
  await deliver('Pipeline Hook', pipelineHook({ ...facts, jobs: latest }));
  return picked[0].tracing.trace_id;
}

/** GitLab asking the service, as for a user: the internal API's JWT, the project in the path. */
async function askService<T>(demo: Demo, route: string, body?: unknown): Promise<T> {
  const response = await fetch(`${demo.internalUrl}${route}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      'gitlab-ci-telemetry-api-request': await signInternalApiToken(demo.internalApiSecret, 'gitlab'),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (response.status !== 200) throw new Error(`${body === undefined ? 'GET' : 'POST'} ${route}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

/** What the slowdown story leaves for an assistant to ask about: the series' last pipeline and its window. */
interface SlowdownAsked {
  readonly last: SeriesPipeline;
  readonly window: { readonly from: string; readonly to: string };
}

async function slowdownStory(demo: Demo & { flagsFile: string }): Promise<SlowdownAsked> {
  const series = pipelineSeries({ ...SERIES, endBefore: new Date() });
  const first = series[0];
  const planted = series[SERIES.slowFrom];
  const flaky = series[SERIES.flakyAt];
  const last = series[series.length - 1];
  const hours = (SERIES.count * SERIES.everyMs) / 3_600_000;
  say();
  say(
    `Then a slowdown: ${SERIES.count} pipelines of ${SERIES_REF} (${first.id} to ${last.id}), one every ${SERIES.everyMs / 60_000} minutes over the last ${hours} hours, each a push of its own commit ` +
      `(times simulated, as the runners' spans above): build, then lint and test, on the project's one ${SERIES_TAG_SET} runner, which runs one job at a time.`,
  );
  say(
    `From pipeline ${planted.id} (commit ${shortSha(planted.sha)}) on, ${SERIES.slowJob}'s restore_cache takes ${SERIES.slowdownSeconds} s longer; ` +
      `pipeline ${flaky.id}'s build fails once and is retried (retry: 1). The runner costs ${SERIES_PRICES.per_minute.tags[SERIES_TAG_SET]} a minute (RUNNER_PRICES_FILE).`,
  );
  say("The operator first puts head sampling back to 100 % and outcome keeping off (the repository's flag file): every pipeline is traced.");
  await replaceFlagFile(demo, readFileSync(join(ROOT, 'config', 'flags.json'), 'utf8'));

  const traces = new Set<string>();
  for (const pipeline of series) traces.add(await deliverSeriesPipeline(demo, pipeline));
  // Per job, the runner's job_execution and its stages and the job span twice (at its end, and with the path at the
  // pipeline's); and the pipeline's span.
  const jobs = series.reduce((sum, pipeline) => sum + pipeline.jobs.length, 0);
  const expected = series.length + jobs * (1 + BUILD_STAGES.length + 2);
  const arrived = () => demo.collector.spans.filter((span) => traces.has(span.traceId)).length;
  await until(`${expected} spans of the series at the collector`, () => (arrived() >= expected ? true : undefined), 30_000);
  say(
    `${series.length} pipelines, ${jobs} jobs: picked up through the decorator, exported by the runner, closed by GitLab's hooks; ` +
      `${arrived()} spans at the collector.`,
  );

  // The window GitLab names: the series, from its first pipeline's creation to its last one's end (the stories above
  // ran on another branch, since).
  const window = { from: first.createdAt.toISOString(), to: last.finishedAt.toISOString() };
  const inWindow = `from=${window.from}&to=${window.to}`;
  const projectRoute = `/internal/ci/telemetry/projects/${PROJECT_ID}`;
  say();
  say('GitLab asks the service across pipelines (SPEC §13), as for a user: the internal API and its JWT.');

  const compareRoute = `${projectRoute}/pipelines/${last.id}/compare`;
  say();
  say(`Why was pipeline ${last.id} slower? GET ${compareRoute} answers:`);
  for (const line of comparisonLines(await askService<Comparison>(demo, compareRoute))) say(line);

  const regressionsRoute = `${projectRoute}/regressions?${inWindow}&ref=${SERIES_REF}`;
  say();
  say(`Since when? GET ${regressionsRoute} answers:`);
  for (const line of regressionLines(await askService<Regressions>(demo, regressionsRoute))) say(line);

  const wasteRoute = `${projectRoute}/waste?${inWindow}`;
  say();
  say(`What wastes runner time? GET ${wasteRoute} answers:`);
  for (const line of wasteLines(await askService<WasteLedger>(demo, wasteRoute))) say(line);

  const queueRoute = `${projectRoute}/runners/queue?${inWindow}`;
  say();
  say(`Are we short of runners? GET ${queueRoute} answers:`);
  for (const line of queueLines(await askService<RunnerQueue>(demo, queueRoute))) say(line);

  const whatIfRoute = `${projectRoute}/runners/what_if`;
  const question = { tags: SERIES_TAG_SET, runners: 1, ...window };
  say();
  say(`And with one more? POST ${whatIfRoute} ${JSON.stringify(question)} answers:`);
  for (const line of whatIfLines(await askService<WhatIf>(demo, whatIfRoute, question))) say(line);
  return { last, window };
}

/**
 * An assistant asks the same (SPEC §14): the MCP SDK's own client over Streamable HTTP to the service's MCP server,
 * the internal API's JWT as `Authorization: Bearer`, signed for each request as GitLab signs its calls. Each tool once,
 * on the slowdown's data: its one-line text and its first key, the finding an agent acts on.
 */
async function agentStory(demo: Demo, { last, window }: SlowdownAsked): Promise<void> {
  const signing: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${await signInternalApiToken(demo.internalApiSecret, 'gitlab')}`);
    return fetch(input, { ...init, headers });
  };
  const client = new Client({ name: 'ci-job-telemetry-demo', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${demo.internalUrl}${MCP_PATH}`), { fetch: signing }));
  try {
    const { tools } = await client.listTools();
    say();
    say(
      `${AGENT_STORY}POST ${MCP_PATH} lists ${tools.length} tools, each read-only (${tools.filter((tool) => tool.annotations?.readOnlyHint === true).length} say so) ` +
        `with an output schema: ${tools.map((tool) => tool.name).join(', ')}.`,
    );
    const test = last.jobs.find((job) => job.name === SERIES.slowJob)!;
    const calls: ReadonlyArray<[string, Record<string, unknown>]> = [
      ['compare_pipeline', { pipeline_id: last.id }],
      ['pipeline_critical_path', { pipeline_id: last.id }],
      ['job_trace_summary', { job_id: test.id }],
      ['list_regressions', { ...window, ref: SERIES_REF }],
      ['list_waste', window],
      ['runner_queue_health', window],
      ['runner_what_if', { tags: SERIES_TAG_SET, runners: 1, ...window }],
      ['slowest_jobs', { ...window, ref: SERIES_REF }],
    ];
    for (const [name, args] of calls) {
      const result = await client.callTool({ name, arguments: { project_id: PROJECT_ID, ...args } });
      if (result.isError === true) throw new Error(`MCP ${name}: ${JSON.stringify(result.content)}`);
      const content = result.structuredContent as Record<string, unknown>;
      const [firstKey] = Object.keys(content);
      const text = (result.content as Array<{ type: string; text?: string }>).find((item) => item.type === 'text')?.text ?? '';
      say();
      say(`${name} ${JSON.stringify(args)}: ${text}`);
      say(`  ${firstKey}: ${JSON.stringify(content[firstKey])} (${JSON.stringify(content).length} characters in all)`);
    }
  } finally {
    await client.close();
  }
}

async function main(): Promise<void> {
  const entry = join(ROOT, 'dist', 'main.js');
  if (!existsSync(entry)) throw new Error('dist/main.js is missing: run `npm run demo`, which builds it first');

  // The service runs on its embedded defaults (in-memory store, the flag file, secrets generated on
  // first start) in a scratch directory, so the demo leaves nothing behind in the clone.
  const workDir = mkdtempSync(join(tmpdir(), 'ci-job-telemetry-demo-'));
  // GitLab's webhooks close the job and pipeline spans (SPEC §10): the secret their X-Gitlab-Token carries.
  const webhookSecretFile = join(workDir, 'gitlab_webhook_secret');
  writeFileSync(webhookSecretFile, `${WEBHOOK_SECRET}\n`, { mode: 0o600 });
  // The demo's own flag file, the repository's example to begin with: its last story edits it, as an operator would.
  const flagsFile = join(workDir, 'flags.json');
  writeFileSync(flagsFile, readFileSync(join(ROOT, 'config', 'flags.json')));
  // What a runner minute costs, so that the waste read prices what it finds (SPEC §13).
  const pricesFile = join(workDir, 'runner-prices.json');
  writeFileSync(pricesFile, JSON.stringify(SERIES_PRICES));
  // What reaches the collector is also kept where the service's read API and `npm run -s trace` look (SPEC §12).
  const dataDir = join(workDir, '.data');
  const collector = await startLocalCollector({ directory: localCollectorDirectory(dataDir) });
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
      GITLAB_WEBHOOK_SECRET_FILE: webhookSecretFile,
      FLAGS_FILE: flagsFile,
      RUNNER_PRICES_FILE: pricesFile,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      // A drop waits this long for a child pipeline that fails after its root (5 minutes by default); the demo's
      // pipelines have none, so it need not keep the reader waiting.
      OUTCOME_SAMPLING_LATE_CHILD_SECONDS: '1',
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

    // The timeline counts from a whole second, so that the Pipeline Hook's times (GitLab writes them to the
    // second) fall exactly on it and every duration printed is the same on every run. The decorator stamps
    // the pickup as it answers, tens to hundreds of milliseconds after it is called: called a quarter second
    // before that second, a pickup taking up to 750 ms lands within half a second of it, so each queue wait,
    // printed to the second, reads as planned.
    const pickup = await pickupMoment();
    const at = (seconds: number) => new Date(pickup + seconds * 1000);
    const runSeconds = (job: (typeof PIPELINE)[number]) => BUILD_STAGES.reduce((sum, stage) => sum + job.stageSeconds[stage], 0);

    // The runners pick the three jobs up together, each after its own wait in the queue (`queued_at`).
    const decorated = await Promise.all(PIPELINE.map((job) => pickUp(internalUrl, internalApiSecret, job.jobId, job.name, at(-job.queuedSeconds))));
    const traceId = decorated[0].tracing.trace_id;
    for (const [i, job] of PIPELINE.entries()) {
      const { tracing } = decorated[i];
      // The endpoint URL carries the job's capability, a credential: shown without it.
      const shownUrl = (tracing.otel_endpoints?.[0]?.url ?? '').replace(/\/jobs\/(\d+)\/[^/]+\//, '/jobs/$1/…/');
      say(
        `job ${job.jobId} (${job.name}) picked up after ${job.queuedSeconds}s in the queue: trace ${tracing.trace_id}, parent span ${tracing.span_parent_id}, export to ${shownUrl}`,
      );
    }

    // Each runner runs its job and exports it as a stock GitLab Runner does, to its job's capability URL.
    await Promise.all(
      PIPELINE.map((job, i) =>
        exportJobAsRunner(decorated[i].tracing, {
          jobId: job.jobId,
          projectId: PROJECT_ID,
          runnerId: RUNNER.id,
          pipelineId: decorated[i].variable('CI_PIPELINE_ID'),
          pipelineSource: decorated[i].variable('CI_PIPELINE_SOURCE'),
          executor: 'shell',
          status: 'success',
          startedAt: at(RUNNER_STARTS),
          stageSeconds: job.stageSeconds,
        } satisfies RunnerJob),
      ),
    );

    // GitLab tells of each job's end (Job Hook) as it finishes, then of the pipeline's (Pipeline Hook). The
    // runners' spans above are stamped with the timeline's times, not run for real, so the demo delivers
    // the webhooks at once rather than two minutes from now, with the same times.
    const jobs: WebhookJob[] = PIPELINE.map((job) => ({
      id: job.jobId,
      name: job.name,
      stage: job.stage,
      status: 'success',
      createdAt: at(PIPELINE_CREATED),
      startedAt: at(0),
      finishedAt: at(RUNNER_STARTS + runSeconds(job) + GITLAB_SEES_THE_END),
      queuedSeconds: job.queuedSeconds,
      runner: { id: RUNNER.id, runnerType: RUNNER.runner_type, description: RUNNER_DESCRIPTION },
    }));
    const lastJobEnd = Math.max(...jobs.map((job) => job.finishedAt!.getTime()));
    const pipeline: WebhookPipeline = {
      id: PIPELINE_ID,
      projectId: PROJECT_ID,
      status: 'success',
      createdAt: at(PIPELINE_CREATED),
      finishedAt: new Date(lastJobEnd + GITLAB_SEES_THE_END * 1000),
      jobs,
    };
    const deliver = async (what: string, event: 'Job Hook' | 'Pipeline Hook', body: Record<string, unknown>) => {
      const answer = await deliverWebhook(internalUrl, event, body, { token: WEBHOOK_SECRET });
      if (answer.status !== 200 || answer.body.status !== 'accepted')
        throw new Error(`${what}: the service answered ${answer.status} ${JSON.stringify(answer.body)}`);
      const { queued, duplicates } = answer.body as { queued: number; duplicates: number };
      // A Pipeline Hook lists its finished jobs again: their spans, sent from the Job Hooks, are dropped as duplicates.
      const dropped = duplicates > 0 ? `, ${duplicates} duplicate${duplicates === 1 ? '' : 's'} dropped` : '';
      say(`GitLab ${event} for ${what}: accepted, ${spanCount(queued)} queued${dropped}`);
    };
    say();
    for (const job of [...jobs].sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime())) {
      await deliver(`job ${job.id} (${job.name}) ${job.status}`, 'Job Hook', jobHook({ ...pipeline, status: 'running', finishedAt: undefined }, job));
    }
    await deliver(`pipeline ${PIPELINE_ID} ${pipeline.status}`, 'Pipeline Hook', pipelineHook(pipeline));

    // The runners' spans, and the control plane's: a pipeline span, and a job and a queue_wait span per job, each job
    // span again at the pipeline's end with the critical path written on it.
    const expected = PIPELINE.length * (1 + BUILD_STAGES.length) + 1 + 3 * PIPELINE.length;
    const inTrace = () => collector.spans.filter((span) => span.traceId === traceId);
    await until(`${expected} spans at the collector`, () => (inTrace().length >= expected ? true : undefined), 15_000).catch(() => {
      const received = inTrace().map((span) => span.name);
      throw new Error(`the collector received ${received.length} of ${expected} spans (${received.join(', ')})\n${output}`);
    });

    const spans = latestVersions(inTrace());
    const first = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
    const last = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
    say();
    say(`pipeline ${PIPELINE_ID} of project ${PROJECT_ID}: trace ${traceId}, ${PIPELINE.length} jobs, ${spans.length} spans, ${formatDuration(last - first)}`);
    say();
    for (const line of renderWaterfall(spans)) say(line);

    await showCriticalPath(internalUrl, internalApiSecret, dataDir, traceId, pipeline);

    await retriedPipeline({ internalUrl, internalApiSecret, collector, deliver });
    await outcomeKeeping({ internalUrl, internalApiSecret, collector, deliver, flagsFile });
    const asked = await slowdownStory({ internalUrl, internalApiSecret, collector, deliver, flagsFile });
    await agentStory({ internalUrl, internalApiSecret, collector, deliver }, asked);
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
