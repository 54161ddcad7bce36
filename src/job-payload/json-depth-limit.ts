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
const QUOTE = '"';
const QUOTE_CODE = 0x22;
const BACKSLASH = 0x5c;

/** A 400 through the internal API's error filter (Fastify's body errors carry `statusCode`). */
export class JsonTooDeepError extends Error {
  readonly statusCode = 400;

  constructor(maxDepth: number) {
    super(`request body is nested deeper than ${maxDepth} levels`);
    this.name = 'JsonTooDeepError';
  }
}

/**
 * Whether a JSON text nests objects and arrays deeper than `maxDepth`, counted outside strings, so an
 * over-deep body is refused before it is parsed or decorated. No UTF-16 code unit of a character
 * outside ASCII equals a bracket, a quote or a backslash. A text that is not JSON gets no verdict
 * here; the parser refuses it.
 */
export function nestsDeeperThan(json: string, maxDepth: number): boolean {
  const end = json.length;
  let depth = 0;
  let at = 0;
  while (at < end) {
    const code = json.charCodeAt(at++);
    if (code === QUOTE_CODE) {
      // String contents (scripts, variable values) are most of a job payload: jump from quote to quote
      // natively. A quote ends the string unless an odd run of backslashes escapes it.
      for (;;) {
        const quote = json.indexOf(QUOTE, at);
        if (quote === -1) return false;
        let backslashes = 0;
        while (quote - backslashes - 1 >= at && json.charCodeAt(quote - backslashes - 1) === BACKSLASH) backslashes++;
        at = quote + 1;
        if (backslashes % 2 === 0) break;
      }
    } else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      if (++depth > maxDepth) return true;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) {
      depth--;
    }
  }
  return false;
}
