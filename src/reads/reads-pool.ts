import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { withTimeout } from '../observability/with-timeout';
import { answerRead, ReadOutcome, ReadTask } from './read-answers';
import type { BackendSpec } from './reads-backend';
import type { WorkerMessage, WorkerRequest } from './reads.worker';
import { ReadsUnavailableError, TraceReads } from './trace-reads';

/** Who does the heavy half of a read (src/reads/read-answers.ts): a pool of worker threads, or, for tests' own backends, this thread. */
export interface ReadsRunner {
  /** The read's outcome, or ReadsUnavailableError once READS_TIMEOUT_MS has passed or the backend failed. */
  run(task: ReadTask): Promise<ReadOutcome>;
  close(): Promise<void>;
}

export interface ReadsPoolOptions {
  readonly backend: BackendSpec;
  /** READS_TIMEOUT_MS: from the moment a read is asked, waiting for a free thread included. */
  readonly timeoutMs: number;
  /** Threads; by default one less than the cores (at least one, at most four), so a read never takes the last core. */
  readonly size?: number;
  /** Told each time a read is abandoned at its deadline and its thread replaced. */
  readonly onAbandoned?: () => void;
}

export interface ReadsPoolStats {
  readonly threads: number;
  readonly busy: number;
  readonly queued: number;
  /** Reads abandoned at their deadline while running, each thread terminated and replaced. */
  readonly abandoned: number;
}

interface Pending {
  readonly id: number;
  readonly task: ReadTask;
  readonly deadline: number;
  readonly timeoutMs: number;
  readonly resolve: (outcome: ReadOutcome) => void;
  readonly reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
  thread?: Thread;
}

interface Thread {
  readonly worker: Worker;
  ready: boolean;
  running?: Pending;
}

const DEFAULT_SIZE = Math.max(1, Math.min(4, availableParallelism() - 1));

/**
 * Issue 56 item 3: a read's decoding, completeness, critical path and JSON encoding in worker threads, so the event loop
 * that answers job pickups and exports never waits for a reader. Hand-written (about a hundred lines) rather than a
 * library: package.json has none, and what is needed is small and particular: one read per thread, a deadline per
 * read that counts the wait for a thread, and a read past it abandoned for good (its thread terminated, which stops
 * its decoding and closes its ClickHouse connection, and replaced), not merely answered 503 while it runs on.
 */
export class ReadsPool implements ReadsRunner {
  private readonly threads: Thread[] = [];
  private readonly queue: Pending[] = [];
  private readonly size: number;
  private nextId = 0;
  private abandoned = 0;
  private closed = false;

  constructor(private readonly options: ReadsPoolOptions) {
    this.size = Math.max(1, options.size ?? DEFAULT_SIZE);
  }

  /** `timeoutMs`: READS_TIMEOUT_MS unless said otherwise. */
  run(task: ReadTask, timeoutMs = this.options.timeoutMs): Promise<ReadOutcome> {
    if (this.closed) return Promise.reject(new ReadsUnavailableError('the reads pool is closed'));
    return new Promise<ReadOutcome>((resolve, reject) => {
      const pending: Pending = { id: this.nextId++, task, deadline: Date.now() + timeoutMs, timeoutMs, resolve, reject };
      pending.timer = setTimeout(() => this.giveUp(pending), timeoutMs);
      this.queue.push(pending);
      this.dispatch();
    });
  }

