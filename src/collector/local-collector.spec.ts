import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportRequestType } from '../otlp/otlp-proto';
import { previousFile, signalFile } from './collector-files';
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

  it('keeps a protobuf trace export as one OTLP/JSON line (hex ids, camelCase, int64 as strings) and accepts it whole', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    const answer = await collector.export('traces', 'protobuf', protobufExport());
    await collector.close();

    expect(answer).toEqual({ kind: 'accepted', status: 200, partialSuccess: undefined });
    const [line, ...more] = lines(signalFile(join(dir, 'otlp'), 'traces'));
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

  it('keeps a JSON export as it came, on one line, in the file of its signal, and accepts it whole', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    const body = '{\n  "resourceMetrics": [\r\n {"resource": {"attributes": [{"key": "k", "value": {"stringValue": "a\\nb"}}]}}]\n}';
    const answer = await collector.export('metrics', 'json', Buffer.from(body));
    const logs = await collector.export('logs', 'json', Buffer.from('{"resourceLogs":[]}'));
    await collector.close();

    expect(answer).toEqual({ kind: 'accepted', status: 200, partialSuccess: undefined });
    expect(logs.kind).toBe('accepted');
    const metrics = lines(signalFile(join(dir, 'otlp'), 'metrics'));
    expect(metrics).toHaveLength(1);
    expect(JSON.parse(metrics[0])).toEqual(JSON.parse(body));
    expect(lines(signalFile(join(dir, 'otlp'), 'logs'))).toEqual(['{"resourceLogs":[]}']);
    expect(existsSync(signalFile(join(dir, 'otlp'), 'traces'))).toBe(false);
  });

  it('refuses with 400 a body it cannot decode, as a receiver does, and writes nothing', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024 * 1024);
    expect(await collector.export('traces', 'json', Buffer.from('{"resourceSpans":'))).toMatchObject({ kind: 'bad_data', status: 400 });
    expect(await collector.export('traces', 'protobuf', Buffer.from([0x0a, 0xff]))).toMatchObject({ kind: 'bad_data', status: 400 });
    await collector.close();
    expect(existsSync(join(dir, 'otlp'))).toBe(false);
  });

  it('keeps the order of exports sent at once, and rotates at the bound keeping one previous file', async () => {
    const collector = new LocalCollector(join(dir, 'otlp'), 1024);
    const exports = Array.from({ length: 40 }, (_, i) => `{"resourceSpans":[],"n":"${String(i).padStart(3, '0')}","pad":"${'x'.repeat(60)}"}`);
    const answers = await Promise.all(exports.map((body) => collector.export('traces', 'json', Buffer.from(body))));
    await collector.close();

    expect(answers.map((answer) => answer.kind)).toEqual(exports.map(() => 'accepted'));
    const current = signalFile(join(dir, 'otlp'), 'traces');
    for (const file of [current, previousFile(current)]) expect(statSync(file).size).toBeLessThanOrEqual(1024);
    // Older files are gone: what is kept is the newest exports, in the order they were sent.
    const kept = [...lines(previousFile(current)), ...lines(current)];
    expect(kept.length).toBeGreaterThan(10);
    expect(kept).toEqual(exports.slice(exports.length - kept.length));
    expect(statSync(previousFile(current)).size + 100).toBeGreaterThan(1024);
  });

  it('answers 503 when it cannot write, so the client retries, and writes again once it can', async () => {
    const blocked = join(dir, 'otlp');
    writeFileSync(blocked, 'a file where the directory should be');
    const collector = new LocalCollector(blocked, 1024 * 1024);
    const refused = await collector.export('traces', 'protobuf', protobufExport());
    expect(refused).toMatchObject({ kind: 'retry', happened: 503 });
    expect(refused.kind === 'retry' && refused.body?.toString()).toContain(signalFile(blocked, 'traces'));

    rmSync(blocked);
    const accepted = await collector.export('traces', 'protobuf', protobufExport());
    await collector.close();
    expect(accepted.kind).toBe('accepted');
    expect(lines(signalFile(blocked, 'traces'))).toHaveLength(1);
  });
});
