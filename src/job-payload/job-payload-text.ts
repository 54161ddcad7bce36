/**
 * How deep a decorator request's JSON may nest. GitLab's job payload nests about six levels
 * (`services[].executor_opts.docker.platform`, `features.tracing.otel_endpoints[].auth.…`), eight
 * with the request around it; 64 leaves ample room for what GitLab may add, and stays far below the
 * thousands of levels at which V8's recursive JSON serializer overflows the stack, which turned a
 * 10 KB body into a 500 (SPEC §4: the decorator never answers 5xx).
 */
export const MAX_JSON_DEPTH = 64;

/** A 400 through the internal API's error filter (Fastify's body errors carry `statusCode`). */
export class JsonTooDeepError extends Error {
  readonly statusCode = 400;

  constructor(maxDepth: number) {
    super(`request body is nested deeper than ${maxDepth} levels`);
    this.name = 'JsonTooDeepError';
  }
}

/** One member of the request's `payload` object, as it stands in the body text. */
export interface PayloadMemberText {
  /** From the key's opening quote to the end of the value: `"key":value`, as sent. */
  readonly start: number;
  readonly end: number;
  /** Its place among the object's members as written, keys sent twice counted each time. */
  readonly index: number;
  /** When the value is an array: the positions of its `[`, of each `,` between elements, and of its `]`. */
  readonly delimiters: readonly number[] | undefined;
}

/** Where the request's `payload` object stands in the body text: what lets the answer reuse that text. */
export interface PayloadLayout {
  /** The object's text is [start, end), braces included. */
  readonly start: number;
  readonly end: number;
  /** By key; of a key sent twice, the last, as JSON.parse keeps it. */
  readonly members: ReadonlyMap<string, PayloadMemberText>;
}

export interface ScannedRequestText {
  readonly tooDeep: boolean;
  /**
   * The text was scanned to its end and holds no key that could be `__proto__` or `constructor` (neither as
   * written nor with escapes): JSON.parse alone then parses it as safely as a parser that looks for prototype
   * poisoning, which would only search the same text for those keys again.
   */
  readonly plain?: boolean;
  /** Absent when the request has no `payload` object (or is not JSON: the parser refuses it then). */
  readonly payload?: PayloadLayout;
}

const QUOTE = '"';
const QUOTE_CODE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

const PROTO_KEY = '__proto__';
const CONSTRUCTOR_KEY = 'constructor';

/**
 * Whether the key [start, end) (quotes included) could name `__proto__` or `constructor`: exactly one of them,
 * or any key long enough to spell one with escapes. Most keys are shorter, or longer without a backslash.
 */
function mayPoison(text: string, start: number, end: number): boolean {
  const length = end - start - 2;
  if (length < PROTO_KEY.length) return false;
  if (length === PROTO_KEY.length && text.startsWith(PROTO_KEY, start + 1)) return true;
  if (length === CONSTRUCTOR_KEY.length && text.startsWith(CONSTRUCTOR_KEY, start + 1)) return true;
  for (let at = start + 1; at < end - 1; at++) if (text.charCodeAt(at) === BACKSLASH) return true;
  return false;
}

/** Position just past the string that opens at `at` (its quote), or -1 when it never closes. */
function endOfString(text: string, at: number): number {
  let from = at + 1;
  for (;;) {
    const quote = text.indexOf(QUOTE, from);
    if (quote === -1) return -1;
    // A quote ends the string unless an odd run of backslashes escapes it.
    let backslashes = 0;
    while (quote - backslashes - 1 >= from && text.charCodeAt(quote - backslashes - 1) === BACKSLASH) backslashes++;
    from = quote + 1;
    if (backslashes % 2 === 0) return from;
  }
}

function keyOf(text: string, start: number, end: number): string | undefined {
  const raw = text.slice(start + 1, end - 1);
  if (!raw.includes('\\')) return raw;
  try {
    return JSON.parse(text.slice(start, end)) as string;
  } catch {
    return undefined; // not JSON: the parser refuses the body
  }
}

/**
 * One pass over a decorator request's body text, before it is parsed: whether it nests objects and
 * arrays deeper than `maxDepth` (counted outside strings, so an over-deep body is refused before it is
 * parsed or decorated), and where the members of its `payload` object stand. No UTF-16 code unit of a
 * character outside ASCII equals a bracket, a quote, a comma or a backslash. The layout means something
 * only for a text JSON.parse accepts.
 */
