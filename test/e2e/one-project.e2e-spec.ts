import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deliverWebhook, jobHook, pipelineAt, pipelineHook, WebhookJob } from '../../simulator/gitlab-webhooks';
import { BuildStage } from '../../simulator/stock-runner';
import { pickUpPipelineJob, runJobAsStockRunner } from '../helpers/ci-pipeline';
import type { WebhookSecret } from '../helpers/gitlab-webhooks';
import { internalApiHeaders } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { waitFor } from '../helpers/ports';
import type { ServiceProcess } from '../helpers/service';
import { startWorld, World } from '../helpers/world';

/**
 * SPEC §12 "Trust", issue 56 (1): one project's data. Project A's traced pipeline triggers a multi-project downstream
 * pipeline of project B, whose Pipeline Hook is GitLab's documented shape (`source_pipeline: { project: { id, web_url,
 * path_with_namespace }, pipeline_id, job_id }` naming A's pipeline and trigger job); and a job of B is picked up
 * naming A's pipeline as its root (a trace shared across projects). Two replicas on one Redis, hooks and pickups
 * spread over both, as behind a load balancer; the spans read back through the read API as GitLab would.
 */

const A = 7;
const B = 8;
const A_PIPELINE = 5600;
const A_BRIDGE = 56_002;
const B_PIPELINE = 5700;
const B_SHARED = 5800;
const TEMPLATE = '/internal/ci/telemetry/projects/{project_id}/pipelines/{pipeline_id}/trace';
const stages: Record<BuildStage, number> = {
  prepare_executor: 0.05,
  get_sources: 0.05,
  restore_cache: 0.05,
  step_script: 0.2,
  after_script: 0.05,
  archive_cache: 0.05,
  upload_artifacts: 0.05,
};

interface ReadSpan {
  name: string;
  parentSpanId?: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
  status?: { message?: string };
}

const attribute = (span: ReadSpan, key: string) => {
  const value = span.attributes.find((entry) => entry.key === key)?.value;
  return value === undefined ? undefined : String(Object.values(value)[0]);
};

