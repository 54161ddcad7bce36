import { createHmac, randomBytes } from 'node:crypto';
import { capabilityMatches, capabilityOfPath, mintCapability } from './job-capability';

describe('per-job capabilities (SPEC §4, §6)', () => {
  const current = randomBytes(32);
  const previous = randomBytes(32);

  it('is at least 128 bits, URL-safe, and a MAC of the job id under the key', () => {
    const capability = mintCapability(current, 1001);
    expect(capability).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(Buffer.from(capability, 'base64url').length * 8).toBeGreaterThanOrEqual(128);
    const expected = createHmac('sha256', current).update('ci-job-telemetry capability v1 job:1001').digest().subarray(0, 24).toString('base64url');
    expect(capability).toBe(expected);
  });

  it('names exactly one job and one key', () => {
    const capability = mintCapability(current, 1001);
    expect(capabilityMatches([current], 1001, capability)).toBe(true);
    expect(capabilityMatches([current], 1002, capability)).toBe(false);
    expect(capabilityMatches([randomBytes(32)], 1001, capability)).toBe(false);
  });

  it('keeps accepting the previous key during a rotation, and mints with the current one', () => {
    expect(capabilityMatches([current, previous], 1001, mintCapability(previous, 1001))).toBe(true);
    expect(capabilityMatches([current, previous], 1001, mintCapability(current, 1001))).toBe(true);
    expect(capabilityMatches([current], 1001, mintCapability(previous, 1001))).toBe(false);
  });

  it.each(['', 'short', `${'A'.repeat(31)}=`, `${'A'.repeat(33)}`, `${'A'.repeat(31)}/`])('refuses the malformed capability %j', (capability) => {
    expect(capabilityMatches([current], 1001, capability)).toBe(false);
  });

  it('reads the job id and capability from an export path, and nothing else', () => {
    const capability = mintCapability(current, 7);
    expect(capabilityOfPath(`/jobs/7/${capability}/v1/traces`)).toEqual({ jobId: 7, capability });
    expect(capabilityOfPath(`/jobs/7/${capability}/v1/logs?x=1`)).toEqual({ jobId: 7, capability });
    expect(capabilityOfPath('/v1/traces')).toBeUndefined();
    expect(capabilityOfPath(`/jobs/7/${capability}/v2/traces`)).toBeUndefined();
    expect(capabilityOfPath(`/jobs/x/${capability}/v1/traces`)).toBeUndefined();
  });
});
