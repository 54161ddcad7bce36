import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { deliverWebhook, pipelineAt, pipelineHook, WebhookJob } from '../../simulator/gitlab-webhooks';
import { decodeExportRequest } from '../../src/otlp/otlp-receiver';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { pickUpJob } from '../helpers/ci-job';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { OtlpSink, startOtlpSink } from '../helpers/otlp-sink';
import { waitFor } from '../helpers/ports';
import { RedisServer, startRedis } from '../helpers/redis';
import { ServiceProcess, startService } from '../helpers/service';

/**
 * SPEC §14 from outside: a pipeline picked up through the decorator and told by GitLab's Pipeline Hooks (the end
 * delivered twice, a running hook late) shows as the CI/CD semantic conventions' metrics on /metrics, under the names
 * the OpenTelemetry-to-Prometheus rules give them, and reaches the collector over OTLP under the conventions' own.
 */

const PROJECT = 7;
const PIPELINE = 99_000;
const JOB = 990_001;
const NAME = `gitlab-org/project-${PROJECT}`;

type Decoded = Record<string, unknown>;
const field = (object: Decoded, camel: string, snake: string) => (object[camel] ?? object[snake]) as Decoded[] | undefined;

/** A data point's attributes as plain values. */
function attributesOf(point: Decoded): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const attribute of (point.attributes as Decoded[] | undefined) ?? []) {
    const value = attribute.value as Decoded;
    values[attribute.key as string] = value.stringValue ?? value.string_value ?? value.intValue ?? value.int_value;
  }
  return values;
}

/** Every metric of the service's OTLP metric exports, by name, as the last export had it (cumulative). */
function exportedMetrics(sink: OtlpSink): Map<string, Decoded> {
  const metrics = new Map<string, Decoded>();
  for (const received of sink.exports.filter((exported) => exported.signal === 'metrics')) {
    const request = decodeExportRequest('metrics', 'protobuf', received.body) as Decoded;
    for (const resource of field(request, 'resourceMetrics', 'resource_metrics') ?? []) {
      for (const scope of field(resource, 'scopeMetrics', 'scope_metrics') ?? [])
        for (const metric of (scope.metrics as Decoded[]) ?? []) metrics.set(metric.name as string, metric);
    }
  }
  return metrics;
}

/** The value of one Prometheus series, as /metrics writes it; undefined when absent. */
async function series(service: ServiceProcess, line: string): Promise<number | undefined> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  const found = text.split('\n').find((written) => written.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.slice(line.length + 1));
}

