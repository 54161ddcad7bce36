import { createHash, createHmac, randomBytes } from 'node:crypto';
import {
  encodeThreshold,
  gitlabTraceContextOf,
  isGitlabPipelineSampled,
  isSampled,
  randomnessOf,
  samplingThreshold,
  spanIdFor,
  traceContextOf,
  traceIdFor,
  tracestateFor,
} from './trace-context';

const key = Buffer.from('d2hhdCBhIGdvb2QgdHJhY2Uga2V5IGZvciB0ZXN0aW5nISE=', 'base64');
const mintTraceContext = (traceKey: Buffer, job: { jobId: number; rootPipelineId: number }, percent: number) =>
  traceContextOf(traceIdFor(traceKey, job.rootPipelineId), spanIdFor(traceKey, job.jobId), percent);
const hmacHex = (message: string, bytes: number) => createHmac('sha256', key).update(message).digest().subarray(0, bytes).toString('hex');

describe('trace context', () => {
  it('gives every job of a root pipeline the same trace id: the first 16 bytes of HMAC(key, "pipeline:" + id)', () => {
    const jobs = [1001, 1002, 1003].map((jobId) => mintTraceContext(key, { jobId, rootPipelineId: 500 }, 100));
    expect(new Set(jobs.map((context) => context.traceId))).toEqual(new Set([hmacHex('pipeline:500', 16)]));
    expect(mintTraceContext(key, { jobId: 1001, rootPipelineId: 501 }, 100).traceId).toBe(hmacHex('pipeline:501', 16));
  });

  it('gives each job its own span id: the first 8 bytes of HMAC(key, "job:" + id)', () => {
    const spanIds = [1001, 1002, 1003].map((jobId) => spanIdFor(key, jobId));
    expect(spanIds).toEqual([hmacHex('job:1001', 8), hmacHex('job:1002', 8), hmacHex('job:1003', 8)]);
    expect(new Set(spanIds).size).toBe(3);
  });

  it('writes a traceparent with the sampled and random flags (03)', () => {
    for (let jobId = 1; jobId <= 200; jobId++) {
      const context = mintTraceContext(key, { jobId, rootPipelineId: jobId % 7 }, 100);
      expect(context.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-03$/);
      expect(context.traceparent).toBe(`00-${context.traceId}-${context.spanParentId}-03`);
    }
  });

  it('never mints an all-zero id, even for keys other than the configured one', () => {
    for (let i = 0; i < 500; i++) {
      const randomKey = randomBytes(32);
      expect(traceIdFor(randomKey, i)).not.toMatch(/^0+$/);
      expect(spanIdFor(randomKey, i)).not.toMatch(/^0+$/);
    }
  });

  it('is unguessable without the key: another key gives other ids', () => {
    expect(traceIdFor(randomBytes(32), 500)).not.toBe(traceIdFor(key, 500));
  });

  it('is idempotent: the same job always gets the same context', () => {
    expect(mintTraceContext(key, { jobId: 9, rootPipelineId: 3 }, 25)).toEqual(mintTraceContext(key, { jobId: 9, rootPipelineId: 3 }, 25));
  });

  describe('tracestate ot=th (OpenTelemetry consistent probability sampling)', () => {
    // Threshold T = round((1 - p) * 2^56), exact in BigInt (a double cannot hold 2^56 * 0.9);
    // written as 14 hex digits without trailing zeros.
    const expectedTh = (percent: number) => {
      const t = ((1n << 56n) * BigInt(100 - percent) + 50n) / 100n;
      return t.toString(16).padStart(14, '0').replace(/0+$/, '');
    };

    it.each([
      [50, 'ot=th:8'],
      [25, 'ot=th:c'],
      [10, `ot=th:${expectedTh(10)}`],
    ])('writes the threshold of %i %% as %s', (percent, tracestate) => {
      expect(tracestateFor(percent)).toBe(tracestate);
      expect(mintTraceContext(key, { jobId: 1, rootPipelineId: 1 }, percent).tracestate).toBe(tracestate);
    });

    it('says nothing at 100 %', () => {
      expect(tracestateFor(100)).toBeUndefined();
      expect(mintTraceContext(key, { jobId: 1, rootPipelineId: 1 }, 100).tracestate).toBeUndefined();
      expect(mintTraceContext(key, { jobId: 1, rootPipelineId: 1 }, 100).sampled).toBe(true);
    });

    it('keeps a trace iff its rightmost 56 bits are at or above the threshold it writes', () => {
      for (const percent of [1, 10, 25, 50, 99]) {
        const th = tracestateFor(percent)!.slice('ot=th:'.length);
        const threshold = BigInt(`0x${th.padEnd(14, '0')}`);
        for (let pipeline = 0; pipeline < 2000; pipeline++) {
          const traceId = traceIdFor(key, pipeline);
          const r = BigInt(`0x${traceId.slice(18)}`);
          expect(isSampled(traceId, percent)).toBe(r >= threshold);
        }
      }
    });

    it('samples close to the percentage, and raising it never drops a pipeline that was in', () => {
      const pipelines = Array.from({ length: 10_000 }, (_, id) => traceIdFor(key, id));
      const at = (percent: number) => new Set(pipelines.filter((traceId) => isSampled(traceId, percent)));
      const quarter = at(25);
      const half = at(50);
      expect(quarter.size / pipelines.length).toBeGreaterThan(0.235);
      expect(quarter.size / pipelines.length).toBeLessThan(0.265);
      for (const traceId of quarter) expect(half.has(traceId)).toBe(true);
    });

    it('samples nothing at 0 % and writes no threshold it cannot express', () => {
      expect(samplingThreshold(0)).toBeNull();
      expect(tracestateFor(0)).toBeUndefined();
      expect(isSampled(traceIdFor(key, 1), 0)).toBe(false);
    });

    it('encodes the zero threshold as "0" and reads R from the last 14 hex digits', () => {
      expect(encodeThreshold(0n)).toBe('0');
      expect(randomnessOf('0000000000000000ffffffffffffffff')).toBe((1n << 56n) - 1n);
    });
  });
});

