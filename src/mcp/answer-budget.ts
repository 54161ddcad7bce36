import { createHash } from 'node:crypto';

/**
 * An answer sized for an agent (SPEC §14): at most a budget of characters of JSON, its one long list cut to fit and
 * the rest reached through `next_cursor`. Pure: no Nest, no SDK.
 *
 * A cursor is opaque to the agent: base64url of the offset of the next item and a digest of the tool and the
 * arguments it was given for, so a cursor handed to another question (another pipeline, another window) is refused
 * rather than answered with a page of something else.
 */

/** An answer before paging: what it found and its basis first (`head`, in order), then its one long list, largest first. */
export interface Shaped<Item = unknown> {
  readonly head: Readonly<Record<string, unknown>>;
  readonly listKey: string;
  readonly items: readonly Item[];
}

/** A page of an answer: the head, the items that fit, and where the rest begins (null when nothing is left). */
export type Page = Readonly<Record<string, unknown>> & { readonly next_cursor: string | null };

/** Why a cursor is not one of this question's: the tool says `invalid_argument: cursor: …`. */
export class CursorProblem extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CursorProblem';
  }
}

/** The question a cursor belongs to: the tool and its arguments but the cursor itself, in a stable order. */
export function questionDigest(tool: string, args: Readonly<Record<string, unknown>>): string {
  const asked = Object.keys(args)
    .filter((key) => key !== 'cursor' && args[key] !== undefined)
    .sort()
    .map((key) => [key, args[key]]);
  return createHash('sha256')
    .update(JSON.stringify([tool, asked]))
    .digest('base64url')
    .slice(0, 16);
}

export function cursorAt(offset: number, question: string): string {
  return Buffer.from(JSON.stringify({ o: offset, q: question })).toString('base64url');
}

/** Where the page a cursor asks for begins: 0 without one; a CursorProblem for one of another question or none at all. */
export function offsetOf(cursor: string | undefined, question: string): number {
  if (cursor === undefined) return 0;
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw new CursorProblem('not a cursor this server gave: pass next_cursor exactly as it came');
  }
  const { o: offset, q: asked } = (typeof decoded === 'object' && decoded !== null ? decoded : {}) as { o?: unknown; q?: unknown };
  if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < 0 || typeof asked !== 'string') {
    throw new CursorProblem('not a cursor this server gave: pass next_cursor exactly as it came');
  }
  if (asked !== question) throw new CursorProblem('this cursor belongs to another question: ask again with the same arguments it came with');
  return offset;
}

const sizeOf = (page: Page) => JSON.stringify(page).length;

function pageWith(shaped: Shaped, offset: number, count: number, cursorFor: (offset: number) => string): Page {
  const end = offset + count;
  return {
    ...shaped.head,
    [shaped.listKey]: shaped.items.slice(offset, end),
    next_cursor: end < shaped.items.length ? cursorFor(end) : null,
  };
}

/**
 * The page of `shaped` from `offset`: as many items as keep its JSON within `budget` characters, at least one while
 * any is left (an agent following cursors always gets somewhere; the shaping keeps each item far smaller than a
 * budget). An offset past the end gives the head and an empty list.
 */
export function pageOf(shaped: Shaped, offset: number, budget: number, cursorFor: (offset: number) => string): Page {
  const left = Math.max(0, shaped.items.length - offset);
  // The size grows with the count, so the largest count that fits is found by halving.
  let fits = Math.min(1, left);
  let over = left + 1;
  while (over - fits > 1) {
    const count = Math.floor((fits + over) / 2);
    if (sizeOf(pageWith(shaped, offset, count, cursorFor)) <= budget) fits = count;
    else over = count;
  }
  return pageWith(shaped, Math.min(offset, shaped.items.length), fits, cursorFor);
}