describe('CI/CD semantic-convention metrics (SPEC §14)', () => {
  let redis: RedisServer;
  let collector: OtlpSink;
  let ownTelemetry: OtlpSink;
  let secret: WebhookSecret;
  let service: ServiceProcess | undefined;

  beforeAll(async () => {
    [redis, collector, ownTelemetry] = await Promise.all([startRedis(), startOtlpSink(), startOtlpSink()]);
    secret = makeWebhookSecret();
  });
  afterAll(async () => {
    await service?.stop();
    await Promise.all([redis?.stop(), collector?.stop(), ownTelemetry?.stop()]);
  });

  it("shows a pipeline's run on /metrics with Prometheus names and sends it over OTLP with the conventions' names", async () => {
    service = await startService({
      REDIS_URL: redis.url,
      OTLP_UPSTREAM_URL: collector.url,
      GITLAB_WEBHOOK_SECRET_FILE: secret.file,
      OTEL_EXPORTER_OTLP_ENDPOINT: ownTelemetry.url,
      OTEL_METRIC_EXPORT_INTERVAL: '300',
    });
    // Whole seconds, as Pipeline Hooks write times: created, its job pending 20 s later, started 10 s after that.
    const created = Math.floor(Date.now() / 1000) * 1000 - 120_000;
    const at = (seconds: number) => new Date(created + seconds * 1000);
    await pickUpJob(
      service,
      jobPayloadRequest({ job: { id: JOB, project_id: PROJECT, pipeline_id: PIPELINE, root_pipeline_id: PIPELINE, queued_at: at(20).toISOString() } }),
    );
    const build = { id: JOB, name: 'build', stage: 'build', createdAt: at(0) };
    const running: WebhookJob = { ...build, status: 'running', startedAt: at(30), queuedSeconds: 10 };
    const done: WebhookJob = { ...running, status: 'success', finishedAt: at(90) };
    const deliver = (status: string, job: WebhookJob) =>
      deliverWebhook(service!.url, 'Pipeline Hook', pipelineHook(pipelineAt(PIPELINE, PROJECT, status, at(0), [job])), { token: secret.secret });

    expect((await deliver('running', running)).status).toBe(200);
    const active = (state: string) => series(service!, `cicd_pipeline_run_active{cicd_pipeline_name="${NAME}",cicd_pipeline_run_state="${state}"}`);
    expect(await active('executing')).toBe(1);
    // The end twice (GitLab redelivers), then the running hook again, late.
    for (const [status, job] of [
      ['success', done],
      ['success', done],
      ['running', running],
    ] as const)
      expect((await deliver(status, job)).status).toBe(200);

    const duration = (state: string, more = '') =>
      `cicd_pipeline_run_duration_seconds_{}{cicd_pipeline_name="${NAME}",cicd_pipeline_run_state="${state}"${more}}`;
    const of = (template: string, part: 'count' | 'sum') => series(service!, template.replace('_{}', `_${part}`));
    expect(await of(duration('pending'), 'count')).toBe(1);
    expect(await of(duration('pending'), 'sum')).toBe(30);
    expect(await of(duration('executing', ',cicd_pipeline_result="success"'), 'count')).toBe(1);
    expect(await of(duration('executing', ',cicd_pipeline_result="success"'), 'sum')).toBe(60);
    expect(await active('executing')).toBe(0);
    expect(await active('pending')).toBe(0);
    // This project's extension: pending as GitLab's delay and the job's queue wait.
    const part = (name: string) => `ci_pipeline_run_pending_duration_seconds_sum{cicd_pipeline_name="${NAME}",ci_pipeline_run_pending_part="${name}"}`;
    expect([await series(service, part('gitlab_delay')), await series(service, part('queue_wait'))]).toEqual([20, 10]);
    expect(await series(service, `cicd_pipeline_run_errors_total{cicd_pipeline_name="${NAME}",error_type="_OTHER"}`)).toBeUndefined();

    // The dashboard's panels on them select series the service exports.
    const dashboard = JSON.parse(readFileSync(join(__dirname, '..', '..', 'deploy', 'grafana', 'dashboards', 'ci-job-telemetry.json'), 'utf8')) as {
      panels: Array<{ title: string; targets: Array<{ expr?: string }> }>;
    };
    const exposed = await (await fetch(`${service.url}/metrics`)).text();
    for (const title of ['Pipeline run time p95 by state', 'Active pipeline runs by state']) {
      const selected = dashboard.panels
        .find((panel) => panel.title === title)!
        .targets.flatMap((target) => [...target.expr!.replace(/by \([^)]*\)/g, '').matchAll(/\b(ci(?:cd)?_\w+?)(?:_bucket)?\b/g)].map((match) => match[1]));
      expect(selected.length).toBeGreaterThan(0);
      for (const name of selected) expect(exposed).toMatch(new RegExp(`^# TYPE ${name} `, 'm'));
    }

    // Over OTLP, beside the service's own spans: the conventions' names, units and attributes, the same numbers.
    const exported = await waitFor('the CI/CD metrics over OTLP', async () => {
      const metrics = exportedMetrics(ownTelemetry);
      const points = (metrics.get('cicd.pipeline.run.duration')?.histogram as Decoded | undefined)?.dataPoints as Decoded[] | undefined;
      return points !== undefined && points.length === 2 && metrics.has('cicd.pipeline.run.active') ? metrics : undefined;
    });
    const histogram = exported.get('cicd.pipeline.run.duration')!;
    expect(histogram.unit).toBe('s');
    const points = (histogram.histogram as Decoded).dataPoints as Decoded[];
    expect(
      points.map((point) => ({ attributes: attributesOf(point), count: Number(point.count), sum: Number(point.sum) })).sort((a, b) => a.sum - b.sum),
    ).toEqual([
      { attributes: { 'cicd.pipeline.name': NAME, 'cicd.pipeline.run.state': 'pending' }, count: 1, sum: 30 },
      { attributes: { 'cicd.pipeline.name': NAME, 'cicd.pipeline.run.state': 'executing', 'cicd.pipeline.result': 'success' }, count: 1, sum: 60 },
    ]);
    const activeRuns = exported.get('cicd.pipeline.run.active')!;
    expect(activeRuns.unit).toBe('{run}');
    expect((activeRuns.sum as Decoded).isMonotonic ?? (activeRuns.sum as Decoded).is_monotonic ?? false).toBe(false);
    expect(exported.get('ci.pipeline.run.pending.duration')?.unit).toBe('s');
    const resource = ownTelemetry.exports.find((received) => received.signal === 'metrics')!.resources[0];
    expect(resource['service.name']).toBe('ci-job-telemetry');
    // None of it went to the collector the gateway forwards runners' telemetry to.
    expect(collector.exports.some((received) => received.signal === 'metrics')).toBe(false);
  });
});
