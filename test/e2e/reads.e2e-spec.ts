import { execFile } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { deliverWebhook, jobHook, pipelineAt, pipelineHook, WebhookJob } from '../../simulator/gitlab-webhooks';
import { repoRoot } from '../../simulator/repo-root';
import { localCollectorDirectory, readSignalLines } from '../../src/collector/collector-files';
import { RUNNER_PARTS } from '../../src/critical-path/critical-path';
import { collectedSpans, latestVersions } from '../../src/cli/waterfall';
import { decodeExportRequest } from '../../src/otlp/otlp-receiver';
import { BuildStage } from '../../simulator/stock-runner';
import { runJobAsStockRunner } from '../helpers/ci-pipeline';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { internalApiHeaders } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { waitFor } from '../helpers/ports';
import { metric, ServiceProcess, startService } from '../helpers/service';
import { writeCollectorFiles } from '../helpers/reads-cases';
import { largePipeline } from '../suites/large-pipeline';

/**
 * SPEC §12 against the built service on its embedded defaults: a pipeline run as GitLab and a stock runner run it
 * (the decorator's pickups, the runner's OTLP/HTTP exports through the gateway, GitLab's hooks), kept by the
 * embedded collector, then read as GitLab would read it: the trace and how complete it is, a job's subtree, the
 * critical path a user expects, and `npm run -s trace` saying the same.
 */

const PROJECT = 7;
const PIPELINE = 3600;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const stages = (script: number): Record<BuildStage, number> => ({
  prepare_executor: 0.1,
  get_sources: 0.1,
  restore_cache: 0.2,
  step_script: script,
  after_script: 0.05,
  archive_cache: 0.05,
  upload_artifacts: 0.1,
});
const runMs = (stageSeconds: Record<BuildStage, number>) => Object.values(stageSeconds).reduce((sum, seconds) => sum + seconds, 0) * 1000;

