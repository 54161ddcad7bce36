import { randomBytes } from 'node:crypto';
import { InternalApiTokenVerifier, signInternalApiToken } from '../internal-api/internal-api-token';
import { mcpCallerRefusal } from './mcp-caller';

describe('who may call the MCP server: the internal-API JWT, in its header or as a Bearer token (SPEC §3, §14)', () => {
  const secret = randomBytes(32);
  const verifier = new InternalApiTokenVerifier(secret, ['gitlab']);

  it('accepts the JWT as Authorization: Bearer, whatever the scheme word’s case', async () => {
    const token = await signInternalApiToken(secret, 'gitlab');
    expect(await mcpCallerRefusal({ authorization: `Bearer ${token}` }, verifier)).toBeUndefined();
    expect(await mcpCallerRefusal({ authorization: `bearer ${token}` }, verifier)).toBeUndefined();
    expect(await mcpCallerRefusal({ 'gitlab-ci-telemetry-api-request': token }, verifier)).toBeUndefined();
  });

  it('refuses another scheme, another secret, and a bad internal header even beside a good Bearer token', async () => {
    const token = await signInternalApiToken(secret, 'gitlab');
    const forged = await signInternalApiToken(randomBytes(32), 'gitlab');
    expect(await mcpCallerRefusal({ authorization: `Basic ${Buffer.from('gitlab:x').toString('base64')}` }, verifier)).toMatchObject({
      error: 'missing gitlab-ci-telemetry-api-request header',
    });
    expect(await mcpCallerRefusal({ authorization: `Bearer ${forged}` }, verifier)).toMatchObject({ error: 'invalid gitlab-ci-telemetry-api-request token' });
    // The internal API's own header decides when both are sent: a forged one is not rescued by a good Bearer token.
    expect(await mcpCallerRefusal({ 'gitlab-ci-telemetry-api-request': forged, authorization: `Bearer ${token}` }, verifier)).toMatchObject({
      error: 'invalid gitlab-ci-telemetry-api-request token',
    });
  });
});