describe('gitlab trace-id scheme (GitLab Rails ids)', () => {
  // Vectors computed here with node:crypto from the rule Rails applies, not from our code.
  const railsSpanId = (rootPipelineId: number, jobId: number) => createHash('sha256').update(`${rootPipelineId}:${jobId}:running`).digest('hex').slice(0, 16);

  it('uses the root pipeline id as the trace id and Rails job_running span as the parent', () => {
    const context = gitlabTraceContextOf(500, 1001, 100);
    expect(context.traceId).toBe('000000000000000000000000000001f4');
    expect(context.spanParentId).toBe(railsSpanId(500, 1001));
    expect(context.traceparent).toBe(`00-000000000000000000000000000001f4-${railsSpanId(500, 1001)}-01`);
    expect(context.tracestate).toBeUndefined();
    expect(context.sampled).toBe(true);
  });

  it('puts every job of a pipeline, child pipelines too, in the root pipeline trace', () => {
    const ids = [1001, 1002, 2001].map((jobId) => gitlabTraceContextOf(987654321, jobId, 100));
    expect(new Set(ids.map((context) => context.traceId))).toEqual(new Set([(987654321).toString(16).padStart(32, '0')]));
    expect(new Set(ids.map((context) => context.spanParentId)).size).toBe(3);
  });

  it('never writes ot=th and never claims random ids, whatever the sampling percentage', () => {
    for (const percent of [1, 25, 50, 99.5]) {
      const context = gitlabTraceContextOf(12345, 1, percent);
      expect(context.tracestate).toBeUndefined();
      expect(context.traceparent.endsWith('-01')).toBe(true);
    }
  });

  it('samples whole pipelines, monotone in the percentage', () => {
    const pipelines = Array.from({ length: 20_000 }, (_, index) => 100_000 + index);
    const at25 = pipelines.filter((id) => isGitlabPipelineSampled(id, 25));
    const at50 = pipelines.filter((id) => isGitlabPipelineSampled(id, 50));
    expect(at25.length / pipelines.length).toBeCloseTo(0.25, 1);
    expect(at50.length / pipelines.length).toBeCloseTo(0.5, 1);
    expect(at25.every((id) => isGitlabPipelineSampled(id, 50))).toBe(true);
    expect(pipelines.some((id) => isGitlabPipelineSampled(id, 0))).toBe(false);
    // Every job of one pipeline gets the same decision.
    expect(new Set([1, 2, 3].map((jobId) => gitlabTraceContextOf(100_007, jobId, 25).sampled)).size).toBe(1);
  });
});
