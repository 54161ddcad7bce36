import { tokenDigest } from '../grants/token-digest';
import { traceContextOf } from '../trace-context/trace-context';
import { jobPayloadRequest, JOB_TOKEN, RUNNER_TOKEN } from '../../test/fixtures/job-payload';
import {
  applyPayloadChanges,
  DECORATOR_VARIABLES,
  payloadChanges,
  enabledTelemetry,
  flagContextOf,
  OTLP_ENDPOINT_VARIABLE,
  pickupRecords,
  tracesUrl,
  withoutTrailingSlash,
} from './job-payload-decoration';
import { JobPayload, Job, Runner } from './job-payload-request';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';
const KEY = Buffer.alloc(32, 7);
const PICKED_UP_AT = Date.UTC(2026, 10, 21, 10, 0, 30);

const { runner, job, payload } = jobPayloadRequest() as unknown as { runner: Runner; job: Job; payload: JobPayload };
const context = traceContextOf(TRACE_ID, SPAN_ID, 100);
const sampledContext = traceContextOf(TRACE_ID, SPAN_ID, 50);

describe('the decorator steps (SPEC §4)', () => {
  it('asks the flag about the project, its namespaces and the runner', () => {
    expect(flagContextOf(runner, job)).toEqual({ projectId: 7, namespaceId: 3, rootNamespaceId: 2, runnerId: 17, runnerType: 'project_type' });
  });

  it('builds every URL on the base without its trailing slashes, naming the traces path GitLab Runner posts to', () => {
    expect(tracesUrl(withoutTrailingSlash('https://gateway.example.com//'))).toBe('https://gateway.example.com/v1/traces');
    expect(tracesUrl(withoutTrailingSlash('https://gateway.example.com/jobs/1001/cap'))).toBe('https://gateway.example.com/jobs/1001/cap/v1/traces');
  });

  it('answers an enabled job with its trace context, endpoint and end as an ISO time, and a tracestate only when sampling is in force', () => {
    const endpoint = { url: 'https://gateway.example.com/jobs/1001/cap/v1/traces' };
    const endsAt = Date.UTC(2026, 10, 21, 11, 5, 0);
    expect(enabledTelemetry(context, endpoint, endsAt)).toEqual({
      enabled: true,
      reason: 'enabled',
      trace_id: TRACE_ID,
      span_parent_id: SPAN_ID,
      traceparent: context.traceparent,
      otel_endpoints: [endpoint],
      expires_at: '2026-11-21T11:05:00.000Z',
    });
    expect(enabledTelemetry(sampledContext, endpoint, endsAt)).toMatchObject({ tracestate: sampledContext.tracestate });
  });

  describe('pickupRecords', () => {
    it('makes a grant of token digests only, ending after the job timeout plus the grace, and the traced job with its queue time', () => {
      const { grant, tracedJob } = pickupRecords(runner, job, context, KEY, 300, PICKED_UP_AT);
      expect(grant).toEqual({
        jobId: 1001,
        projectId: 7,
        pipelineId: 500,
        rootPipelineId: 500,
        runnerId: 17,
        traceId: TRACE_ID,
        spanParentId: SPAN_ID,
        runnerTokenDigest: tokenDigest(KEY, RUNNER_TOKEN),
        jobTokenDigest: tokenDigest(KEY, JOB_TOKEN),
        expiresAt: PICKED_UP_AT + (3600 + 300) * 1000,
      });
      expect(JSON.stringify(grant)).not.toContain(RUNNER_TOKEN);
      expect(tracedJob).toEqual({
        jobId: 1001,
        pipelineId: 500,
        rootPipelineId: 500,
        projectId: 7,
        runnerId: 17,
        runnerType: 'project_type',
        traceId: TRACE_ID,
        queuedAt: Date.UTC(2026, 10, 21, 10, 0, 0),
        pickedUpAt: PICKED_UP_AT,
      });
    });

    it('indexes an opaque job token only: a JWT job token names its job (SPEC §5)', () => {
      expect(pickupRecords(runner, job, context, KEY, 300).saveOptions).toEqual({ indexJobToken: true });
      const jwt = { ...job, token: 'glcbt-eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl' };
      expect(pickupRecords(runner, jwt, context, KEY, 300).saveOptions).toEqual({ indexJobToken: false });
      expect(pickupRecords(runner, { ...job, token: undefined }, context, KEY, 300)).toMatchObject({
        grant: { jobTokenDigest: undefined },
        saveOptions: { indexJobToken: false },
      });
    });

    it('leaves out a queue time it cannot read, and carries the tracestate of a sampled pipeline', () => {
      const { tracedJob } = pickupRecords(runner, { ...job, queued_at: 'soon' }, sampledContext, KEY, 300);
      expect(tracedJob).not.toHaveProperty('queuedAt');
      expect(tracedJob.tracestate).toBe(sampledContext.tracestate);
    });
  });

  describe('payloadChanges applied (applyPayloadChanges)', () => {
    const endpoint = { url: 'https://gateway.example.com/jobs/1001/cap/v1/traces' };
    const capabilityBase = 'https://gateway.example.com/jobs/1001/cap';

    it("sets features.tracing and TRACEPARENT, masks the capability URL, and leaves the caller's payload as it was", () => {
      const sent = structuredClone(payload);
      const decorated = applyPayloadChanges(payload, payloadChanges(context, endpoint, capabilityBase));
      expect(payload).toEqual(sent);
      expect(decorated.features).toEqual({
        ...(payload.features as object),
        tracing: { trace_id: TRACE_ID, span_parent_id: SPAN_ID, traceparent: context.traceparent, otel_endpoints: [endpoint] },
      });
      expect(decorated.variables).toEqual([
        ...(payload.variables ?? []),
        { key: 'TRACEPARENT', value: context.traceparent, public: true, masked: false },
        { key: OTLP_ENDPOINT_VARIABLE, value: capabilityBase, public: false, masked: true },
      ]);
      expect(decorated.steps).toBe(payload.steps);
    });

    it('replaces the variables it owns instead of adding a second one, a stale TRACESTATE included', () => {
      const stale = {
        ...payload,
        variables: [
          { key: 'TRACEPARENT', value: 'stale', public: true, masked: false },
          { key: 'TRACESTATE', value: 'ot=th:8', public: true, masked: false },
          { key: OTLP_ENDPOINT_VARIABLE, value: 'https://elsewhere', public: false, masked: true },
          { key: 'KEPT', value: '1', public: true, masked: false },
        ],
      };
      const variables = applyPayloadChanges(stale, payloadChanges(context, endpoint, undefined)).variables!;
      expect(variables.map((variable) => (variable as { key: string }).key)).toEqual(['KEPT', 'TRACEPARENT']);
      expect(applyPayloadChanges(stale, payloadChanges(sampledContext, endpoint, undefined)).variables).toContainEqual({
        key: 'TRACESTATE',
        value: sampledContext.tracestate,
        public: true,
        masked: false,
      });
    });

    it('are the same for every payload: a caller holding the payload can apply them itself', () => {
      const changes = payloadChanges(sampledContext, endpoint, capabilityBase);
      expect(changes.variables.remove).toEqual(DECORATOR_VARIABLES);
      expect(changes.variables.append.map((variable) => variable.key)).toEqual(['TRACEPARENT', 'TRACESTATE', OTLP_ENDPOINT_VARIABLE]);
      expect(applyPayloadChanges({ id: 1 }, changes)).toEqual({ id: 1, variables: changes.variables.append, features: changes.features });
    });
  });
});
