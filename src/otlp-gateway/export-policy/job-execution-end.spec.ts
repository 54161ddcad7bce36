import { otlpProto } from '../../otlp/otlp-proto';
import { lengthDelimitedHeader } from '../../otlp/otlp-wire';
import { enforceExport } from './enforce-export';

const root = otlpProto();
const Request = root.lookupType('otlp.ExportTraceServiceRequest');
const Span = root.lookupType('otlp.Span');

const JOB_SPAN = '1122334455667788';
const OTHER_PARENT = 'ffffffffffffffff';
const TRACE = Buffer.alloc(16, 1);
const grant = { jobId: 5, projectId: 7, pipelineId: 500, runnerId: 17, traceId: TRACE.toString('hex') };
const span = (name: string, parent: string, endNanos: string, status?: string, errorCode?: number, traceId = TRACE) => ({
  traceId,
  spanId: Buffer.alloc(8, 2),
  parentSpanId: Buffer.from(parent, 'hex'),
  name,
  startTimeUnixNano: '1700000000000000000',
  endTimeUnixNano: endNanos,
  attributes: [{ key: 'ci.job.id', value: { intValue: 5 } }, ...(status === undefined ? [] : [{ key: 'ci.job.status', value: { stringValue: status } }])],
  ...(errorCode === undefined ? {} : { status: { code: errorCode } }),
});
const protobufExport = (...spans: unknown[]) => Buffer.from(Request.encode(Request.fromObject({ resourceSpans: [{ scopeSpans: [{ spans }] }] })).finish());
const endsOf = (body: Buffer, encoding: 'protobuf' | 'json' = 'protobuf') =>
  enforceExport('traces', encoding, body, grant, Number.MAX_SAFE_INTEGER).jobExecutionEnds;

describe("the runner's job_execution ends noted by enforcement (SPEC §10 without webhooks)", () => {
  it('notes the end, ci.job.status and parent of a job_execution span, in protobuf, and no other span', () => {
    const body = protobufExport(span('step_script', JOB_SPAN, '1700000005000000000'), span('job_execution', JOB_SPAN, '1700000009000000000', 'failed'));
    expect(endsOf(body)).toEqual([{ parentSpanId: JOB_SPAN, endMs: 1_700_000_009_000, status: 'failed' }]);
    expect(endsOf(protobufExport(span('step_script', JOB_SPAN, '1')))).toBeUndefined();
  });

  it('takes an Error status as failed when ci.job.status is absent, and notes each parent for the gateway to match', () => {
    const body = protobufExport(
      span('job_execution', JOB_SPAN, '1700000009000000000', undefined, 2),
      span('job_execution', OTHER_PARENT, '1700000001000000000', 'success'),
    );
    expect(endsOf(body)).toEqual([
      { parentSpanId: JOB_SPAN, endMs: 1_700_000_009_000, status: 'failed' },
      { parentSpanId: OTHER_PARENT, endMs: 1_700_000_001_000, status: 'success' },
    ]);
  });

  it('notes only job_execution spans that go on', () => {
    const foreign = span('job_execution', JOB_SPAN, '1700000009000000000', 'success', undefined, Buffer.alloc(16, 9));
    const enforced = enforceExport('traces', 'protobuf', protobufExport(foreign), grant, Number.MAX_SAFE_INTEGER);
    expect(enforced.rejectedItems).toBe(1);
    expect(enforced.jobExecutionEnds).toBeUndefined();
  });

  it('rejects a job_execution span whose status is unreadable inside, without noting an end', () => {
    // Span.status (field 15) holding a truncated varint: the collector could not decode the span, nor the request
    // carrying it.
    const spanBytes = Buffer.concat([
      Span.encode(Span.fromObject(span('job_execution', JOB_SPAN, '1700000009000000000'))).finish(),
      Buffer.from([0x7a, 0x02, 0x18, 0xff]),
    ]);
    const scope = Buffer.concat([lengthDelimitedHeader(2, spanBytes.length), spanBytes]);
    const resource = Buffer.concat([lengthDelimitedHeader(2, scope.length), scope]);
    const request = Buffer.concat([lengthDelimitedHeader(1, resource.length), resource]);
    const enforced = enforceExport('traces', 'protobuf', request, grant, Number.MAX_SAFE_INTEGER);
    expect(enforced.forwardedItems).toBe(0);
    expect(enforced.rejections?.undecodable).toBe(1);
    expect(enforced.errorMessage).toContain('1 span rejected: the collector cannot decode it (Status: malformed protobuf varint)');
    expect(enforced.jobExecutionEnds).toBeUndefined();
  });

  it('notes OTLP/JSON the same way, from the walk, with the parent in lowercase', () => {
    const json = Buffer.from(
      JSON.stringify({
        resourceSpans: [
          {
            scopeSpans: [
              {
                spans: [
                  { traceId: grant.traceId, name: 'step_script', parentSpanId: JOB_SPAN, endTimeUnixNano: '1700000005000000000' },
                  {
                    traceId: grant.traceId,
                    name: 'job_execution',
                    parentSpanId: JOB_SPAN.toUpperCase(),
                    endTimeUnixNano: '1700000009000000000',
                    attributes: [{ key: 'ci.job.status', value: { stringValue: 'success' } }],
                  },
                  { traceId: grant.traceId, name: 'job_execution', parentSpanId: JOB_SPAN, endTimeUnixNano: 'soon' },
                ],
              },
            ],
          },
        ],
      }),
    );
    const enforced = enforceExport('traces', 'json', json, grant, Number.MAX_SAFE_INTEGER);
    // An end time the collector cannot read ('soon') is a span it cannot decode: rejected, no end noted from it.
    expect(enforced.forwardedItems).toBe(2);
    expect(enforced.errorMessage).toBe('1 span rejected: the collector cannot decode it (Span.endTimeUnixNano is not a uint64)');
    expect(enforced.jobExecutionEnds).toEqual([{ parentSpanId: JOB_SPAN, endMs: 1_700_000_009_000, status: 'success' }]);
  });
});
