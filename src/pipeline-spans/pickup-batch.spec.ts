import { PickupBatch } from './pickup-batch';

describe('PickupBatch', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  const recording = () => {
    const writes: number[][] = [];
    let finishWrite: () => void = () => undefined;
    const write = (batch: number[]) => {
      writes.push(batch);
      return new Promise<void>((resolve) => (finishWrite = resolve));
    };
    return { writes, write, finish: () => finishWrite() };
  };

  it('writes the pickups of one linger together, and nothing before the first has waited it', () => {
    const { writes, write } = recording();
    const batch = new PickupBatch<number>(write, 50, 100);
    batch.add(1);
    jest.advanceTimersByTime(30);
    batch.add(2);
    expect(writes).toEqual([]);
    jest.advanceTimersByTime(20);
    expect(writes).toEqual([[1, 2]]);
    batch.add(3);
    jest.advanceTimersByTime(50);
    expect(writes).toEqual([[1, 2], [3]]);
  });

  it('writes a full batch at once, without waiting', () => {
    const { writes, write } = recording();
    const batch = new PickupBatch<number>(write, 50, 3);
    for (const pickup of [1, 2, 3, 4]) batch.add(pickup);
    expect(writes).toEqual([[1, 2, 3]]);
    jest.advanceTimersByTime(50);
    expect(writes).toEqual([[1, 2, 3], [4]]);
  });

  it('when flushed writes what waits and resolves only once the writes under way have finished', async () => {
    const { writes, write, finish } = recording();
    const batch = new PickupBatch<number>(write, 50, 100);
    batch.add(7);
    let closed = false;
    const closing = batch.flushed().then(() => (closed = true));
    expect(writes).toEqual([[7]]);
    await Promise.resolve();
    expect(closed).toBe(false);
    finish();
    await closing;
    expect(closed).toBe(true);
    // Nothing left behind for the timer to write later.
    jest.advanceTimersByTime(100);
    expect(writes).toEqual([[7]]);
  });
});
