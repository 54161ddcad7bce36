/**
 * Pickups gathered for one write: the first waits at most `lingerMs` for others, a full batch is written
 * at once. Writing each pickup's records on its own (the traced job, its pipelines, its queue-wait span:
 * four store commands, a timer and a promise chain) cost the decorator about 110 µs of CPU per pickup,
 * a third of all it spent (bench/job-payload.bench.ts, issue 21); a batch costs that once.
 *
 * `write` never throws (it reports its own failures). `flushed` writes what is waiting and waits for the
 * writes under way: before anything reads the records back (a job's end can come within the linger in a
 * test, or a job that runs `true`), and when the service stops, so that it loses no pickup it answered.
 */
export class PickupBatch<T> {
  private pending: T[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly writing = new Set<Promise<void>>();

  constructor(
    private readonly write: (batch: T[]) => Promise<void>,
    private readonly lingerMs: number,
    private readonly maxItems: number,
  ) {}

  add(item: T): void {
    this.pending.push(item);
    if (this.pending.length >= this.maxItems) this.flush();
    // Unref'd: a test that forgets to close an app must not hang on it; flushed() writes what waits.
    else this.timer ??= setTimeout(() => this.flush(), this.lingerMs).unref();
  }

  async flushed(): Promise<void> {
    this.flush();
    await Promise.all(this.writing);
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    const written = this.write(batch).finally(() => this.writing.delete(written));
    this.writing.add(written);
  }
}

/**
 * Spans are made JSON (a pickup batch's also built) this many at a time, the event loop let go between: a batch of 25
 * to 100 pickups is 0.3 to 1.5 ms of work, which a pickup arriving meanwhile would otherwise wait behind whole; in
 * slices it waits behind one (about 60 µs). Measured in GitLab's view (bench:ruby-client, docs/performance.md).
 */
const SPANS_PER_TURN = 5;

/**
 * Lets the event loop go at each slice's boundary, nothing in between: a promise only every SPANS_PER_TURN items, so
 * the items within a slice cost no microtask each (`if (atSliceBoundary(i)) await nextTurn()`).
 */
export const atSliceBoundary = (index: number): boolean => index > 0 && index % SPANS_PER_TURN === 0;
