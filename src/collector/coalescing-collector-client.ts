import { OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { ENVELOPE_FIELDS } from '../otlp/otlp-fields';
import { OtlpPartialSuccess } from '../otlp/otlp-response';
import { WIRE_LENGTH_DELIMITED, WireBody, WireReader } from '../otlp/otlp-wire';
import { CollectorClient, ExportResult } from './collector-client';
import { exportSplittingRefused } from './split-refused';

/** What an operator sees of the coalescing (src/collector/collector.metrics.ts). */
export interface CoalescingObserver {
  /** One request went upstream carrying `exports` exports (1 when one went alone). */
  requestSent(signal: OtlpSignal, exports: number, bytes: number): void;
  /** How long one export waited for others before its request left. */
  lingered(signal: OtlpSignal, seconds: number): void;
  /** The collector refused a joined request of `exports` exports whole (4xx): each went again alone. */
  splitAfterRefusal(signal: OtlpSignal, exports: number): void;
}

/** Where the coalescing client says that a joined request was refused whole (one line per such request). */
export interface CoalescingLog {
  warn(fields: Record<string, unknown>, message: string): void;
}

export interface CoalescingOptions {
  /** The longest an export waits for others; 0 sends each alone. */
  readonly lingerMs: number;
  /** The most bytes one request carries. */
  readonly maxBytes: number;
}

interface Waiting {
  readonly body: WireBody;
  readonly joinedAt: number;
  readonly answer: (result: ExportResult) => void;
}

interface Batch {
  readonly waiting: Waiting[];
  bytes: number;
  readonly timer: NodeJS.Timeout;
}

/**
 * Joins protobuf traces exports bound for the collector into one request (issue 29): an
 * ExportTraceServiceRequest is one repeated field (`resource_spans`), so bodies placed one after another are
 * one valid request carrying every export's spans. Every export's caller is answered from the collector's
 * answer to the request that carried its spans, and from nothing else: accepted, retry or refused alike.
 *
 * When an export waits is clocked by the collector, as Nagle's algorithm is by acknowledgements: with no
 * request of ours in flight, an export leaves at the end of this event-loop turn (with whatever arrived in
 * the same turn), so an idle gateway adds nothing; while one is in flight, exports gather until it is
 * answered, the linger runs out or the byte budget is full, whichever comes first. A busy gateway thereby
 * sends fewer, larger requests, which is also what the Collector's own batching wants.
 *
 * A joined request the collector refuses whole (a 4xx other than 429: it could not decode one export in it) is not
 * everyone's answer: every exporter treats a 4xx as final, so one export the gateway let through by mistake would
 * lose every export joined to it. Each export is then sent again alone, and answered from its own request.
 *
 * JSON exports go alone: joining them means parsing and writing every body again, which costs more than the
 * request it saves (docs/gateway.md); metrics and logs go alone too (only traces are forwarded in bulk, and
 * their partial success counts data points and log records this client does not count).
 */
export class CoalescingCollectorClient implements CollectorClient {
  private open: Batch | undefined;
  private inFlight = 0;
  private readonly buffers: RequestBuffers;
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly upstream: CollectorClient,
    private readonly options: CoalescingOptions,
    private readonly observer?: CoalescingObserver,
    private readonly log?: CoalescingLog,
  ) {
    this.buffers = new RequestBuffers(options.maxBytes);
  }

  export(signal: OtlpSignal, encoding: OtlpEncoding, given: Buffer | WireBody): Promise<ExportResult> {
    if (signal !== 'traces' || encoding !== 'protobuf' || this.options.lingerMs === 0 || given.length >= this.options.maxBytes) {
      this.observer?.requestSent(signal, 1, given.length);
      return this.upstream.export(signal, encoding, given);
    }
    const body = given instanceof WireBody ? given : WireBody.of(given);
    if (this.open !== undefined && this.open.bytes + body.length > this.options.maxBytes) this.flush(this.open);
    return new Promise((answer) => {
      let batch = this.open;
      if (batch === undefined) {
        const timer = setTimeout(() => this.flush(batch!), this.options.lingerMs);
        batch = this.open = { waiting: [], bytes: 0, timer };
        // Nothing of ours upstream: nothing will come back to clock this batch out, so it leaves with what
        // arrives in this turn of the event loop.
        if (this.inFlight === 0) setImmediate(() => this.flush(batch!));
      }
      batch.waiting.push({ body, joinedAt: performance.now(), answer });
      batch.bytes += body.length;
    });
  }

  reachable(): Promise<boolean> {
    return this.upstream.reachable();
  }

  /** Sends what still waits and lets every request be answered before the pool closes. */
  async close(): Promise<void> {
    if (this.open !== undefined) this.flush(this.open);
    await Promise.all(this.sending);
    await this.upstream.close();
  }

  private flush(batch: Batch): void {
    // A batch leaves once; its timer, the turn's end or a returning request may each try.
    if (this.open !== batch) return;
    this.open = undefined;
    clearTimeout(batch.timer);
    const sent = this.send(batch).finally(() => this.sending.delete(sent));
    this.sending.add(sent);
  }

  private async send(batch: Batch): Promise<void> {
    const { waiting, bytes } = batch;
    const leftAt = performance.now();
    for (const one of waiting) this.observer?.lingered('traces', (leftAt - one.joinedAt) / 1000);
    this.observer?.requestSent('traces', waiting.length, bytes);
    this.inFlight += 1;
    let results: ExportResult[];
    let joined: Buffer | undefined;
    try {
      const sent = await exportSplittingRefused(
        this.upstream,
        'traces',
        'protobuf',
        waiting.map((one) => one.body),
        (bodies) => {
          joined = this.buffers.take(bytes);
          let at = 0;
          for (const body of bodies) at = body.copyInto(joined, at);
          return joined.subarray(0, at);
        },
      );
      if (sent.split) {
        this.observer?.splitAfterRefusal('traces', waiting.length);
        const refusedAlone = sent.results.filter((result) => result.kind !== 'accepted' && result.kind !== 'retry').length;
        this.log?.warn(
          { exports: waiting.length, status: sent.status, refusedAlone },
          `the collector refused a joined request of ${waiting.length} exports with ${sent.status}: sent again one export per request, ${refusedAlone} refused alone`,
        );
        results = sent.results;
      } else {
        results = attribute(sent.result, waiting);
        // Answered 2xx: the collector read the whole request, so nothing still reads its buffer (a socket's write
        // of it has ended). Any other answer may have come before the write did, and the buffer is left to the GC.
        if (sent.result.kind === 'accepted' && joined !== undefined) this.buffers.give(joined);
      }
    } catch {
      // CollectorClient.export never rejects; should one, no caller may be told its spans arrived.
      results = waiting.map(() => ({ kind: 'retry', happened: 'unreachable' }));
    } finally {
      this.inFlight -= 1;
    }
    for (const [i, one] of waiting.entries()) one.answer(results[i]);
    // The collector answered: what gathered meanwhile leaves now, rather than at its linger's end.
    if (this.open !== undefined) this.flush(this.open);
  }
}

