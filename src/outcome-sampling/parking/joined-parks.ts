import { ParkKeys, ParkManyEntry, ParkReply } from './redis-parking-store.scripts';

/** One entry to park: its keys and arguments as the joined transaction takes them, and its body. */
export interface JoinedPark {
  readonly keys: ParkKeys;
  readonly args: ParkManyEntry;
  readonly body: Buffer;
}

interface Waiting {
  readonly park: JoinedPark;
  readonly resolve: (reply: ParkReply) => void;
  readonly reject: (error: Error) => void;
}

/**
 * Parks joined into one store transaction (issue 37). Outside a cluster a park is a transaction of its own commands
 * (MULTI, a script that decides, the body's HSET, a script that settles, EXEC: src/outcome-sampling/parking/
 * redis-parking-store.ts), which keeps the body out of Lua; joined, its fixed commands are built, written and run
 * once for several exports, as forwarding sends one upstream request for several
 * (src/collector/coalescing-collector-client.ts).
 *
 * Clocked by the store, as the coalescing client is by the collector: with no transaction of ours in flight, a park
 * leaves at the end of this event-loop turn with whatever arrived in the same turn, so an idle service adds nothing;
 * while one is in flight, parks gather until it is answered or the limits are reached. Each caller is answered from
 * its own entry's reply, or from the error that stands for it: a transaction that fails fails every entry it carried,
 * and each caller answers its runner as a single park's failure would (retryable, nothing acknowledged).
 */
export class JoinedParks {
  private waiting: Waiting[] = [];
  private waitingBytes = 0;
  private inFlight = 0;
  private turnEndScheduled = false;

  constructor(
    private readonly send: (parks: readonly JoinedPark[]) => Promise<(ParkReply | Error)[]>,
    private readonly limits: { readonly maxEntries: number; readonly maxBytes: number },
  ) {}

  park(park: JoinedPark): Promise<ParkReply> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ park, resolve, reject });
      this.waitingBytes += park.body.length;
      if (this.waiting.length >= this.limits.maxEntries || this.waitingBytes >= this.limits.maxBytes) this.sendWaiting();
      else if (this.inFlight === 0 && !this.turnEndScheduled) {
        this.turnEndScheduled = true;
        setImmediate(() => {
          this.turnEndScheduled = false;
          if (this.inFlight === 0) this.sendWaiting();
        });
      }
    });
  }

  private sendWaiting(): void {
    if (this.waiting.length === 0) return;
    const batch = this.waiting;
    this.waiting = [];
    this.waitingBytes = 0;
    this.inFlight++;
    this.send(batch.map((waiting) => waiting.park))
      .then(
        (replies) =>
          batch.forEach((waiting, i) => {
            const reply = replies[i];
            if (reply === undefined) waiting.reject(new Error(`the joined parking transaction answered ${replies.length} replies for ${batch.length} entries`));
            else if (reply instanceof Error) waiting.reject(reply);
            else waiting.resolve(reply);
          }),
        (error: Error) => batch.forEach((waiting) => waiting.reject(error)),
      )
      .finally(() => {
        this.inFlight--;
        if (this.inFlight === 0) this.sendWaiting();
      });
  }
}
