import { randomBytes } from 'node:crypto';
import { packedBody, unpackedBody } from './packed-body';

describe('parked bodies packed for Redis', () => {
  const roundTrip = async (body: Buffer) => {
    const stored = await packedBody(body);
    return { stored, back: await unpackedBody(stored, body.length) };
  };

  it('packs a repetitive export to a fraction of its bytes and gives every byte back, on the event loop and in the pool', async () => {
    for (const size of [4 * 1024, 2 * 1024 * 1024]) {
      const body = Buffer.from('{"resourceSpans":[{"key":"ci.job.name","value":{"stringValue":"rspec"}}]}'.repeat(size / 64).slice(0, size));
      const { stored, back } = await roundTrip(body);
      expect(stored.length).toBeLessThan(body.length / 10);
      expect(back.equals(body)).toBe(true);
    }
  });

  it('keeps small and incompressible bodies as they are', async () => {
    for (const body of [Buffer.from('{"resourceSpans":[]}'), Buffer.concat([Buffer.from([0x0a]), randomBytes(16 * 1024)])]) {
      const { stored, back } = await roundTrip(body);
      expect(stored).toBe(body);
      expect(back).toBe(body);
    }
  });

  it('packs any body that starts with the packed tag, so that a body kept plain is never taken for a packed one', async () => {
    for (const body of [Buffer.from([0x00, 0x01]), Buffer.concat([Buffer.from([0x00]), randomBytes(4096)])]) {
      const { stored, back } = await roundTrip(body);
      expect(stored.equals(body)).toBe(false);
      expect(back.equals(body)).toBe(true);
    }
  });

  it('refuses a packed body that does not unpack to the bytes its entry says, rather than send part of it', async () => {
    const body = Buffer.alloc(64 * 1024, 0x0a);
    const stored = await packedBody(body);
    await expect(unpackedBody(stored, body.length - 1)).rejects.toThrow();
    await expect(unpackedBody(stored, body.length + 1)).rejects.toThrow(/unpacked to 65536 bytes, its entry says 65537/);
    await expect(unpackedBody(stored.subarray(0, 20), body.length)).rejects.toThrow();
  });
});
