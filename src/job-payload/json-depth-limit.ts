import { Transform, TransformCallback } from 'node:stream';

/**
 * How deep a decorator request's JSON may nest. GitLab's job payload nests about six levels
 * (`services[].executor_opts.docker.platform`, `features.tracing.otel_endpoints[].auth.…`), eight
 * with the request around it; 64 leaves ample room for what GitLab may add, and stays far below the
 * thousands of levels at which V8's recursive JSON serializer overflows the stack, which turned a
 * 10 KB body into a 500 (SPEC §4: the decorator never answers 5xx).
 */
export const MAX_JSON_DEPTH = 64;

const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function indexOrEnd(chunk: Buffer, byte: number, from: number): number {
  const found = chunk.indexOf(byte, from);
  return found === -1 ? chunk.length : found;
}

/** A 400 through the internal API's error filter (Fastify's body errors carry `statusCode`). */
export class JsonTooDeepError extends Error {
  readonly statusCode = 400;

  constructor(maxDepth: number) {
    super(`request body is nested deeper than ${maxDepth} levels`);
    this.name = 'JsonTooDeepError';
  }
}

/**
 * Passes a JSON body through while counting its nesting outside strings, so an over-deep body is
 * refused before it is parsed or decorated. Works on bytes: in UTF-8 no byte of a multi-byte
 * character equals a bracket, a quote or a backslash. Past the limit it stops passing bytes on but
 * reads on to the end, so the client gets its 400 rather than a connection reset mid-upload; it
 * stops reading once `maxDrainBytes` (the body limit) have come, since Fastify's own count sees only
 * what is passed on.
 */
export class JsonDepthLimit extends Transform {
  /** Read by Fastify's body reader against the body limit. */
  receivedEncodedLength = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private tooDeep = false;

  constructor(
    private readonly maxDepth = MAX_JSON_DEPTH,
    private readonly maxDrainBytes = Infinity,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.receivedEncodedLength += chunk.length;
    if (this.tooDeep) return callback(this.receivedEncodedLength > this.maxDrainBytes ? new JsonTooDeepError(this.maxDepth) : null);
    const end = chunk.length;
    // Next quote and backslash at or after `at`, found natively: string contents (scripts, variable
    // values) are most of a job payload, and skipping them this way keeps the scan a fraction of
    // JSON.parse's cost. Each is looked up again only once `at` has passed it.
    let quoteAt = -1;
    let backslashAt = -1;
    let at = 0;
    while (at < end) {
      if (this.inString) {
        if (this.escaped) {
          this.escaped = false;
          at++;
          continue;
        }
        if (quoteAt < at) quoteAt = indexOrEnd(chunk, QUOTE, at);
        if (backslashAt < at) backslashAt = indexOrEnd(chunk, BACKSLASH, at);
        if (backslashAt < quoteAt) {
          this.escaped = true;
          at = backslashAt + 1;
        } else {
          this.inString = quoteAt === end;
          at = quoteAt + 1;
        }
        continue;
      }
      const byte = chunk[at++];
      if (byte === QUOTE) {
        this.inString = true;
      } else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) {
        if (++this.depth > this.maxDepth) {
          this.tooDeep = true;
          return callback();
        }
      } else if (byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) {
        this.depth--;
      }
    }
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    callback(this.tooDeep ? new JsonTooDeepError(this.maxDepth) : null);
  }
}
