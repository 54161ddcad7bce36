import { parseJobPayloadRequest } from './job-payload-request';

const valid = () => ({
  runner: { id: 17, runner_type: 'project_type', token: 'glrt-x', features: { tracing: true } },
  job: { id: 1001, project_id: 7, pipeline_id: 500, root_pipeline_id: 500, timeout: 3600, queued_at: '2026-11-21T10:00:00Z', token: 'glcbt-x' },
  payload: { id: 1001, variables: [], features: {}, steps: [{ script: ['make'] }] },
});

const fieldsOf = (body: unknown) => parseJobPayloadRequest(body).problems?.map((problem) => problem.field) ?? [];

describe('parseJobPayloadRequest (SPEC §4 request)', () => {
  it('passes the job payload through as the same object, without copying or checking the rest of it', () => {
    const body = valid();
    expect(parseJobPayloadRequest(body).request?.payload).toBe(body.payload);
  });

  it('takes ids only as JSON numbers: "17" is refused, not coerced', () => {
    const body = valid();
    (body.runner as Record<string, unknown>).id = '17';
    (body.job as Record<string, unknown>).root_pipeline_id = 500.5;
    expect(fieldsOf(body)).toEqual(['runner.id', 'job.root_pipeline_id']);
  });

  it('names every bad field at once, with the field in each problem', () => {
    const { problems } = parseJobPayloadRequest({
      runner: { id: 0, runner_type: 'shared', token: '' },
      job: { id: 1, project_id: 1, pipeline_id: 1, root_pipeline_id: 1, timeout: 31 * 24 * 3600 + 1, queued_at: '2026-02-30T10:00:00Z' },
      payload: { variables: {}, features: [] },
    });
    expect(problems?.map((problem) => problem.field)).toEqual([
      'runner.id',
      'runner.runner_type',
      'runner.token',
      'job.timeout',
      'job.queued_at',
      'payload.variables',
      'payload.features',
    ]);
    for (const { field, problems: texts } of problems ?? []) expect(texts[0].startsWith(`${field} `)).toBe(true);
  });

  it('refuses a body that is not an object by naming the three parts', () => {
    for (const body of [undefined, null, 'text', [valid()]]) expect(fieldsOf(body)).toEqual(['runner', 'job', 'payload']);
  });

  it('lets a caller that asked for the changes leave the payload out, and no one else', () => {
    const { payload: _, ...withoutPayload } = valid();
    expect(fieldsOf(withoutPayload)).toEqual(['payload']);
    expect(parseJobPayloadRequest(withoutPayload, false).request?.payload).toBeUndefined();
    // A payload sent anyway is still checked.
    expect(parseJobPayloadRequest({ ...withoutPayload, payload: [] }, false).problems?.map((problem) => problem.field)).toEqual(['payload']);
  });

  it('treats null optional fields as absent, so no null token reaches the digest', () => {
    const body = valid();
    Object.assign(body.runner, { token: null, features: null });
    Object.assign(body.job, { token: null, queued_at: null, namespace_id: null });
    const { request } = parseJobPayloadRequest(body);
    expect(request?.runner).toEqual({ id: 17, runner_type: 'project_type', token: undefined, features: undefined });
    expect(request?.job.token).toBeUndefined();
    expect(request?.job.namespace_id).toBeUndefined();
  });
});