describe('reading a pipeline a stock runner exported (SPEC §12)', () => {
  let cwd: string;
  let secret: WebhookSecret;
  let service: ServiceProcess;
  const createdAt = new Date(Math.floor(Date.now() / 1000 - 1) * 1000);
  const jobs = new Map<string, WebhookJob>();

  const hookOf = (status: string) => pipelineAt(PIPELINE, PROJECT, status, createdAt, [...jobs.values()]);
  const deliver = async (event: string, body: unknown) => {
    const delivered = await deliverWebhook(service.url, event, body, { token: secret.secret });
    if (delivered.status !== 200) throw new Error(`${event}: ${delivered.status} ${JSON.stringify(delivered.body)}`);
  };
  const queueSeconds = new Map<string, number>();
  /** Queued now, picked up 300 ms later, run in real time for its stages, then its Job Hook. */
  const run = async (jobId: number, name: string, stageSeconds: Record<BuildStage, number>) => {
    const queuedAt = new Date();
    await sleep(300);
    const startedAt = new Date();
    // What the path must count as this job's queue wait: a timer may fire a millisecond early, so the wait is measured.
    queueSeconds.set(name, (startedAt.getTime() - queuedAt.getTime()) / 1000);
    const { hook } = await runJobAsStockRunner(
      service,
      { jobId, projectId: PROJECT, pipelineId: PIPELINE, name, status: 'success', queuedAt, startedAt, stageSeconds },
      async () => {
        await sleep(runMs(stageSeconds));
      },
    );
    jobs.set(name, hook);
    await deliver('Job Hook', jobHook(hookOf('running'), hook));
  };
  const read = async (path: string, template: string) => {
    const response = await fetch(`${service.url}${path}`, { headers: await internalApiHeaders(service.secrets.internalApiSecret) });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- checked against openapi.yaml
    const body: any = await response.json();
    expectMatchesOpenApi(template, 'GET', response.status, response.headers.get('content-type') ?? undefined, body);
    return { status: response.status, body };
  };
  const PIPELINE_PATH = `/internal/ci/telemetry/projects/${PROJECT}/pipelines/${PIPELINE}`;

  beforeAll(async () => {
    cwd = realpathSync(mkdtempSync(join(tmpdir(), 'cjt-reads-')));
    secret = makeWebhookSecret();
    service = await startService({ GITLAB_WEBHOOK_SECRET_FILE: secret.file }, { cwd });
    await run(36001, 'build', stages(0.5));
    await sleep(200);
    // test and lint in parallel after build; test is the longer.
    await Promise.all([run(36002, 'test', stages(1.2)), run(36003, 'lint', stages(0.2))]);
    await sleep(200);
    await run(36004, 'deploy', stages(0.3));
    await deliver('Pipeline Hook', pipelineHook(hookOf('success')));
  }, 120_000);

  afterAll(async () => {
    await service?.stop();
    if (cwd !== undefined) rmSync(cwd, { recursive: true, force: true });
  });

  it('answers the whole trace, and says it is complete: one root, nothing missing, every job with its runner spans, final', async () => {
    let answer: Awaited<ReturnType<typeof read>> | undefined;
    await waitFor('the pipeline final in the embedded collector', async () => {
      answer = await read(`${PIPELINE_PATH}/trace`, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/trace');
      return answer.status === 200 && answer.body.completeness.final === true ? true : undefined;
    });
    // pipeline, 4 × (job, queue wait, job_execution, 7 stages)
    expect(answer!.body.completeness).toEqual({
      spans: 1 + 4 * 10,
      total_spans: 1 + 4 * 10,
      truncated: false,
      roots: 1,
      missing_parents: 0,
      jobs_without_runner_spans: 0,
      final: true,
      sampling_reason: 'head',
      adjusted_count: 1,
    });
  });

  it('answers the critical path a user expects: build, then test (not lint), then deploy; lint has slack; the parts add up', async () => {
    const { status, body } = await read(`${PIPELINE_PATH}/critical_path`, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/critical_path');
    expect(status).toBe(200);
    expect(body.final).toBe(true);
    expect(body.path.map((element: { name: string; blocked_by: number | null }) => [element.name, element.blocked_by])).toEqual([
      ['build', null],
      ['test', 36001],
      ['deploy', 36002],
    ]);
    expect(body.slack.map((entry: { job_id: number }) => entry.job_id)).toEqual([36003]);
    expect(body.slack[0].slack_seconds).toBeGreaterThan(0.5);
    for (const element of body.path as Array<{ name: string; queue_seconds: number; parts: Record<string, number> }>) {
      expect(element).toMatchObject({ runner_spans: true, waiting_for: 'gitlab', attempts: 1 });
      expect(element.queue_seconds).toBeCloseTo(queueSeconds.get(element.name)!, 2);
      expect(element.parts.step_script).toBeGreaterThan(0);
    }
    expect(body.path[1].parts.step_script).toBeCloseTo(1.2, 1);
    const sum = Object.values(body.totals as Record<string, number>).reduce((total, seconds) => total + seconds, 0);
    expect(sum).toBeCloseTo(body.duration_seconds, 6);
  });

  it('wrote the same path on the spans it emitted when the pipeline ended, for dashboards to aggregate without the API', async () => {
    const { body } = await read(`${PIPELINE_PATH}/critical_path`, '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/critical_path');
    // What the embedded collector kept, each span in its latest version, as every reader takes it.
    const kept = () =>
      latestVersions(
        readSignalLines(localCollectorDirectory(join(cwd, '.data')), 'traces').flatMap((line) =>
          collectedSpans(decodeExportRequest('traces', 'json', Buffer.from(line))),
        ),
      ).filter((span) => String(span.attributes['ci.pipeline.id'] ?? span.resource['ci.pipeline.id']) === String(PIPELINE));
    const jobs = await waitFor('the job spans with the critical path written on them', async () => {
      const found = kept().filter((span) => span.name === 'job');
      return found.length === 4 && found.every((span) => span.attributes['ci.job.critical_path'] !== undefined) ? found : undefined;
    });
    const written = Object.fromEntries(
      jobs.map((span) => [
        span.attributes['cicd.pipeline.task.name'],
        [span.attributes['ci.job.critical_path'], span.attributes['ci.job.critical_path_seconds'] ?? span.attributes['ci.job.slack_seconds']],
      ]),
    );
    const answered = Object.fromEntries([
      ...body.path.map((element: { name: string; duration_seconds: number }) => [element.name, [true, element.duration_seconds]]),
      ...body.slack.map((entry: { name: string; slack_seconds: number }) => [entry.name, [false, entry.slack_seconds]]),
    ]);
    expect(written).toEqual(answered);
    expect(Object.keys(written).sort()).toEqual(['build', 'deploy', 'lint', 'test']);

    // On the root pipeline span, the path's time by what GitLab knows; the runs as a whole, which the API splits by stage.
    const root = kept().find((span) => span.name === 'pipeline' && span.parentSpanId === '')!;
    const part = (name: string) => root.attributes[`ci.pipeline.critical_path.${name}_seconds`];
    for (const name of ['delay', 'manual_wait', 'retry_wait', 'queue']) expect(part(name)).toBeCloseTo(body.totals[name], 3);
    expect(part('run')).toBeCloseTo(
      RUNNER_PARTS.reduce((sum, name) => sum + body.totals[name], 0),
      3,
    );
  });

  it("answers a job's subtree: its span, its queue wait, the runner's job_execution and stages", async () => {
    const { status, body } = await read(
      `/internal/ci/telemetry/projects/${PROJECT}/jobs/36002/trace`,
      '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace',
    );
    expect(status).toBe(200);
    const names = body.trace.resourceSpans.flatMap((resource: { scopeSpans: Array<{ spans: Array<{ name: string }> }> }) =>
      resource.scopeSpans.flatMap((scope) => scope.spans.map((span) => span.name)),
    );
    expect(names.sort()).toEqual(
      [
        'job',
        'queue_wait',
        'job_execution',
        'prepare_executor',
        'get_sources',
        'restore_cache',
        'step_script',
        'after_script',
        'archive_cache',
        'upload_artifacts',
      ].sort(),
    );
    expect(body.completeness).toMatchObject({ missing_parents: 0, final: true });
    // Another project asking for it gets what it gets for a job that does not exist.
    const other = await read(`/internal/ci/telemetry/projects/8/jobs/36002/trace`, '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace');
    const none = await read(
      `/internal/ci/telemetry/projects/${PROJECT}/jobs/99999999/trace`,
      '/internal/ci/telemetry/projects/{project_id}/jobs/{job_id}/trace',
    );
    expect([other.status, other.body.error]).toEqual([none.status, none.body.error]);
  });

  it('npm run -s trace marks the path on its jobs and says where the time went', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [join(repoRoot(), 'dist', 'cli', 'show-trace.js')], {
      cwd,
      env: { PATH: process.env.PATH },
    });
    console.log(stdout);
    const rows = stdout.split('\n');
    expect(rows.find((row) => /^ {2}job 36002 test /.test(row))).toMatch(/◀ critical path, after job 36001 build$/);
    expect(rows.find((row) => /^ {2}job 36003 lint /.test(row))).not.toMatch(/critical/);
    const last = rows.filter((row) => row.length > 0).pop();
    expect(last).toMatch(/^on the critical path \(\d+s\): /);
    expect(last).toMatch(/\d+s in scripts/);
    expect(last).toMatch(/\d+s waiting for runners/);
  });
});

