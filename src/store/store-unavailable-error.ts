/** The store (whichever port asked) did not answer: callers answer an outage, never a refusal. */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StoreUnavailableError';
  }
}
