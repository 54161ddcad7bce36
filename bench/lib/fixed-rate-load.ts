import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

export interface FixedRateOptions {
  readonly origin: string;
  readonly path: string;
  readonly ratePerSecond: number;
  readonly durationSeconds: number;
  readonly connections: number;
  /** Called per request, so a re-signed auth header is picked up mid-run. */
  readonly headers: () => Record<string, string>;
  readonly bodyFor: (sequence: number) => string;
}

export interface FixedRateResult {
  readonly sent: number;
  readonly ok: number;
  readonly non2xx: number;
  readonly errors: number;
  /**
   * From when each request was due (start + i / rate) to its last response byte, in ms, of the 2xx answers: a
   * generator that fell behind (a busy machine) adds to what it measures rather than hiding it, as a caller due
   * to call at that moment would have waited.
   */
  readonly latenciesMs: Float64Array;
  /** Requests per second actually sent, over the whole run. */
  readonly achievedRate: number;
  /** Largest delay between a request's scheduled and actual send: > a few ms means the generator fell behind. */
  readonly maxSendLagMs: number;
}

/**
 * Open-loop load at a fixed rate: request i is sent at start + i/rate whether or not earlier answers
 * came back. autocannon's `overallRate` is not used here: it gives each connection a quota per
 * wall-clock second that the connection fires back-to-back (closed loop) at the start of that second,
 * so "1,000 req/s" is really full-speed bursts for part of every second, and its latency histogram
 * has 1 ms resolution (`lowestDiscernibleValue: 1`) plus a coordinated-omission correction computed
 * with the wrong unit (`Math.ceil(1 / rate)` = 1 ms), which inflates p99 for a ~1 ms service.
 */
export async function runFixedRate(options: FixedRateOptions): Promise<FixedRateResult> {
  const pool = new Pool(options.origin, { connections: options.connections, pipelining: 1 });
  const total = Math.round(options.ratePerSecond * options.durationSeconds);
  const intervalMs = 1000 / options.ratePerSecond;
  const latencies = new Float64Array(total);
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let sent = 0;
  let outstanding = 0;
  let maxSendLagMs = 0;
  let lastAnswerAt = 0;

  const start = performance.now();
  await new Promise<void>((resolve) => {
    const settle = () => {
      outstanding--;
      lastAnswerAt = performance.now();
      if (sent === total && outstanding === 0) resolve();
    };
    const send = (sequence: number) => {
      const dueAt = start + sequence * intervalMs;
      outstanding++;
      pool
        .request({ method: 'POST', path: options.path, headers: options.headers(), body: options.bodyFor(sequence) })
        .then(async (response) => {
          await response.body.dump();
          if (response.statusCode >= 200 && response.statusCode < 300) latencies[ok++] = performance.now() - dueAt;
          else non2xx++;
        })
        .catch(() => errors++)
        .finally(settle);
    };
    const tick = () => {
      const now = performance.now();
      const due = Math.min(total, Math.floor((now - start) / intervalMs) + 1);
      while (sent < due) {
        maxSendLagMs = Math.max(maxSendLagMs, now - (start + sent * intervalMs));
        send(sent++);
      }
      if (sent < total) setTimeout(tick, Math.max(0, start + sent * intervalMs - performance.now()));
    };
    tick();
  });
  await pool.close();
  return {
    sent,
    ok,
    non2xx,
    errors,
    latenciesMs: latencies.subarray(0, ok),
    achievedRate: sent / ((lastAnswerAt - start) / 1000),
    maxSendLagMs,
  };
}