/**
 * Each export's share of the answer to the request that carried it. A retry or a refusal is every export's:
 * none of their spans may count as delivered. An acceptance is every export's too; its partial success
 * counts rejected spans of the whole request without saying whose, so it is attributed
 * - exactly when the request carried one export, when nothing was rejected, or when every span was;
 * - conservatively otherwise: each export is told min(rejected, its spans) were rejected, so none is told
 *   its spans arrived when they may not have. The gateway refunds the job's span quota by what its runner was
 *   told, as for an export sent alone, so where the attribution is conservative the quota errs toward the
 *   runners, by at most the spans the collector accepted of that one request.
 */
function attribute(result: ExportResult, waiting: readonly Waiting[]): ExportResult[] {
  const rejected = result.kind === 'accepted' ? (result.partialSuccess?.rejectedItems ?? 0) : 0;
  if (result.kind !== 'accepted' || waiting.length === 1 || rejected === 0) return waiting.map(() => result);
  const spans = waiting.map((one) => countTraceSpans(one.body.joined()));
  const everySpan = rejected >= spans.reduce((sum, count) => sum + count, 0);
  return spans.map((count) => {
    const partialSuccess: OtlpPartialSuccess | undefined =
      count === 0 ? undefined : { rejectedItems: everySpan ? count : Math.min(rejected, count), errorMessage: result.partialSuccess?.errorMessage ?? '' };
    return { ...result, partialSuccess };
  });
}

/** Spans in an ExportTraceServiceRequest: resource_spans (1) → scope_spans (2) → spans (2), everything else skipped. */
export function countTraceSpans(body: Buffer): number {
  const { containers, scopes, items } = ENVELOPE_FIELDS;
  let spans = 0;
  const request = new WireReader(body, 0, body.length);
  while (!request.atEnd()) {
    request.readTag();
    if (request.fieldNumber !== containers || request.wireType !== WIRE_LENGTH_DELIMITED) {
      request.skipValue();
      continue;
    }
    const resourceEnd = request.readLengthDelimitedEnd();
    const resourceSpans = new WireReader(body, request.pos, resourceEnd);
    request.pos = resourceEnd;
    while (!resourceSpans.atEnd()) {
      resourceSpans.readTag();
      if (resourceSpans.fieldNumber !== scopes || resourceSpans.wireType !== WIRE_LENGTH_DELIMITED) {
        resourceSpans.skipValue();
        continue;
      }
      const scopeEnd = resourceSpans.readLengthDelimitedEnd();
      const scopeSpans = new WireReader(body, resourceSpans.pos, scopeEnd);
      resourceSpans.pos = scopeEnd;
      while (!scopeSpans.atEnd()) {
        scopeSpans.readTag();
        if (scopeSpans.fieldNumber === items) spans += 1;
        scopeSpans.skipValue();
      }
    }
  }
  return spans;
}

/**
 * The buffers joined requests are written into, used again once the collector has answered one 2xx. A busy gateway
 * joins about as many bytes a second as runners export; allocated anew, each request's buffer is external memory
 * that Node 22 and later answer with a full collection of the heap (WireBody). A few are kept, each as large as a
 * request may be (OTLP_UPSTREAM_BATCH_MAX_BYTES), so any request fits any of them.
 */
class RequestBuffers {
  /** More than the requests usually in flight at once; what a burst needs beyond them is allocated and let go. */
  private static readonly KEPT = 4;
  private readonly free: Buffer[] = [];

  constructor(private readonly size: number) {}

  take(bytes: number): Buffer {
    if (bytes > this.size) return Buffer.allocUnsafeSlow(bytes);
    return this.free.pop() ?? Buffer.allocUnsafeSlow(this.size);
  }

  give(buffer: Buffer): void {
    if (buffer.length === this.size && this.free.length < RequestBuffers.KEPT) this.free.push(buffer);
  }
}
