import { TimeoutError, withTimeout } from './with-timeout';

describe('withTimeout', () => {
  afterEach(() => jest.useRealTimers());

  it("gives the operation's result, or its own error, when it settles in time", async () => {
    await expect(withTimeout(async () => 'stored', 100)).resolves.toBe('stored');
    await expect(withTimeout(() => 'ready', 100)).resolves.toBe('ready');
    await expect(withTimeout(async () => Promise.reject(new Error('READONLY')), 100)).rejects.toThrow('READONLY');
  });

  it('stops waiting at the timeout for an operation that never answers', async () => {
    jest.useFakeTimers();
    const waiting = withTimeout(() => new Promise<never>(() => undefined), 150);
    const outcome = expect(waiting).rejects.toEqual(new TimeoutError(150));
    await jest.advanceTimersByTimeAsync(150);
    await outcome;
  });
});
