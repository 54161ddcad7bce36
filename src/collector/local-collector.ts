import { join } from 'node:path';
import { OTLP_MEDIA_TYPES, OTLP_SIGNALS, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { exportRequestType } from '../otlp/otlp-proto';
import { JsonLinesFile } from './json-lines-file';
import { CollectorAnswer, CollectorClient, exportResult, ExportResult } from './collector-client';

type Signal = OtlpSignal;

/** The OTLP/JSON mapping writes these bytes fields as hex, every other one as base64. */
const HEX_ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

/**
 * One export request as an OTLP/JSON line, the encoding of the Collector's file exporter: camelCase names,
 * trace and span ids in hex, 64-bit integers as decimal strings, enums as numbers.
 */
export function otlpJsonLine(signal: Signal, encoding: OtlpEncoding, body: Buffer): string {
  if (encoding === 'json') {
    // A newline can only be whitespace in valid JSON (strings escape theirs), so this keeps the export exact.
    const line = body.toString('utf8').replace(/[\r\n]/g, ' ');
    JSON.parse(line);
    return line;
  }
  const type = exportRequestType(signal);
  const request = type.toObject(type.decode(body), { longs: String, enums: Number, bytes: String, defaults: false });
  return JSON.stringify(request, (key, value: unknown) =>
    HEX_ID_FIELDS.has(key) && typeof value === 'string' ? Buffer.from(value, 'base64').toString('hex') : value,
  );
}

const answer = (status: number, contentType: string | undefined, body: string | Buffer = Buffer.alloc(0)): CollectorAnswer => ({
  status,
  contentType,
  retryAfter: undefined,
  body: typeof body === 'string' ? Buffer.from(body) : body,
});

/**
 * The embedded default collector (issue 20): with no OTLP_UPSTREAM_URL, what the gateway and the pipeline
 * spans send is kept under `<directory>/<signal>.jsonl`, one export request a line, as the Collector's file
 * exporter writes them, so `npm start` works on its own and `npm run -s trace` can show what arrived. Answers
 * as a collector's OTLP/HTTP receiver does: 200 with an empty response in the request's encoding once the
 * line is on disk, 400 for a body it cannot decode, 503 when the disk write fails (so the client retries:
 * nothing accepted is lost silently).
 */
export class LocalCollector implements CollectorClient {
  private readonly files: Record<Signal, JsonLinesFile>;

  constructor(
    readonly directory: string,
    readonly maxBytesPerFile: number,
  ) {
    const file = (signal: Signal) => new JsonLinesFile(join(directory, `${signal}.jsonl`), maxBytesPerFile);
    this.files = { traces: file('traces'), metrics: file('metrics'), logs: file('logs') };
  }

  async export(signal: Signal, encoding: OtlpEncoding, body: Buffer): Promise<ExportResult> {
    return exportResult(signal, encoding, await this.receive(signal, encoding, body));
  }

  private async receive(signal: Signal, encoding: OtlpEncoding, body: Buffer): Promise<CollectorAnswer> {
    let line: string;
    try {
      line = otlpJsonLine(signal, encoding, body);
    } catch (error) {
      return answer(400, 'text/plain', `cannot decode the ${encoding} body: ${(error as Error).message}`);
    }
    try {
      await this.files[signal].append(line);
    } catch (error) {
      return answer(503, 'text/plain', `cannot write ${this.files[signal].path}: ${(error as Error).message}`);
    }
    // An empty Export*ServiceResponse: no bytes in protobuf, `{}` in JSON.
    return answer(200, OTLP_MEDIA_TYPES[encoding], encoding === 'json' ? '{}' : Buffer.alloc(0));
  }

  /** Always there: it is this process. */
  async reachable(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {
    await Promise.all(OTLP_SIGNALS.map((signal) => this.files[signal].close()));
  }
}
