import { errorCodes, type FastifyInstance } from 'fastify';
import { applyPayloadChanges, Decoration } from './job-payload-decoration';
import { JobPayload } from './job-payload-request';
import { JsonTooDeepError, MAX_JSON_DEPTH, PayloadLayout, payloadJson, scanRequestText } from './job-payload-text';

const BYTE_ORDER_MARK = 0xfeff;

/** What the route's JSON parser hands the handler: the parsed body, and its text for the answer to reuse. */
export interface JobPayloadBody {
  readonly json: unknown;
  readonly text: string;
  readonly payloadLayout?: PayloadLayout;
}

/**
 * Makes `scope` (a Fastify context of the decorator's own) take JSON bodies only, as JobPayloadBody: read
 * against BODY_LIMIT_BYTES, refused with a 400 when nested beyond any job payload (not a stack overflow
 * later), checked for prototype poisoning as on every other JSON route.
 */
export function useJobPayloadParser(scope: FastifyInstance): void {
  const { onProtoPoisoning, onConstructorPoisoning } = scope.initialConfig;
  const parseJson = scope.getDefaultJsonParser(onProtoPoisoning ?? 'error', onConstructorPoisoning ?? 'error');
  // JSON only: Fastify's default text/plain parser would hand the handler a string, answered as a
  // payload missing every field ("runner is required") instead of as the wrong media type.
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser('*', (request, _body, done) => done(new UnsupportedMediaTypeError(request.headers['content-type']), undefined));
  scope.addContentTypeParser<string>('application/json', { parseAs: 'string' }, (request, text, done) => {
    const scanned = scanRequestText(text, MAX_JSON_DEPTH);
    if (scanned.tooDeep) return done(new JsonTooDeepError(MAX_JSON_DEPTH), undefined);
    // The scan has looked at every key already: a text with none that could poison a prototype (and no byte-order
    // mark) is JSON.parse's alone, without the poisoning parser's own search of the text (about 8 µs a pickup).
    if (scanned.plain === true && text.length > 0 && text.charCodeAt(0) !== BYTE_ORDER_MARK) {
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return done(new errorCodes.FST_ERR_CTP_INVALID_JSON_BODY(), undefined);
      }
      return done(null, { json, text, payloadLayout: scanned.payload } satisfies JobPayloadBody);
    }
    parseJson(request, text, (error, json) => {
      if (error !== null) done(error, undefined);
      else done(null, { json, text, payloadLayout: scanned.payload } satisfies JobPayloadBody);
    });
  });
}

/** The decorator's answer, the payload written back from the request's own text where it did not change. */
export function decoratedAnswer(body: JobPayloadBody, sent: JobPayload, { changes, telemetry }: Decoration): string {
  const payload = changes === undefined ? sent : applyPayloadChanges(sent, changes);
  const payloadText = body.payloadLayout === undefined ? JSON.stringify(payload) : payloadJson(body.text, body.payloadLayout, sent, payload);
  return `{"payload":${payloadText},"telemetry":${JSON.stringify(telemetry)}}`;
}

/**
 * The answer to a caller that asked for the changes (`Prefer: return=minimal`): what to do to the payload it holds
 * (nothing when telemetry is not enabled), and the job it is for, so that a caller can tell it from another job's.
 */
export function changesAnswer(jobId: number, { changes, telemetry }: Decoration): string {
  return JSON.stringify({ job_id: jobId, changes: changes ?? {}, telemetry });
}

/**
 * Whether the caller asked for the changes instead of the payload: a `return=minimal` preference (RFC 7240) among
 * those of its `Prefer` header(s), the name in any case, the value bare or quoted.
 */
export function prefersChanges(prefer: string | string[] | undefined): boolean {
  if (prefer === undefined) return false;
  if (prefer === 'return=minimal') return true; // as the Ruby client sends it
  for (const header of Array.isArray(prefer) ? prefer : [prefer]) {
    for (const preference of header.split(',')) {
      const [name, value] = preference
        .split(';', 1)[0]
        .split('=', 2)
        .map((part) => part.trim());
      if (name.toLowerCase() === 'return' && (value === 'minimal' || value === '"minimal"')) return true;
    }
  }
  return false;
}

/** 415 through the internal API's error shape (AllExceptionsFilter reads `statusCode`), naming what was sent. */
class UnsupportedMediaTypeError extends Error {
  readonly statusCode = 415;

  constructor(contentType: string | undefined) {
    const sent = contentType === undefined || contentType === '' ? 'none' : contentType.slice(0, 100);
    super(`content-type must be application/json (got ${sent})`);
    this.name = 'UnsupportedMediaTypeError';
  }
}
