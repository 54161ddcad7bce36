import { createHmac, randomBytes } from 'node:crypto';
import {
  encodeThreshold,
  isSampled,
  mintTraceContext,
  randomnessOf,
  samplingThreshold,
  spanIdFor,
  traceIdFor,
  tracestateFor,
} from './trace-context';

const key = Buffer.from('d2hhdCBhIGdvb2QgdHJhY2Uga2V5IGZvciB0ZXN0aW5nISE=', 'base64');
const hmacHex = (message: string, bytes: number) =>
  createHmac('sha256', key).update(message).digest().subarray(0, bytes).toString('hex');

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