export function scanRequestText(text: string, maxDepth: number): ScannedRequestText {
  const end = text.length;
  let depth = 0;
  // Whether the container at each depth is an object: its members' keys are checked for prototype poisoning.
  const isObject: boolean[] = [];
  let plain = true;
  let expectingKey = false;
  let requestKey: string | undefined;
  let payload: PayloadLayout | undefined;
  let scanning: { start: number; members: Map<string, PayloadMemberText> } | undefined;
  let member: { key: string | undefined; start: number; end: number; index: number; delimiters: number[] | undefined } | undefined;
  let memberCount = 0;

  const closeMember = (at: number) => {
    if (scanning !== undefined && member?.key !== undefined) {
      member.end = at;
      scanning.members.set(member.key, member);
    }
    member = undefined;
  };

  let at = 0;
  while (at < end) {
    const code = text.charCodeAt(at);
    if (code === QUOTE_CODE) {
      const after = endOfString(text, at);
      if (after === -1) return { tooDeep: false };
      if (expectingKey) {
        expectingKey = false;
        if (plain && mayPoison(text, at, after)) plain = false;
        if (depth === 1 && isObject[1]) requestKey = keyOf(text, at, after);
        else if (depth === 2 && scanning !== undefined)
          member = { key: keyOf(text, at, after), start: at, end: -1, index: memberCount++, delimiters: undefined };
      }
      at = after;
      continue;
    }
    switch (code) {
      case OPEN_OBJECT:
      case OPEN_ARRAY:
        if (++depth > maxDepth) return { tooDeep: true };
        expectingKey = code === OPEN_OBJECT;
        isObject[depth] = expectingKey;
        if (depth === 2 && expectingKey && isObject[1] && requestKey === 'payload') scanning = { start: at, members: new Map() };
        else if (depth === 3 && !expectingKey && member !== undefined) member.delimiters = [at];
        break;
      case CLOSE_OBJECT:
      case CLOSE_ARRAY:
        if (depth === 3 && member?.delimiters !== undefined) member.delimiters.push(at);
        else if (depth === 2 && scanning !== undefined) {
          closeMember(at);
          payload = { start: scanning.start, end: at + 1, members: scanning.members };
          scanning = undefined;
        }
        depth--;
        expectingKey = false;
        break;
      case COMMA:
        if (depth === 2 && scanning !== undefined) closeMember(at);
        else if (depth === 3 && member?.delimiters !== undefined) member.delimiters.push(at);
        expectingKey = isObject[depth] === true;
        break;
    }
    at++;
  }
  return payload === undefined ? { tooDeep: false, plain } : { tooDeep: false, plain, payload };
}

/**
 * The answer's pieces joined by commas, writing pieces that stood next to each other in the body
 * (members or elements at consecutive places) as one slice of it, separators included: a payload the
 * decoration changed in two members goes back as a handful of slices, not one per member and element.
 * Joined with `+`, which V8 keeps as a rope: the text is copied once, when the answer is written.
 */
class TextPieces {
  private joinedSoFar = '';
  private from = -1;
  private to = -1;
  private lastIndex = -2;

  constructor(private readonly text: string) {}

  /** The body's text [from, to) for the sent piece at `index`. */
  reuse(index: number, from: number, to: number): void {
    if (index !== this.lastIndex + 1) {
      this.flush();
      this.from = from;
    }
    this.to = to;
    this.lastIndex = index;
  }

  add(piece: string): void {
    this.flush();
    this.append(piece);
  }

  joined(): string {
    this.flush();
    return this.joinedSoFar;
  }

  private append(piece: string): void {
    this.joinedSoFar = this.joinedSoFar === '' ? piece : this.joinedSoFar + ',' + piece;
  }

  private flush(): void {
    if (this.lastIndex !== -2) this.append(this.text.slice(this.from, this.to));
    this.lastIndex = -2;
  }
}

/** The array `value` whose elements kept from `sent` (in their order) are written as sent; new ones are serialized. */
function arrayJson(text: string, delimiters: readonly number[], sent: readonly unknown[], value: readonly unknown[]): string {
  const elements = new TextPieces(text);
  let next = 0;
  for (const element of value) {
    let index = next;
    while (index < sent.length && sent[index] !== element) index++;
    if (index < sent.length) {
      elements.reuse(index, delimiters[index] + 1, delimiters[index + 1]);
      next = index + 1;
    } else {
      elements.add(JSON.stringify(element) ?? 'null');
    }
  }
  return `[${elements.joined()}]`;
}

/**
 * `decorated` as JSON, where each member (and each element of an array member) that is still the very
 * value parsed from the body is written as the body's own text for it rather than serialized again:
 * a job payload's scripts and variables go back as they came, unparsed. A member that changed is
 * serialized. The result parses to `decorated`.
 */
export function payloadJson(text: string, layout: PayloadLayout, original: Record<string, unknown>, decorated: Record<string, unknown>): string {
  if (decorated === original) return text.slice(layout.start, layout.end);
  const members = new TextPieces(text);
  for (const key of Object.keys(decorated)) {
    const value = decorated[key];
    if (value === undefined) continue;
    const sent = layout.members.get(key);
    // The same value as parsed from that text (a number or a string equal to it parses the same).
    if (sent !== undefined && value === original[key]) {
      members.reuse(sent.index, sent.start, sent.end);
      continue;
    }
    const sentElements = original[key];
    if (sent?.delimiters !== undefined && Array.isArray(value) && Array.isArray(sentElements) && sent.delimiters.length === sentElements.length + 1) {
      members.add(`${JSON.stringify(key)}:${arrayJson(text, sent.delimiters, sentElements, value)}`);
      continue;
    }
    members.add(`${JSON.stringify(key)}:${JSON.stringify(value)}`);
  }
  return `{${members.joined()}}`;
}
