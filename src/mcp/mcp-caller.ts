import type { IncomingHttpHeaders } from 'node:http';
import { internalApiCallerRefusal } from '../internal-api/internal-api-caller';
import { INTERNAL_API_HEADER, InternalApiTokenVerifier } from '../internal-api/internal-api-token';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * The internal API's caller check (SPEC §3), with the JWT also taken from `Authorization: Bearer`, where MCP
 * clients put a token: the same token, the same verifier, the same 401s. The internal API's own header wins when
 * both are sent.
 */
export function mcpCallerRefusal(headers: IncomingHttpHeaders, verifier: InternalApiTokenVerifier): ReturnType<typeof internalApiCallerRefusal> {
  if (headers[INTERNAL_API_HEADER] !== undefined) return internalApiCallerRefusal(headers, verifier);
  const bearer = BEARER.exec(headers.authorization ?? '')?.[1];
  return internalApiCallerRefusal(bearer === undefined ? headers : { ...headers, [INTERNAL_API_HEADER]: bearer }, verifier);
}
