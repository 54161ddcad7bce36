import { mkdir, open, readdir, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** A webhook as it arrived, enough to handle it again exactly as its delivery would have been. */
export interface ReceivedHook {
  /** `X-Gitlab-Event`. */
  readonly event: string;
  /** `X-Gitlab-Event-UUID`, for the logs: a replay is deduplicated by span ids, as a redelivery is. */
  readonly uuid?: string;
  /** Epoch ms: the parsers fall back on it for times GitLab left out, so a replay gives the same spans. */
  readonly receivedAt: number;
  /** The pipeline whose hooks must be handled in arrival order; 0 when the body names none. */
  readonly pipelineId: number;
  readonly body: unknown;
}

/** One hook waiting in the spool, in the order it was taken. */
export interface SpoolEntry {
  readonly sequence: number;
  readonly pipelineId: number;
  readonly bytes: number;
  readonly spooledAt: number;
  /** False until its file is renamed into place: not to be replayed yet, nor anything of its pipeline after it. */
  written: boolean;
}

export interface SpoolLimits {
  readonly maxHooks: number;
  readonly maxBytes: number;
}

export type SpoolAnswer = 'spooled' | 'full';

export interface SpoolDepth {
  readonly hooks: number;
  readonly bytes: number;
  /** Epoch ms the oldest waiting hook was taken; undefined when empty. */
  readonly oldestSpooledAt?: number;
}

const ENTRY = /^(\d{16})-(\d{1,16})\.hook\.json$/;
const TEMPORARY = /^\.tmp-/;
const fileOf = (entry: Pick<SpoolEntry, 'sequence' | 'pipelineId'>) => `${String(entry.sequence).padStart(16, '0')}-${entry.pipelineId}.hook.json`;

/**
 * GitLab's webhooks taken while the store cannot record them (SPEC §10 delivery), one file per hook in a
 * directory of this replica's own, bounded by hooks and bytes. The file name carries the order and the
 * pipeline, so opening the spool after a restart lists it without reading a hook.
 *
 * A hook is written to a temporary file, fsynced, renamed into place and the directory fsynced before its
 * 2xx is sent: GitLab never sends it again after that answer, and the outages that fill the spool (a failover,
 * a node lost) are the very events after which the page cache may be gone too. It costs two fsyncs per hook,
 * paid only during an outage. A crash before the rename leaves a temporary file, removed at open: that hook
 * was never answered 2xx, so GitLab counts it failed, as it was.
 */
export class WebhookSpool {
  private readonly waiting: SpoolEntry[] = [];
  private readonly waitingByPipeline = new Map<number, number>();
  private bytes = 0;

  private constructor(
    readonly directory: string,
    private readonly limits: SpoolLimits,
    private nextSequence: number,
    private readonly now: () => number,
  ) {}

  /** The spool in `directory` (created if missing), with what a previous process left in it, in order. */
  static async open(directory: string, limits: SpoolLimits, now: () => number = Date.now): Promise<WebhookSpool> {
    await mkdir(directory, { recursive: true, mode: 0o700 });
    const names = (await readdir(directory)).sort();
    const found: SpoolEntry[] = [];
    for (const name of names) {
      if (TEMPORARY.test(name)) {
        await unlink(join(directory, name)).catch(() => undefined);
        continue;
      }
      const match = ENTRY.exec(name);
      if (match === null) continue;
      const file = await stat(join(directory, name));
      found.push({ sequence: Number(match[1]), pipelineId: Number(match[2]), bytes: file.size, spooledAt: file.mtimeMs, written: true });
    }
    const spool = new WebhookSpool(directory, limits, (found.at(-1)?.sequence ?? 0) + 1, now);
    // Left by a previous process: kept beyond the bounds if they shrank meanwhile, since each was answered 2xx.
    for (const entry of found) spool.track(entry);
    return spool;
  }

  /**
   * Writes the hook durably, or answers `full` when it would pass either bound. Its place in the order is
   * taken at the call, before any write, so hooks of one pipeline keep their arrival order whichever write
   * ends first. Throws when the disk refuses the write (the hook is then not in the spool).
   */
  async add(hook: ReceivedHook): Promise<SpoolAnswer> {
    const content = Buffer.from(JSON.stringify(hook));
    if (this.waiting.length + 1 > this.limits.maxHooks || this.bytes + content.length > this.limits.maxBytes) return 'full';
    const entry: SpoolEntry = { sequence: this.nextSequence++, pipelineId: hook.pipelineId, bytes: content.length, spooledAt: this.now(), written: false };
    this.track(entry);
    const temporary = join(this.directory, `.tmp-${fileOf(entry)}`);
    try {
      const file = await open(temporary, 'wx', 0o600);
      try {
        await file.writeFile(content);
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temporary, join(this.directory, fileOf(entry)));
      await this.syncDirectory();
      entry.written = true;
      return 'spooled';
    } catch (error) {
      this.untrack(entry);
      await unlink(temporary).catch(() => undefined);
      throw error;
    }
  }

  /** The hooks waiting, oldest first (a copy: replaying may remove entries while it walks them). */
  entries(): SpoolEntry[] {
    return [...this.waiting];
  }

  /** Whether hooks of this pipeline wait: a new one must wait behind them, to keep their order. */
  holds(pipelineId: number): boolean {
    return this.waitingByPipeline.has(pipelineId);
  }

  /** Throws when the file cannot be read or is not a hook (the entry should then be dropped). */
  async read(entry: SpoolEntry): Promise<ReceivedHook> {
    return JSON.parse(await readFile(join(this.directory, fileOf(entry)), 'utf8')) as ReceivedHook;
  }

  /** Once the hook is handled (or given up on). Not fsynced: a removal lost to a crash replays a hook the store deduplicates. */
  async remove(entry: SpoolEntry): Promise<void> {
    await unlink(join(this.directory, fileOf(entry))).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error;
    });
    this.untrack(entry);
  }

  depth(): SpoolDepth {
    return { hooks: this.waiting.length, bytes: this.bytes, oldestSpooledAt: this.waiting[0]?.spooledAt };
  }

  private track(entry: SpoolEntry): void {
    this.waiting.push(entry);
    this.bytes += entry.bytes;
    this.waitingByPipeline.set(entry.pipelineId, (this.waitingByPipeline.get(entry.pipelineId) ?? 0) + 1);
  }

  private untrack(entry: SpoolEntry): void {
    const index = this.waiting.indexOf(entry);
    if (index < 0) return;
    this.waiting.splice(index, 1);
    this.bytes -= entry.bytes;
    const left = this.waitingByPipeline.get(entry.pipelineId)! - 1;
    if (left === 0) this.waitingByPipeline.delete(entry.pipelineId);
    else this.waitingByPipeline.set(entry.pipelineId, left);
  }

  /** The rename is durable only once the directory is: without this a crash can leave the hook unnamed. */
  private async syncDirectory(): Promise<void> {
    const directory = await open(this.directory, 'r');
    try {
      await directory.sync();
    } finally {
      await directory.close();
    }
  }
}
