import { gzipSync } from 'node:zlib';
import { OtlpReceiver, ReceivedExport, startOtlpReceiver } from '../../src/otlp/otlp-receiver';

/** The one OTLP receiver over HTTP, as the demo's and the tests' collectors run it. */
describe('startOtlpReceiver', () => {
  let receiver: OtlpReceiver;
  let received: ReceivedExport[];
  afterEach(() => receiver.stop());

  const post = (path: string, headers: Record<string, string>, body: Buffer | string, method = 'POST') =>
    fetch(`${receiver.url}${path}`, { method, headers, body: method === 'POST' ? body : undefined });

  async function start(mode?: 'decode' | 'bytes') {
    received = [];
    receiver = await startOtlpReceiver({
      mode,
      onExport: (exported) => {
        received.push(exported);
        return { kind: 'accepted' };
      },
    });
  }

  it('decodes an export, gzip or not, and answers an empty response in its encoding', async () => {
    await start();
    const body = '{"resourceLogs":[]}';
    const plain = await post('/v1/logs', { 'content-type': 'application/json' }, body);
    const zipped = await post('/v1/logs', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, gzipSync(body));
    expect([plain.status, plain.headers.get('content-type'), await plain.text()]).toEqual([200, 'application/json', '{}']);
    expect(zipped.status).toBe(200);
    expect(received.map((each) => [each.signal, each.encoding, each.request])).toEqual([
      ['logs', 'json', { resourceLogs: [] }],
      ['logs', 'json', { resourceLogs: [] }],
    ]);
  });

  it('answers 404, 405 and 415 as a receiver does, and 400 with a Status for a body it cannot decode', async () => {
    await start();
    expect((await post('/v1/profiles', { 'content-type': 'application/json' }, '{}')).status).toBe(404);
    expect((await post('/v1/traces', {}, '', 'GET')).status).toBe(405);
    expect((await post('/v1/traces', { 'content-type': 'text/plain' }, '{}')).status).toBe(415);
    expect((await post('/v1/traces', { 'content-type': 'application/json', 'content-encoding': 'br' }, '{}')).status).toBe(415);
    const bad = await post('/v1/traces', { 'content-type': 'application/json' }, '{"resourceSpans":');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ code: 3, message: expect.stringContaining('cannot decode the json body') });
    expect(received).toEqual([]);
  });

  it('in bytes mode hands over the body as it came, neither inflated nor decoded', async () => {
    await start('bytes');
    const zipped = gzipSync('not even json');
    const answer = await post('/v1/traces', { 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip' }, zipped);
    expect(answer.status).toBe(200);
    expect(received).toHaveLength(1);
    expect(received[0].body.equals(zipped)).toBe(true);
    expect(received[0].request).toBeUndefined();
  });
});
