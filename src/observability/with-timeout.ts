/** Thrown by {@link withTimeout} when the operation has not settled in time; its message says how long was waited. */
export class TimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
    this.name = 'TimeoutError';
  }
}

/**
 * The operation's result, or a TimeoutError after `timeoutMs`: a caller with a promise to keep (a pickup's
 * answer, a readiness probe's) stops waiting, whatever the operation goes on doing. One promise and one timer:
 * this wraps every pickup's store write, where each promise more is CPU the job-request API waits on.
 */
export function withTimeout<T>(operation: () => Promise<T> | T, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new TimeoutError(timeoutMs)), timeoutMs);
    const settle = {
      resolved: (value: T) => {
        clearTimeout(timer);
        resolve(value);
      },
      rejected: (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    };
    try {
      // A native promise is its own Promise.resolve: no promise more.
      Promise.resolve(operation()).then(settle.resolved, settle.rejected);
    } catch (error) {
      settle.rejected(error);
    }
  });
}
