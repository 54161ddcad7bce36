import { keptVersionOf } from '../otlp/control-plane-mark';
import { closeSync, fstatSync, openSync, readSync, Stats, statSync } from 'node:fs';
import { previousFile, signalFile } from '../collector/collector-files';
import { collectedSpans } from '../otlp/collected-spans';
import type { OtlpJsonRequest } from '../otlp/otlp-receiver';
import { identityOf } from '../otlp/span-identity';
import { RUNNER_SPAN } from './trace-selection';
import type { StoredSpan } from './trace-reads';

/** Where one export line is: which file (by identity, not name: files rotate), at which byte, how long. */
interface LineRef {
  readonly file: string;
  readonly offset: number;
  readonly length: number;
}

interface TraceEntry {
  readonly lines: LineRef[];
  /** Its runners' `job_execution` span ids: their children are stages, which a bounded read keeps whole. */
  readonly runners: Set<string>;
  /** The earliest start and latest end of its spans, epoch ms, to pass over a trace outside a window unread. */
  fromMs: number;
  toMs: number;
}

interface TrackedFile {
  readonly path: string;
  /** Bytes read so far: always the end of a whole line. */
  indexed: number;
}

const CHUNK_BYTES = 8 * 1024 * 1024;
const NEWLINE = 0x0a;
const ms = (nanos: bigint) => Number(nanos / 1_000_000n);
/** Which of two stored copies of one span id a read keeps: the control plane's, then its latest version (control-plane-mark.ts). */
export const versionOf = (span: StoredSpan): number => keptVersionOf(span);

/**
 * An index of the embedded collector's trace files (`traces.jsonl` and `traces.jsonl.1`), built from what was
 * appended since the last read: for each trace the byte offsets of the export lines that hold its spans, and which
 * traces hold each pipeline, job and project. Spans are not kept: a read decodes the lines of the traces it needs,
 * so memory grows with the number of lines, not with what they hold (issue 56 item 3: every read used to decode
 * both files whole, 30 MiB for one large pipeline).
 *
 * Rotation (src/collector/json-lines-file.ts): a full `traces.jsonl` is renamed `traces.jsonl.1`, replacing the one
 * before, and a new file starts. Files are known by device, inode and birth time, so a renamed file keeps its lines
 * and offsets, a replaced one's lines are forgotten, and an inode the system gives again is a new file.
 */
export class CollectorFilesIndex {
  private readonly files = new Map<string, TrackedFile>();
  private readonly traces = new Map<string, TraceEntry>();
  private readonly byPipeline = new Map<string, Set<string>>();
  private readonly byJob = new Map<string, Set<string>>();
  private readonly byProject = new Map<string, Set<string>>();

  constructor(private readonly directory: string) {}

  /** Reads what was appended since the last call (and forgets a file rotated away). */
  refresh(): void {
    const current = signalFile(this.directory, 'traces');
    const live = new Map<string, { path: string; size: number }>();
    for (const path of [previousFile(current), current]) {
      const stats = statOrNull(path);
      if (stats !== null) live.set(`${stats.dev}:${stats.ino}:${stats.birthtimeMs}`, { path, size: stats.size });
    }
    for (const [key, tracked] of this.files) {
      const now = live.get(key);
      // Gone, truncated, or moved the wrong way (a new current file given a freed inode of the previous one).
      if (now === undefined || now.size < tracked.indexed || (tracked.path !== now.path && now.path === current)) this.forget(key);
    }
    for (const [key, { path, size }] of live) {
      let tracked = this.files.get(key);
      if (tracked === undefined) {
        tracked = { path, indexed: 0 };
        this.files.set(key, tracked);
      } else if (tracked.path !== path) {
        tracked = { path, indexed: tracked.indexed };
        this.files.set(key, tracked);
      }
      if (size > tracked.indexed) this.indexFrom(key, tracked, size);
    }
  }

  /** Trace ids holding a span that names this pipeline, job (with `ci.pipeline.id`, `ci.job.id`) or project. */
  tracesOf(key: 'ci.pipeline.id' | 'ci.job.id' | 'ci.project.id', id: number): string[] {
    const map = key === 'ci.pipeline.id' ? this.byPipeline : key === 'ci.job.id' ? this.byJob : this.byProject;
    return [...(map.get(String(id)) ?? [])].filter((traceId) => this.traces.has(traceId));
  }

  /** Whether any span of the trace may overlap [fromMs, toMs]. */
  mayOverlap(traceId: string, fromMs: number, toMs: number): boolean {
    const entry = this.traces.get(traceId);
    return entry !== undefined && entry.fromMs <= toMs && entry.toMs >= fromMs;
  }

  /** The `job_execution` span ids of the trace, as indexed. */
  runnerSpanIds(traceId: string): ReadonlySet<string> {
    return this.traces.get(traceId)?.runners ?? new Set();
  }

  /**
   * What the trace's lines are now: the same text while no line was added to it or rotated away, so what was computed
   * from its spans can be kept until then. Null for a trace the files no longer hold.
   */
  revisionOf(traceId: string): string | null {
    const entry = this.traces.get(traceId);
    if (entry === undefined) return null;
    const last = entry.lines[entry.lines.length - 1];
    const first = entry.lines[0];
    return `${entry.lines.length} ${first.file}@${first.offset} ${last.file}@${last.offset}`;
  }

  /** How many traces the files hold. */
  get size(): number {
    return this.traces.size;
  }