describe('a read past READS_TIMEOUT_MS on the built service (issue 56 item 3)', () => {
  it('is answered 503 with Retry-After, and abandoned: its worker thread is stopped and replaced, and counted', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cjt-reads-late-'));
    writeCollectorFiles(dataDir, largePipeline(PROJECT, 3700, 40, 1000).resourceSpans());
    const service = await startService({ DATA_DIR: dataDir, READS_TIMEOUT_MS: '100' });
    try {
      const url = `${service.url}/internal/ci/telemetry/projects/${PROJECT}/pipelines/3700/trace`;
      const answers: Array<[number, string | null]> = [];
      // Reads that find the thread still starting are dropped from its queue at their deadline; the first that finds it
      // ready decodes 40,000 spans, which takes longer than 100 ms: that one is abandoned with its thread.
      await waitFor(
        'a read abandoned',
        async () => {
          const response = await fetch(url, { headers: await internalApiHeaders(service.secrets.internalApiSecret) });
          answers.push([response.status, response.headers.get('retry-after')]);
          return (await metric(service, 'ci_job_telemetry_reads_abandoned_total')) >= 1 ? true : undefined;
        },
        60_000,
      );
      for (const [status, retryAfter] of answers) expect([status, Number(retryAfter) >= 1]).toEqual([503, true]);
    } finally {
      await service.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});
