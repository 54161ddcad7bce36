import { OTLP_SIGNALS, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { exportRequestLine, ReceiverAnswer, receiverResponse } from '../otlp/otlp-receiver';
import { WireBody, wholeBody } from '../otlp/otlp-wire';
import { CollectorClient, ExportOrigin, exportResult, ExportResult } from './collector-client';
import { signalFile } from './collector-files';
import { JsonLinesFile } from './json-lines-file';

/**
 * The embedded default collector (issue 20): with no OTLP_UPSTREAM_URL, what the gateway and the pipeline
 * spans send is kept under `<directory>/<signal>.jsonl`, one export request a line, as the Collector's file
 * exporter writes them, so `npm start` works on its own and `npm run -s trace` can show what arrived. Answers
 * as a collector's OTLP/HTTP receiver does: 200 with an empty response in the request's encoding once the
 * line is on disk, 400 for a body it cannot decode, 503 when the disk write fails (so the client retries:
 * nothing accepted is lost silently).
 */
export class LocalCollector implements CollectorClient {
  private readonly files: Record<OtlpSignal, JsonLinesFile>;

  constructor(
    readonly directory: string,
    readonly maxBytesPerFile: number,
  ) {
    const file = (signal: OtlpSignal) => new JsonLinesFile(signalFile(directory, signal), maxBytesPerFile);
    this.files = { traces: file('traces'), metrics: file('metrics'), logs: file('logs') };
  }

  /** Decided as an answer of the Collector's receiver would be, from the very bytes it would send. */
  async export(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer | WireBody, origin: ExportOrigin = {}): Promise<ExportResult> {
    const received = await this.receive(signal, encoding, wholeBody(body), origin);
    const { status, headers, body: answer } = receiverResponse(signal, encoding, received);
    return exportResult(signal, encoding, { status, contentType: headers['content-type'], retryAfter: headers['retry-after'], body: answer });
  }

  private async receive(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer, { own = false }: ExportOrigin): Promise<ReceiverAnswer> {
    let line: string | Buffer;
    try {
      // The outbox's own exports are a line already: decoding each batch only to check it cost about 12 µs a span, and
      // the largest burst of garbage of a pickup's life (docs/performance.md).
      line = own && encoding === 'json' ? body : exportRequestLine(signal, encoding, body);
    } catch (error) {
      return { kind: 'failed', status: 400, message: `cannot decode the ${encoding} body: ${(error as Error).message}` };
    }
    try {
      await this.files[signal].append(line);
    } catch (error) {
      return { kind: 'failed', status: 503, message: `cannot write ${this.files[signal].path}: ${(error as Error).message}` };
    }
    return { kind: 'accepted' };
  }

  /** Always there: it is this process. */
  async reachable(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {
    await Promise.all(OTLP_SIGNALS.map((signal) => this.files[signal].close()));
  }
}
