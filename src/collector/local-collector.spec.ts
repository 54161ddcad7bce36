import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportRequestType } from '../otlp/otlp-proto';
import { LocalCollector } from './local-collector';

const ExportTraceServiceRequest = exportRequestType('traces');

const TRACE_ID = '5b8efff798038103d269b633813fc60c';
const SPAN_ID = 'eee19b7ec3c1b174';
const PARENT_ID = 'eee19b7ec3c1b173';

function protobufExport(name = 'job_execution'): Buffer {
  const request = ExportTraceServiceRequest.fromObject({
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
        scopeSpans: [
          {
            spans: [
              {
                traceId: Buffer.from(TRACE_ID, 'hex'),
                spanId: Buffer.from(SPAN_ID, 'hex'),
                parentSpanId: Buffer.from(PARENT_ID, 'hex'),
                name,
                kind: 1,
                startTimeUnixNano: '1700000000123456789',
                endTimeUnixNano: '1700000001123456789',
                attributes: [
                  { key: 'ci.job.id', value: { intValue: '1001' } },
                  { key: 'payload', value: { bytesValue: Buffer.from('hi') } },
                ],
                status: { code: 2 },
              },
            ],
          },
        ],
      },
    ],
  });
  return Buffer.from(ExportTraceServiceRequest.encode(request).finish());
}

const lines = (path: string) =>
  existsSync(path)
    ? readFileSync(path, 'utf8')
        .split('\n')
        .filter((line) => line.length > 0)
    : [];

describe('LocalCollector (the embedded default collector)', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'local-collector-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps a protobuf trace export as one OTLP/JSON line (hex ids, camelCase, int64 as strings) and answers an empty protobuf response', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    const answer = await collector.send('/v1/traces', 'application/x-protobuf', protobufExport());
    await collector.close();

    expect(answer).toMatchObject({ status: 200, contentType: 'application/x-protobuf' });
    expect(answer.body.length).toBe(0);
    const [line, ...more] = lines(join(dir, 'otlp', 'traces.jsonl'));
    expect(more).toEqual([]);
    expect(JSON.parse(line)).toEqual({
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
          scopeSpans: [
            {
              spans: [
                {
                  traceId: TRACE_ID,
                  spanId: SPAN_ID,
                  parentSpanId: PARENT_ID,
                  name: 'job_execution',
                  kind: 1,
                  startTimeUnixNano: '1700000000123456789',
                  endTimeUnixNano: '1700000001123456789',
                  attributes: [
                    { key: 'ci.job.id', value: { intValue: '1001' } },
                    // Only ids are hex in OTLP/JSON: other bytes stay base64.
                    { key: 'payload', value: { bytesValue: Buffer.from('hi').toString('base64') } },
                  ],
                  status: { code: 2 },
                },
              ],
            },
          ],
        },
      ],
    });
  });

  it('keeps a JSON export as it came, on one line, in the file of its signal, and answers {}', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    const body = '{\n  "resourceMetrics": [\r\n {"resource": {"attributes": [{"key": "k", "value": {"stringValue": "a\\nb"}}]}}]\n}';
    const answer = await collector.send('/v1/metrics', 'application/json; charset=utf-8', Buffer.from(body));
    const logs = await collector.send('/v1/logs', 'application/json', Buffer.from('{"resourceLogs":[]}'));
    await collector.close();

    expect(answer).toMatchObject({ status: 200, contentType: 'application/json' });
    expect(answer.body.toString()).toBe('{}');
    expect(logs.status).toBe(200);
    const metrics = lines(join(dir, 'otlp', 'metrics.jsonl'));
    expect(metrics).toHaveLength(1);
    expect(JSON.parse(metrics[0])).toEqual(JSON.parse(body));
    expect(lines(join(dir, 'otlp', 'logs.jsonl'))).toEqual(['{"resourceLogs":[]}']);
    expect(existsSync(join(dir, 'otlp', 'traces.jsonl'))).toBe(false);
  });

  it('answers 400 for a body it cannot decode, 404 and 415 as a receiver does, and writes nothing', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    expect((await collector.send('/v1/traces', 'application/json', Buffer.from('{"resourceSpans":'))).status).toBe(400);
    expect((await collector.send('/v1/traces', 'application/x-protobuf', Buffer.from([0x0a, 0xff]))).status).toBe(400);
    expect((await collector.send('/v1/profiles', 'application/json', Buffer.from('{}'))).status).toBe(404);
    expect((await collector.send('/v1/traces', 'text/plain', Buffer.from('{}'))).status).toBe(415);
    await collector.close();
    expect(existsSync(join(dir, 'otlp'))).toBe(false);
  });

  it('keeps the order of exports sent at once, and rotates at the bound keeping one previous file', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024);
    const exports = Array.from({ length: 40 }, (_, i) => `{"resourceSpans":[],"n":"${String(i).padStart(3, '0')}","pad":"${'x'.repeat(60)}"}`);
    const answers = await Promise.all(exports.map((body) => collector.send('/v1/traces', 'application/json', Buffer.from(body))));
    await collector.close();

    expect(answers.map((answer) => answer.status)).toEqual(exports.map(() => 200));
    const current = join(dir, 'otlp', 'traces.jsonl');
    for (const file of [current, `${current}.1`]) expect(statSync(file).size).toBeLessThanOrEqual(1024);
    // Older files are gone: what is kept is the newest exports, in the order they were sent.
    const kept = [...lines(`${current}.1`), ...lines(current)];
    expect(kept.length).toBeGreaterThan(10);
    expect(kept).toEqual(exports.slice(exports.length - kept.length));
    expect(statSync(`${current}.1`).size + 100).toBeGreaterThan(1024);
  });

  it('answers 503 when it cannot write, so the client retries, and writes again once it can', async () => {
    const blocked = join(dir, 'otlp');
    writeFileSync(blocked, 'a file where the directory should be');
    const collector = new LocalCollector(blocked, 1024 * 1024);
    const refused = await collector.send('/v1/traces', 'application/x-protobuf', protobufExport());
    expect(refused.status).toBe(503);
    expect(refused.body.toString()).toContain(join(blocked, 'traces.jsonl'));

    rmSync(blocked);
    const accepted = await collector.send('/v1/traces', 'application/x-protobuf', protobufExport());
    await collector.close();
    expect(accepted.status).toBe(200);
    expect(lines(join(blocked, 'traces.jsonl'))).toHaveLength(1);
  });
});
