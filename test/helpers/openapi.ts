import Ajv2020, { ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

const DOCUMENT_ID = 'openapi.json';
const document = parse(readFileSync(join(__dirname, '..', '..', 'openapi', 'openapi.yaml'), 'utf8')) as {
  paths: Record<string, Record<string, { responses: Record<string, { $ref?: string; content?: Record<string, unknown> }> }>>;
  components: { responses: Record<string, { content?: Record<string, unknown> }> };
};

// OpenAPI 3.1 schemas are JSON Schema 2020-12; the document is added whole so its $refs resolve.
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(document, DOCUMENT_ID);

const pointer = (...parts: string[]) => parts.map((part) => part.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
const cache = new Map<string, ValidateFunction>();

/**
 * Checks a live response against what openapi/openapi.yaml promises for that path, method and status.
 * Throws with ajv's errors when it does not match, or when the document has no such response.
 */
export function expectMatchesOpenApi(path: string, method: string, status: number, contentType: string | undefined, body: unknown): void {
  const operation = document.paths[path]?.[method.toLowerCase()];
  if (operation === undefined) throw new Error(`openapi.yaml has no ${method} ${path}`);
  let response = operation.responses[String(status)];
  if (response === undefined) throw new Error(`openapi.yaml documents no ${status} for ${method} ${path}`);
  let base = `#/${pointer('paths', path, method.toLowerCase(), 'responses', String(status))}`;
  if (response.$ref !== undefined) {
    const name = response.$ref.split('/').pop()!;
    response = document.components.responses[name];
    base = `#/${pointer('components', 'responses', name)}`;
  }
  const mediaType = (contentType ?? '').split(';')[0].trim();
  if (response.content?.[mediaType] === undefined) {
    throw new Error(`openapi.yaml documents no ${mediaType} body for ${status} of ${method} ${path}`);
  }
  const ref = `${DOCUMENT_ID}${base}/${pointer('content', mediaType, 'schema')}`;
  let validate = cache.get(ref);
  if (validate === undefined) {
    validate = ajv.compile({ $ref: ref });
    cache.set(ref, validate);
  }
  if (!validate(body)) {
    throw new Error(`response does not match openapi.yaml for ${status} ${method} ${path}: ${ajv.errorsText(validate.errors)}`);
  }
}
