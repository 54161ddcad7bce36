import { writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { jobHook, pipelineHook, WebhookPipeline } from '../../simulator/gitlab-webhooks';
import { jobPayloadRequest } from '../fixtures/job-payload';
import { makeWebhookSecret, WebhookSecret } from '../helpers/gitlab-webhooks';
import { internalApiHeaders } from '../helpers/internal-api';
import { InProcessService, startInProcess } from '../helpers/service';

const PATH = '/webhooks/gitlab';

describe('POST /webhooks/gitlab (SPEC §10)', () => {
  let service: InProcessService | undefined;
  let secret: WebhookSecret;
  afterEach(async () => {
    await service?.close();
    service = undefined;
  });

  /** `token` null: no X-Gitlab-Token at all. */
  const deliver = async (event: string, body: unknown, token: string | null = secret.secret) => {
    const response = await service!.app.inject({
      method: 'POST',
      url: PATH,
      headers: {
        'content-type': 'application/json',
        'x-gitlab-event': event,
        'x-gitlab-event-uuid': randomUUID(),
        'x-request-id': 'webhook-request-1',
        ...(token === null ? {} : { 'x-gitlab-token': token }),
      },
      payload: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.statusCode, body: response.json(), headers: response.headers };
  };
  const webhookSeries = async () =>
    (await service!.app.inject({ method: 'GET', url: '/metrics' })).body.split('\n').filter((line) => line.startsWith('ci_job_telemetry_webhooks_total{'));

  const pipeline: WebhookPipeline = {
    id: 500,
    projectId: 7,
    status: 'success',
    createdAt: new Date('2026-11-21T10:00:00Z'),
    finishedAt: new Date('2026-11-21T10:05:00Z'),
    jobs: [
      {
        id: 1001,
        name: 'rspec 1/4',
        stage: 'test',
        status: 'success',
        createdAt: new Date('2026-11-21T10:00:00Z'),
        startedAt: new Date('2026-11-21T10:00:05Z'),
        finishedAt: new Date('2026-11-21T10:04:00Z'),
        queuedSeconds: 5,
        runner: { id: 17, runnerType: 'project_type', description: 'runner 17' },
      },
    ],
  };

  it('answers 401 in the internal API error shape while webhooks are not configured', async () => {
    secret = makeWebhookSecret();
    service = await startInProcess();
    const answer = await deliver('Pipeline Hook', pipelineHook(pipeline));
    expect(answer.status).toBe(401);
    expect(answer.body).toEqual({ error: 'webhooks are not enabled on this service (set GITLAB_WEBHOOK_SECRET_FILE)', request_id: 'webhook-request-1' });
  });

  describe('with GITLAB_WEBHOOK_SECRET_FILE', () => {
    beforeEach(async () => {
      secret = makeWebhookSecret();
      service = await startInProcess({ GITLAB_WEBHOOK_SECRET_FILE: secret.file });
    });

    it('refuses a missing or wrong X-Gitlab-Token with 401, counts it, and never logs the token', async () => {
      expect(await deliver('Pipeline Hook', pipelineHook(pipeline), null)).toMatchObject({
        status: 401,
        body: { error: 'missing X-Gitlab-Token: set the secret token of the GitLab webhook' },
      });
      expect(await deliver('Job Hook', 'not even JSON', 'whsec-wrong')).toMatchObject({ status: 401, body: { error: 'invalid X-Gitlab-Token' } });
      expect(await webhookSeries()).toEqual([
        'ci_job_telemetry_webhooks_total{event="Pipeline Hook",outcome="unauthorized"} 1',
        'ci_job_telemetry_webhooks_total{event="Job Hook",outcome="unauthorized"} 1',
      ]);
      expect(service!.logs.text()).toContain('webhook refused: invalid X-Gitlab-Token');
      expect(service!.logs.text()).not.toContain('whsec-wrong');
      expect(service!.logs.text()).not.toContain(secret.secret);
    });

    it('accepts a Job Hook for a traced job and queues its span, then finds the redelivery a duplicate', async () => {
      const pickup = await service!.app.inject({
        method: 'POST',
        url: '/internal/ci/telemetry/job_payload',
        headers: { 'content-type': 'application/json', ...(await internalApiHeaders(service!.secrets.internalApiSecret)) },
        payload: JSON.stringify(jobPayloadRequest()),
      });
      expect(pickup.json()).toMatchObject({ telemetry: { enabled: true } });

      const delivered = await deliver('Job Hook', jobHook(pipeline, pipeline.jobs[0]));
      expect(delivered.status).toBe(200);
      expect(delivered.body).toMatchObject({ status: 'accepted', duplicates: 0, refused: 0 });
      expect(delivered.body.queued).toBeGreaterThan(0);
      const again = await deliver('Job Hook', jobHook(pipeline, pipeline.jobs[0]));
      expect(again.body).toMatchObject({ status: 'accepted', queued: 0, duplicates: delivered.body.queued });
      expect(await webhookSeries()).toEqual(['ci_job_telemetry_webhooks_total{event="Job Hook",outcome="accepted"} 2']);
    });

    it('ignores the events it does not read with a 200, so GitLab keeps the webhook enabled', async () => {
      const answer = await deliver('Push Hook', { object_kind: 'push' });
      expect(answer).toMatchObject({ status: 200, body: { status: 'ignored', reason: 'only Pipeline Hook and Job Hook events are read' } });
      expect(await webhookSeries()).toEqual(['ci_job_telemetry_webhooks_total{event="other",outcome="ignored"} 1']);
    });

    it('answers 400 naming what is wrong with a payload it cannot read', async () => {
      const answer = await deliver('Pipeline Hook', { object_kind: 'pipeline' });
      expect(answer.status).toBe(400);
      expect(answer.body).toEqual({ error: 'invalid Pipeline Hook: a Pipeline Hook has object_attributes', request_id: 'webhook-request-1' });
      expect(await webhookSeries()).toEqual(['ci_job_telemetry_webhooks_total{event="Pipeline Hook",outcome="invalid"} 1']);
    });

    it('takes a rotated secret from the file without a restart', async () => {
      const rotated = `whsec-${randomUUID()}`;
      writeFileSync(secret.file, `${secret.secret}\n${rotated}\n`);
      // The file is looked at again at most every 5 s.
      await new Promise((resolve) => setTimeout(resolve, 5100));
      expect((await deliver('Push Hook', {}, rotated)).status).toBe(200);
      expect((await deliver('Push Hook', {}, secret.secret)).status).toBe(200);
    }, 15_000);
  });
});
