import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { answerRead, ReadOutcome, ReadTask } from './read-answers';
import { BackendSpec, traceReadsOf } from './reads-backend';
import { ReadsUnavailableError } from './trace-reads';

/**
 * One thread of the reads pool (src/reads/reads-pool.ts): builds its backend once, then answers one read at a time.
 * Messages in: `{ id, task, deadline }` (epoch ms); out: `{ ready }` once, then `{ id, outcome }` or `{ id, failure }`.
 * The encoded answer is transferred, not copied.
 */

export interface WorkerRequest {
  readonly id: number;
  readonly task: ReadTask;
  readonly deadline: number;
}

export type WorkerMessage =
  | { readonly ready: true }
  | { readonly id: number; readonly outcome: ReadOutcome }
  | { readonly id: number; readonly failure: { readonly message: string; readonly retryAfterSeconds?: number } };

/**
 * The lowest priority: on a busy host the threads answering pickups and exports win the CPU over a reader, which runs
 * mostly on what they leave. At 10 a quick bench:trace-reads on two cores put pickup p99 during reads at 3.8× (files)
 * and 3.1× (ClickHouse) of without; at 19, 1.2× and 2.1× (docs/performance.md, noisy both).
 */
const READER_NICENESS = 19;

const port = parentPort;
if (port !== null) {
  // On Linux the nice value is a thread's own (setpriority(2), NOTES), and os.setPriority(0, …) is this thread's; on
  // other systems it would be the whole process's, pickups included, so it is left alone there.
  if (process.platform === 'linux') {
    try {
      setPriority(0, READER_NICENESS);
    } catch {
      // A container without the right to lower priority: the reads still run, at the default one.
    }
  }
  const backend = traceReadsOf((workerData as { backend: BackendSpec }).backend);
  port.on('message', (request: WorkerRequest) => {
    const controller = new AbortController();
    // The pool terminates this thread at the deadline; until then a ClickHouse query stops itself on time.
    const timer = setTimeout(() => controller.abort(), Math.max(0, request.deadline - Date.now()));
    answerRead(backend, request.task, controller.signal).then(
      (outcome) => {
        clearTimeout(timer);
        const transfer = outcome.kind === 'answer' ? [outcome.body.buffer as ArrayBuffer] : [];
        port.postMessage({ id: request.id, outcome } satisfies WorkerMessage, transfer);
      },
      (error: unknown) => {
        clearTimeout(timer);
        const retryAfterSeconds = error instanceof ReadsUnavailableError ? error.retryAfterSeconds : undefined;
        port.postMessage({
          id: request.id,
          failure: { message: error instanceof Error ? error.message : String(error), retryAfterSeconds },
        } satisfies WorkerMessage);
      },
    );
  });
  // Ready once prepared: a read waits for it in the pool's queue, where its deadline can drop it without stopping this.
  void (backend.prepare?.() ?? Promise.resolve()).then(
    () => port.postMessage({ ready: true } satisfies WorkerMessage),
    () => port.postMessage({ ready: true } satisfies WorkerMessage),
  );
}
