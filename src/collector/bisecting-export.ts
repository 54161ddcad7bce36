import type { OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { CollectorClient, ExportOrigin, NotNow, refusalReason, RefusedForContent } from './collector-client';

/** How a sender's parts are joined into one request, and cut smaller when the collector refuses one for what it carries. */
export interface PieceCutter {
  /** One request of these pieces (one piece too: a piece need not be a request on its own). */
  join(pieces: readonly Buffer[]): Buffer;
  /** The piece as smaller ones (one span each), or [] when it cannot be cut: one span, or nothing this code can read. */
  cut(piece: Buffer): Buffer[];
}

/** A piece the collector refused alone and that could not be cut smaller: given up, with the collector's words. */
export interface DroppedPiece {
  /** The index of the part it came from. */
  readonly part: number;
  readonly kind: RefusedForContent['kind'];
  readonly status: number;
  readonly reason: string;
  /** The piece as it was sent (for naming it in a log line; never logged whole). */
  readonly body: Buffer;
}

/** What became of one part. */
export interface PartFate {
  /** Each of its pieces delivered or dropped: the part is done with. */
  readonly settled: boolean;
  /** Some of it was delivered or dropped (when not settled, its `rest` is what remains of it). */
  readonly touched: boolean;
  /** Its pieces not yet delivered, in order: the part's own body when untouched. */
  readonly rest: readonly Buffer[];
}

export interface BisectedExport {
  readonly parts: readonly PartFate[];
  readonly dropped: readonly DroppedPiece[];
  /**
   * Why parts are left unsettled: the collector's answer that says nothing of the data (`retry`, `refused`), or
   * `deadline` when the time given ran out between two requests.
   */
  readonly stoppedBy?: NotNow | 'deadline';
  /** Spans the collector's partial successes said it rejected, summed. */
  readonly rejected: number;
  readonly requests: number;
}

interface Piece {
  readonly part: number;
  readonly body: Buffer;
  state: 'waiting' | 'delivered' | 'dropped';
  children?: Piece[];
}

const leavesOf = (piece: Piece): Piece[] => (piece.children === undefined ? [piece] : piece.children.flatMap(leavesOf));

/**
 * Sends `parts` joined, and never gives up more than the collector refused for good (issue 56 item 7, SPEC §10–§11:
 * an acknowledged span is never lost):
 * - 2xx: every part delivered;
 * - 413 or 400 (the request too large, or holding something the collector cannot decode): the request is bisected:
 *   each half is sent on its own, and a half refused the same way is halved again; a part refused alone is cut into
 *   its spans and those are bisected. A single span still refused is dropped (`dropped`, with the collector's words);
 *   everything else is delivered. One bad span among n costs about 2·log2(n) requests.
 * - any other answer (429, 5xx, 401, 403, 404, a timeout, no connection) stops the sending: what was not delivered is
 *   left unsettled, for the caller to keep and send again later (`stoppedBy`).
 * The requests go one after another, so a collector that starts failing halfway is asked nothing more this time;
 * none starts after `deadline` (performance.now()), so a caller's lease outlives the sending. `origin` goes with each.
 */
export async function exportBisecting(
  collector: Pick<CollectorClient, 'export'>,
  signal: OtlpSignal,
  encoding: OtlpEncoding,
  parts: readonly Buffer[],
  cutter: PieceCutter,
  { deadline = Infinity, origin }: { readonly deadline?: number; readonly origin?: ExportOrigin } = {},
): Promise<BisectedExport> {
  const roots: Piece[] = parts.map((body, part) => ({ part, body, state: 'waiting' }));
  const dropped: DroppedPiece[] = [];
  let stoppedBy: NotNow | 'deadline' | undefined;
  let rejected = 0;
  let requests = 0;

  /** One request of these pieces; false once the sending stopped. */
  const send = async (pieces: Piece[]): Promise<boolean> => {
    if (performance.now() >= deadline) {
      stoppedBy = 'deadline';
      return false;
    }
    requests += 1;
    const result = await collector.export(signal, encoding, cutter.join(pieces.map((piece) => piece.body)), origin);
    switch (result.kind) {
      case 'accepted':
        for (const piece of pieces) piece.state = 'delivered';
        rejected += result.partialSuccess?.rejectedItems ?? 0;
        return true;
      case 'retry':
      case 'refused':
        stoppedBy = result;
        return false;
      case 'too_large':
      case 'bad_data':
        return bisect(pieces, result);
      default: {
        const unreachable: never = result;
        throw new Error(`unhandled export result ${JSON.stringify(unreachable)}`);
      }
    }
  };

  /** Pieces the collector refused together for what they carry: each half on its own, down to one span. */
  const bisect = async (pieces: Piece[], refusal: RefusedForContent): Promise<boolean> => {
    if (pieces.length > 1) {
      const half = Math.ceil(pieces.length / 2);
      return (await send(pieces.slice(0, half))) && (await send(pieces.slice(half)));
    }
    const [piece] = pieces;
    const smaller = cutter.cut(piece.body);
    if (smaller.length > 1) {
      piece.children = smaller.map((body) => ({ part: piece.part, body, state: 'waiting' }));
      return bisect(piece.children, refusal);
    }
    piece.state = 'dropped';
    dropped.push({ part: piece.part, kind: refusal.kind, status: refusal.status, reason: refusalReason(refusal), body: piece.body });
    return true;
  };

  if (roots.length > 0) await send(roots);
  const fates = roots.map((root): PartFate => {
    const leaves = leavesOf(root);
    const waiting = leaves.filter((leaf) => leaf.state === 'waiting');
    return { settled: waiting.length === 0, touched: waiting.length < leaves.length, rest: waiting.map((leaf) => leaf.body) };
  });
  return { parts: fates, dropped, ...(stoppedBy === undefined ? {} : { stoppedBy }), rejected, requests };
}