  /** The trace's spans, each once in its latest version (SPEC §10), decoded from its lines now. */
  spansOf(traceId: string): StoredSpan[] {
    const latest = new Map<string, StoredSpan>();
    this.visit(traceId, (span) => {
      const kept = latest.get(span.spanId);
      if (kept === undefined || versionOf(span) > versionOf(kept)) latest.set(span.spanId, span);
    });
    return [...latest.values()];
  }

  /**
   * Each span of the trace as its lines are decoded, oldest line first, one line in memory at a time (a span sent
   * twice is visited twice). A line that no longer reads as what was indexed (a rotation between refresh and read)
   * is skipped, as a line that does not decode.
   */
  visit(traceId: string, visitor: (span: StoredSpan) => void): void {
    const entry = this.traces.get(traceId);
    if (entry === undefined) return;
    const order = [...this.files.keys()].sort((a, b) => this.rank(a) - this.rank(b));
    const byFile = new Map<string, LineRef[]>();
    for (const line of entry.lines) byFile.set(line.file, [...(byFile.get(line.file) ?? []), line]);
    for (const file of order) {
      const lines = byFile.get(file);
      const tracked = this.files.get(file);
      if (lines === undefined || tracked === undefined) continue;
      const descriptor = openOrNull(tracked.path);
      if (descriptor === null) continue;
      try {
        for (const line of lines.sort((a, b) => a.offset - b.offset)) {
          const bytes = Buffer.allocUnsafe(line.length);
          if (readSync(descriptor, bytes, 0, line.length, line.offset) !== line.length) continue;
          for (const span of decodeLine(bytes)) if (span.traceId === traceId) visitor(span);
        }
      } finally {
        closeSync(descriptor);
      }
    }
  }

  /** The previous file's lines are older than the current one's. */
  private rank(key: string): number {
    return this.files.get(key)?.path.endsWith('.1') ? 0 : 1;
  }

  private indexFrom(key: string, tracked: TrackedFile, size: number): void {
    const descriptor = openOrNull(tracked.path);
    if (descriptor === null) return;
    try {
      // The size the file has now: a line being appended past `size` waits for the next refresh.
      const end = Math.min(size, fstatSync(descriptor).size);
      let carry = Buffer.alloc(0);
      let carryOffset = tracked.indexed;
      let position = tracked.indexed;
      while (position < end) {
        const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, end - position));
        const read = readSync(descriptor, chunk, 0, chunk.length, position);
        if (read === 0) break;
        position += read;
        const bytes = carry.length === 0 ? chunk.subarray(0, read) : Buffer.concat([carry, chunk.subarray(0, read)]);
        let start = 0;
        for (let newline = bytes.indexOf(NEWLINE, start); newline !== -1; newline = bytes.indexOf(NEWLINE, start)) {
          if (newline > start) this.indexLine(key, carryOffset + start, bytes.subarray(start, newline));
          start = newline + 1;
        }
        carryOffset += start;
        carry = Buffer.from(bytes.subarray(start));
      }
      tracked.indexed = carryOffset;
    } finally {
      closeSync(descriptor);
    }
  }

  private indexLine(file: string, offset: number, bytes: Buffer): void {
    const line: LineRef = { file, offset, length: bytes.length };
    const seen = new Set<string>();
    for (const span of decodeLine(bytes)) {
      let entry = this.traces.get(span.traceId);
      if (entry === undefined) {
        entry = { lines: [], runners: new Set(), fromMs: Infinity, toMs: -Infinity };
        this.traces.set(span.traceId, entry);
      }
      if (!seen.has(span.traceId)) {
        seen.add(span.traceId);
        entry.lines.push(line);
      }
      if (span.name === RUNNER_SPAN) entry.runners.add(span.spanId);
      entry.fromMs = Math.min(entry.fromMs, ms(span.startNanos));
      entry.toMs = Math.max(entry.toMs, ms(span.endNanos));
      note(this.byPipeline, identityOf(span, 'ci.pipeline.id'), span.traceId);
      note(this.byJob, identityOf(span, 'ci.job.id'), span.traceId);
      note(this.byProject, identityOf(span, 'ci.project.id'), span.traceId);
    }
  }

  /** A file rotated away (or replaced): its lines go, and traces left with none. */
  private forget(key: string): void {
    this.files.delete(key);
    for (const [traceId, entry] of this.traces) {
      const kept = entry.lines.filter((line) => line.file !== key);
      if (kept.length === 0) this.traces.delete(traceId);
      else if (kept.length !== entry.lines.length) entry.lines.splice(0, entry.lines.length, ...kept);
    }
    for (const map of [this.byPipeline, this.byJob, this.byProject]) {
      for (const [id, traceIds] of map) {
        for (const traceId of traceIds) if (!this.traces.has(traceId)) traceIds.delete(traceId);
        if (traceIds.size === 0) map.delete(id);
      }
    }
  }
}

function note(map: Map<string, Set<string>>, id: unknown, traceId: string): void {
  if (id === undefined || id === '') return;
  const key = String(id);
  const traces = map.get(key);
  if (traces === undefined) map.set(key, new Set([traceId]));
  else traces.add(traceId);
}

/** One export line's spans; none when it does not decode, as a reader of the Collector's file exporter skips it. */
function decodeLine(bytes: Buffer): StoredSpan[] {
  try {
    const request = JSON.parse(bytes.toString('utf8')) as unknown;
    if (typeof request !== 'object' || request === null || Array.isArray(request)) return [];
    return collectedSpans(request as OtlpJsonRequest);
  } catch {
    return [];
  }
}

function statOrNull(path: string): Stats | null {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

function openOrNull(path: string): number | null {
  try {
    return openSync(path, 'r');
  } catch {
    return null;
  }
}
