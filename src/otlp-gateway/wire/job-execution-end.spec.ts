import { otlpProto } from '../../otlp/otlp-proto';
import { jobExecutionEnds, jobExecutionEndsOf } from './job-execution-end';
import { enforceExport } from './otlp-payload';

const Request = otlpProto().lookupType('otlp.ExportTraceServiceRequest');

const JOB_SPAN = '1122334455667788';
const span = (name: string, parent: string, endNanos: string, status?: string, errorCode?: number) => ({
  traceId: Buffer.alloc(16, 1),
  spanId: Buffer.alloc(8, 2),
  parentSpanId: Buffer.from(parent, 'hex'),
  name,
  startTimeUnixNano: '1700000000000000000',
  endTimeUnixNano: endNanos,
  attributes: [{ key: 'ci.job.id', value: { intValue: 5 } }, ...(status === undefined ? [] : [{ key: 'ci.job.status', value: { stringValue: status } }])],
  ...(errorCode === undefined ? {} : { status: { code: errorCode } }),
});
const protobufExport = (...spans: unknown[]) => Buffer.from(Request.encode(Request.fromObject({ resourceSpans: [{ scopeSpans: [{ spans }] }] })).finish());

describe("the runner's job_execution end, read from an export (SPEC §10 without webhooks)", () => {
  it('reads the end and ci.job.status of the job_execution span under the job span, in protobuf', () => {
    const body = protobufExport(span('step_script', JOB_SPAN, '1700000005000000000'), span('job_execution', JOB_SPAN, '1700000009000000000', 'failed'));
    expect(jobExecutionEnds('protobuf', body, JOB_SPAN)).toEqual([{ endMs: 1_700_000_009_000, status: 'failed' }]);
  });

  it('takes an Error status as failed when ci.job.status is absent, and ignores a job_execution under another parent', () => {
    const body = protobufExport(
      span('job_execution', JOB_SPAN, '1700000009000000000', undefined, 2),
      span('job_execution', 'ffffffffffffffff', '1700000001000000000', 'success'),
    );
    expect(jobExecutionEnds('protobuf', body, JOB_SPAN)).toEqual([{ endMs: 1_700_000_009_000, status: 'failed' }]);
  });

  it('reads the job_execution spans enforcement noted on its walk, and enforcement notes no other', () => {
    const grant = { jobId: 5, projectId: 7, pipelineId: 500, runnerId: 17, traceId: Buffer.alloc(16, 1).toString('hex') };
    const body = protobufExport(span('step_script', JOB_SPAN, '1700000005000000000'), span('job_execution', JOB_SPAN, '1700000009000000000', 'success'));
    const enforced = enforceExport('traces', 'protobuf', body, grant, Number.MAX_SAFE_INTEGER);
    expect(enforced.jobExecutionSpans).toHaveLength(1);
    expect(jobExecutionEndsOf(body, enforced.jobExecutionSpans!, JOB_SPAN)).toEqual([{ endMs: 1_700_000_009_000, status: 'success' }]);
    expect(
      enforceExport('traces', 'protobuf', protobufExport(span('step_script', JOB_SPAN, '1')), grant, Number.MAX_SAFE_INTEGER).jobExecutionSpans,
    ).toBeUndefined();
  });

  it('reads OTLP/JSON the same way, and finds nothing in an export without job_execution', () => {
    const json = Buffer.from(
      JSON.stringify({
        resourceSpans: [
          {
            scopeSpans: [
              {
                spans: [
                  {
                    name: 'job_execution',
                    parentSpanId: JOB_SPAN.toUpperCase(),
                    endTimeUnixNano: '1700000009000000000',
                    attributes: [{ key: 'ci.job.status', value: { stringValue: 'success' } }],
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
    expect(jobExecutionEnds('json', json, JOB_SPAN)).toEqual([{ endMs: 1_700_000_009_000, status: 'success' }]);
    expect(jobExecutionEnds('protobuf', protobufExport(span('step_script', JOB_SPAN, '1')), JOB_SPAN)).toEqual([]);
  });
});