  stats(): ReadsPoolStats {
    return {
      threads: this.threads.length,
      busy: this.threads.filter((thread) => thread.running !== undefined).length,
      queued: this.queue.length,
      abandoned: this.abandoned,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0)) this.settle(pending, new ReadsUnavailableError('the service is stopping'));
    const threads = this.threads.splice(0);
    for (const thread of threads) if (thread.running !== undefined) this.settle(thread.running, new ReadsUnavailableError('the service is stopping'));
    await Promise.all(threads.map((thread) => thread.worker.terminate()));
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const thread = this.threads.find((candidate) => candidate.ready && candidate.running === undefined);
      if (thread === undefined) {
        if (this.threads.length < this.size) this.spawn();
        return;
      }
      const pending = this.queue.shift()!;
      pending.thread = thread;
      thread.running = pending;
      thread.worker.postMessage({ id: pending.id, task: pending.task, deadline: pending.deadline } satisfies WorkerRequest);
    }
  }

  private spawn(): void {
    const worker = startWorker(this.options.backend);
    const thread: Thread = { worker, ready: false };
    this.threads.push(thread);
    worker.on('message', (message: WorkerMessage) => {
      if ('ready' in message) {
        thread.ready = true;
      } else {
        const pending = thread.running;
        thread.running = undefined;
        if (pending !== undefined && pending.id === message.id) {
          if ('outcome' in message) this.settle(pending, message.outcome);
          else this.settle(pending, new ReadsUnavailableError(message.failure.message, message.failure.retryAfterSeconds));
        }
      }
      this.dispatch();
    });
    // A thread that dies (an error thrown outside a read, out of memory) fails its read and is replaced by the next dispatch.
    // One that dies before it is ready (its backend cannot be built) fails the reads waiting instead of being started again at once.
    const lost = (error: Error) => {
      if (!this.threads.includes(thread)) return;
      this.threads.splice(this.threads.indexOf(thread), 1);
      const failure = new ReadsUnavailableError(`a reads thread stopped: ${error.message}`);
      if (thread.running !== undefined) this.settle(thread.running, failure);
      if (!thread.ready) for (const pending of this.queue.splice(0)) this.settle(pending, failure);
      else if (!this.closed) this.dispatch();
    };
    worker.on('error', lost);
    worker.on('exit', (code) => lost(new Error(`exit code ${code}`)));
  }

  /** At the deadline: a queued read is dropped; a running one is abandoned with its thread, which is replaced. */
  private giveUp(pending: Pending): void {
    const queued = this.queue.indexOf(pending);
    if (queued !== -1) this.queue.splice(queued, 1);
    const thread = pending.thread;
    if (thread !== undefined && thread.running === pending) {
      this.threads.splice(this.threads.indexOf(thread), 1);
      thread.running = undefined;
      void thread.worker.terminate();
      this.abandoned += 1;
      this.options.onAbandoned?.();
    }
    this.settle(pending, new ReadsUnavailableError(`no answer within ${pending.timeoutMs} ms`));
    this.dispatch();
  }

  private settle(pending: Pending, result: ReadOutcome | Error): void {
    clearTimeout(pending.timer);
    if (result instanceof Error) pending.reject(result);
    else pending.resolve(result);
  }
}

/**
 * The worker's script: the compiled `reads.worker.js` beside this file. Under ts-jest (tests run the TypeScript
 * sources, and a worker thread does not go through jest's transform) it is `reads.worker.ts`, compiled on load with
 * TypeScript's own transpiler: only the tests take that branch.
 */
function startWorker(backend: BackendSpec): Worker {
  const compiled = join(__dirname, 'reads.worker.js');
  if (existsSync(compiled)) return new Worker(compiled, { workerData: { backend } });
  const source = join(__dirname, 'reads.worker.ts');
  const typescript = require.resolve('typescript');
  const boot = `
    const { readFileSync } = require('node:fs');
    const ts = require(${JSON.stringify(typescript)});
    require.extensions['.ts'] = (module, filename) => module._compile(
      ts.transpileModule(readFileSync(filename, 'utf8'), {
        fileName: filename,
        compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true, experimentalDecorators: true },
      }).outputText,
      filename,
    );
    require(${JSON.stringify(source)});`;
  return new Worker(boot, { eval: true, workerData: { backend } });
}

/** The same reads on this thread, for a backend given as an object (the endpoint tests' failing and noting backends). */
export class InProcessReads implements ReadsRunner {
  constructor(
    private readonly backend: TraceReads,
    private readonly timeoutMs: number,
  ) {}

  async run(task: ReadTask): Promise<ReadOutcome> {
    const controller = new AbortController();
    try {
      return await withTimeout(() => answerRead(this.backend, task, controller.signal), this.timeoutMs);
    } finally {
      controller.abort();
    }
  }

  async close(): Promise<void> {
    await this.backend.close?.();
  }
}
