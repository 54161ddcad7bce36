import { Delivery, deliveryOf } from './outbox-deliverer';

const MAX_BACKOFF_MS = 60_000;
const delayOf = (delivery: Delivery) => (delivery.kind === 'retry' ? delivery.delayMs : NaN);

/** The outbox's mapping of the collector client's one result (SPEC §10). */
describe('deliveryOf', () => {
  it("acknowledges an accepted export, counting the spans the collector's partial success rejected", () => {
    expect(deliveryOf({ kind: 'accepted', status: 200, partialSuccess: { rejectedItems: 3, errorMessage: 'old' } }, 0, MAX_BACKOFF_MS)).toEqual({
      kind: 'accepted',
      rejected: 3,
    });
    expect(deliveryOf({ kind: 'accepted', status: 200, partialSuccess: undefined }, 0, MAX_BACKOFF_MS)).toEqual({ kind: 'accepted', rejected: 0 });
  });

  it('drops a refused export, naming the status', () => {
    expect(deliveryOf({ kind: 'refused', status: 400, contentType: undefined, body: Buffer.alloc(0) }, 0, MAX_BACKOFF_MS)).toEqual({
      kind: 'refused',
      status: 400,
    });
  });

  it('backs off exponentially per attempt, with jitter, up to the maximum', () => {
    const retry = { kind: 'retry', happened: 'unreachable' } as const;
    expect(deliveryOf(retry, 0, MAX_BACKOFF_MS, 0.5)).toEqual({ kind: 'retry', reason: 'unreachable', delayMs: 500 });
    expect(deliveryOf(retry, 3, MAX_BACKOFF_MS, 0.5)).toEqual({ kind: 'retry', reason: 'unreachable', delayMs: 4000 });
    expect(delayOf(deliveryOf(retry, 3, MAX_BACKOFF_MS, 0))).toBeCloseTo(3200);
    expect(delayOf(deliveryOf(retry, 3, MAX_BACKOFF_MS, 1))).toBeCloseTo(4800);
    expect(deliveryOf(retry, 40, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: MAX_BACKOFF_MS });
  });

  it("waits at least the collector's Retry-After, up to five minutes, and names what happened", () => {
    expect(deliveryOf({ kind: 'retry', happened: 503, retryAfterSeconds: 30 }, 0, MAX_BACKOFF_MS, 0.5)).toEqual({
      kind: 'retry',
      reason: '503',
      delayMs: 30_000,
    });
    expect(deliveryOf({ kind: 'retry', happened: 429, retryAfterSeconds: 1 }, 3, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: 4000 });
    expect(deliveryOf({ kind: 'retry', happened: 429, retryAfterSeconds: 3600 }, 0, MAX_BACKOFF_MS, 0.5)).toMatchObject({ delayMs: 300_000 });
    expect(deliveryOf({ kind: 'retry', happened: 'timeout' }, 0, MAX_BACKOFF_MS, 0.5)).toMatchObject({ reason: 'timeout' });
  });
});
