import { FileHandle, mkdir, open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { previousFile } from './collector-files';

const NEWLINE = Buffer.from('\n');

interface PendingLine {
  /** Without its newline: added in the one copy each write makes of its lines. */
  readonly bytes: Buffer;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * One append-only JSON-lines file, bounded like a log: when the next line would take it past `maxBytes`, it
 * becomes `<path>.1` (replacing the previous one) and a new file starts, so one signal holds at most about
 * twice the bound on disk. Lines queued while a write is under way go out together in the next write, in the
 * order they were appended; each `append` settles once its line is written (or the write failed).
 */
export class JsonLinesFile {
  private handle: FileHandle | undefined;
  private size = 0;
  private queue: PendingLine[] = [];
  private draining: Promise<void> | undefined;

  constructor(
    readonly path: string,
    private readonly maxBytes: number,
  ) {}

  /** `line` must hold no newline: it is written followed by one. */
  append(line: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) => {
      const bytes = typeof line === 'string' ? Buffer.from(line) : line;
      this.queue.push({ bytes, resolve, reject });
      this.draining ??= this.drain();
    });
  }

  /** Waits for every line appended so far, then closes the file. */
  async close(): Promise<void> {
    while (this.draining !== undefined) await this.draining;
    await this.handle?.close();
    this.handle = undefined;
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      try {
        await this.write(batch.map((line) => line.bytes));
        for (const line of batch) line.resolve();
      } catch (error) {
        // The file is reopened for the next batch; what this one wrote, if anything, is cut off again.
        await this.reset();
        for (const line of batch) line.reject(error);
      }
    }
    this.draining = undefined;
  }

  private async write(lines: Buffer[]): Promise<void> {
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    for (const line of lines) {
      const lineBytes = line.length + NEWLINE.length;
      if (this.size + pendingBytes > 0 && this.size + pendingBytes + lineBytes > this.maxBytes) {
        await this.flush(pending);
        await this.rotate();
        pending = [];
        pendingBytes = 0;
      }
      pending.push(line, NEWLINE);
      pendingBytes += lineBytes;
    }
    await this.flush(pending);
  }

  /** `pieces`: lines and their newlines. */
  private async flush(pieces: Buffer[]): Promise<void> {
    if (pieces.length === 0) return;
    const handle = await this.opened();
    const bytes = Buffer.concat(pieces);
    await handle.writeFile(bytes);
    this.size += bytes.length;
  }

  private async opened(): Promise<FileHandle> {
    if (this.handle === undefined) {
      await mkdir(dirname(this.path), { recursive: true });
      this.handle = await open(this.path, 'a');
      this.size = (await this.handle.stat()).size;
    }
    return this.handle;
  }

  private async rotate(): Promise<void> {
    await this.handle?.close();
    this.handle = undefined;
    await rename(this.path, previousFile(this.path));
    this.size = 0;
  }

  private async reset(): Promise<void> {
    const handle = this.handle;
    this.handle = undefined;
    if (handle === undefined) return;
    try {
      // A partial line would make the file unreadable as JSON lines: cut back to the last whole one.
      await handle.truncate(this.size);
    } catch {
      // Nothing more to do: the next batch reopens the file and the client retries this one.
    }
    await handle.close().catch(() => undefined);
  }
}
