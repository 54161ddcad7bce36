import { Readable } from 'node:stream';
import { JsonDepthLimit, JsonTooDeepError } from './json-depth-limit';

/** Feeds `text` through the limit in chunks of `chunkSize` bytes; resolves with what came out. */
async function through(text: string, maxDepth: number, chunkSize = 1): Promise<string> {
  const bytes = Buffer.from(text);
  const chunks = Array.from({ length: Math.ceil(bytes.length / chunkSize) }, (_, i) => bytes.subarray(i * chunkSize, (i + 1) * chunkSize));
  const limit = Readable.from(chunks).pipe(new JsonDepthLimit(maxDepth));
  const out: Buffer[] = [];
  return new Promise((resolve, reject) => {
    limit.on('data', (chunk: Buffer) => out.push(chunk));
    limit.on('error', reject);
    limit.on('end', () => resolve(Buffer.concat(out).toString()));
  });
}

describe('JsonDepthLimit', () => {
  it('passes a body at the limit through unchanged, whatever the chunking', async () => {
    const body = JSON.stringify({ a: [{ b: ['ü', { c: 1 }] }] });
    for (const size of [1, 3, 1024]) expect(await through(body, 5, size)).toBe(body);
  });

  it('refuses a body one level deeper', async () => {
    await expect(through('{"a":[{"b":[1,{"c":[]}]}]}', 5)).rejects.toBeInstanceOf(JsonTooDeepError);
  });

  it('does not count brackets inside strings, escaped quotes included, split across chunks', async () => {
    const body = JSON.stringify({ script: '[[[{{{ \\" [[[ "[[[[' });
    for (const size of [1, 2, 7]) expect(await through(body, 1, size)).toBe(body);
  });

  it('reads a refused body to its end, counting every byte for the body limit', async () => {
    const body = Buffer.from('['.repeat(1000) + ']'.repeat(1000));
    const limit = new JsonDepthLimit(10);
    const refused = new Promise((resolve) => limit.on('error', resolve));
    limit.resume();
    for (let at = 0; at < body.length; at += 100) limit.write(body.subarray(at, at + 100));
    limit.end();
    expect(await refused).toBeInstanceOf(JsonTooDeepError);
    expect(limit.receivedEncodedLength).toBe(body.length);
  });

  it('stops reading a refused body once it passes the body limit', async () => {
    const limit = new JsonDepthLimit(10, 2000);
    const refused = new Promise((resolve) => limit.on('error', resolve));
    limit.resume();
    limit.write(Buffer.from('['.repeat(1000)));
    limit.write(Buffer.alloc(1500, 0x20));
    expect(await refused).toBeInstanceOf(JsonTooDeepError);
  });
});
