/** Thrown by {@link withTimeout} when the operation has not settled in time; its message says how long was waited. */
export class TimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
    this.name = 'TimeoutError';
  }
}

/**
 * The operation's result, or a TimeoutError after `timeoutMs`: a caller with a promise to keep (a pickup's
 * answer, a readiness probe's) stops waiting, whatever the operation goes on doing.
 */
export async function withTimeout<T>(operation: () => Promise<T> | T, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      Promise.resolve().then(operation),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new TimeoutError(timeoutMs)), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