describe("one project's data across replicas (SPEC §12 Trust, issue 56)", () => {
  let cwd: string;
  let world: World;
  let secret: WebhookSecret;
  let replicas: ServiceProcess[];
  const createdAt = new Date(Math.floor(Date.now() / 1000 - 5) * 1000);

  const deliver = async (replica: ServiceProcess, event: string, body: unknown) => {
    const delivered = await deliverWebhook(replica.url, event, body, { token: secret.secret });
    if (delivered.status !== 200) throw new Error(`${event}: ${delivered.status} ${JSON.stringify(delivered.body)}`);
  };
  const read = async (replica: ServiceProcess, projectId: number, pipelineId: number) => {
    const response = await fetch(`${replica.url}/internal/ci/telemetry/projects/${projectId}/pipelines/${pipelineId}/trace`, {
      headers: await internalApiHeaders(replica.secrets.internalApiSecret),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- checked against openapi.yaml
    const body: any = await response.json();
    expectMatchesOpenApi(TEMPLATE, 'GET', response.status, response.headers.get('content-type') ?? undefined, body);
    return { status: response.status, body };
  };
  /** Each span with its resource's attributes after its own (the runner's stages carry their identity on the resource only). */
  const spansOf = (body: {
    trace: { resourceSpans: Array<{ resource: { attributes: ReadSpan['attributes'] }; scopeSpans: Array<{ spans: ReadSpan[] }> }> };
  }): ReadSpan[] =>
    body.trace.resourceSpans.flatMap(({ resource, scopeSpans }) =>
      scopeSpans.flatMap((scope) => scope.spans.map((span) => ({ ...span, attributes: [...span.attributes, ...resource.attributes] }))),
    );

  beforeAll(async () => {
    // One embedded collector's files, appended to by both replicas: what either emitted, either reads.
    cwd = realpathSync(mkdtempSync(join(tmpdir(), 'cjt-one-project-')));
    world = await startWorld({ redis: true, webhookSecret: true, service: true, serviceOptions: { cwd } });
    secret = world.webhookSecret;
    // The same keys, as replicas of one deployment have: callers sign with the one internal API secret both read.
    replicas = [world.service, await world.startService()];

    // A's build job, picked up on the first replica, its Job Hook on the second.
    const { hook: build } = await runJobAsStockRunner(replicas[0], {
      jobId: 56_001,
      projectId: A,
      pipelineId: A_PIPELINE,
      name: 'build',
      status: 'success',
      queuedAt: new Date(Date.now() - 1_000),
      startedAt: new Date(Date.now() - 800),
      stageSeconds: stages,
    });
    await deliver(replicas[1], 'Job Hook', jobHook(pipelineAt(A_PIPELINE, A, 'running', createdAt, [build]), build));

    // A job of B picked up on the second replica naming A's pipeline as its root: after the first replica's memo of
    // A's record, as a replica that never saw A would.
    await pickUpPipelineJob(replicas[1], { jobId: 58_001, projectId: B, pipelineId: B_SHARED, rootPipelineId: A_PIPELINE, queuedAt: new Date() });

    // B's downstream pipeline failed (its job `deploy-b`: script_failure); its hook, as GitLab documents it, reaches both replicas.
    const failing: WebhookJob = {
      id: 57_001,
      name: 'deploy-b',
      stage: 'deploy',
      status: 'failed',
      createdAt,
      startedAt: new Date(createdAt.getTime() + 1_000),
      finishedAt: new Date(createdAt.getTime() + 3_000),
      failureReason: 'script_failure',
    };
    const downstream = pipelineHook({ ...pipelineAt(B_PIPELINE, B, 'failed', createdAt, [failing]), source: { pipelineId: A_PIPELINE, jobId: A_BRIDGE } });
    downstream.source_pipeline = {
      project: { id: A, web_url: `http://gitlab.example.com/gitlab-org/project-${A}`, path_with_namespace: `gitlab-org/project-${A}` },
      job_id: A_BRIDGE,
      pipeline_id: A_PIPELINE,
    };
    (downstream.object_attributes as Record<string, unknown>).source = 'pipeline';
    for (const replica of replicas) await deliver(replica, 'Pipeline Hook', downstream);

    // A's own end, on the second replica.
    await deliver(replicas[1], 'Pipeline Hook', pipelineHook(pipelineAt(A_PIPELINE, A, 'success', createdAt, [build])));
  }, 120_000);

  afterAll(async () => {
    await world?.stop();
    if (cwd !== undefined) rmSync(cwd, { recursive: true, force: true });
  });

  it("answers A's trace as A's alone: its root, its job, its bridge pointing at B's pipeline, nothing of B", async () => {
    let answer: Awaited<ReturnType<typeof read>> | undefined;
    await waitFor('A final with its bridge', async () => {
      answer = await read(replicas[0], A, A_PIPELINE);
      return answer.status === 200 && answer.body.completeness.final === true && spansOf(answer.body).some((span) => span.name === 'bridge') ? true : undefined;
    });
    const spans = spansOf(answer!.body);
    expect(answer!.body.completeness).toMatchObject({ roots: 1, missing_parents: 0, final: true });
    // Every span A reads is A's, and no pipeline span but A's own.
    expect(new Set(spans.map((span) => attribute(span, 'ci.project.id')))).toEqual(new Set([String(A)]));
    expect(spans.filter((span) => span.name === 'pipeline').map((span) => attribute(span, 'ci.pipeline.id'))).toEqual([String(A_PIPELINE)]);
    // The bridge is A's own job: its status, and where the downstream pipeline is, never what B's pipeline holds.
    const bridge = spans.find((span) => span.name === 'bridge')!;
    expect(attribute(bridge, 'ci.job.id')).toBe(String(A_BRIDGE));
    expect(attribute(bridge, 'ci.job.status')).toBe('failed');
    expect(attribute(bridge, 'ci.downstream_pipeline.id')).toBe(String(B_PIPELINE));
    expect(attribute(bridge, 'ci.downstream_project.id')).toBe(String(B));
    const text = JSON.stringify(answer!.body);
    for (const ofB of ['deploy-b', 'script_failure', `project-${B}`]) expect(text).not.toContain(ofB);
    // Nor the spans of B's job that named A's pipeline as its root (they share A's trace id).
    expect(spans.filter((span) => attribute(span, 'ci.job.id') === '58001' || attribute(span, 'ci.pipeline.id') === String(B_SHARED))).toEqual([]);
  });

  it("answers 404 for B's pipeline read under A, and for A's pipeline read under B, on either replica", async () => {
    for (const replica of replicas) {
      expect((await read(replica, A, B_PIPELINE)).status).toBe(404);
      expect((await read(replica, B, A_PIPELINE)).status).toBe(404);
    }
  });
});
