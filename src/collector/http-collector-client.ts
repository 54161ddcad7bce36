import type { IncomingHttpHeaders } from 'node:http';
import { Dispatcher, errors, Pool } from 'undici';
import { OTLP_MEDIA_TYPES, OtlpEncoding, OtlpSignal } from '../otlp/otlp-encoding';
import { WireBody, wholeBody } from '../otlp/otlp-wire';
import { CollectorClient, exportResult, ExportResult } from './collector-client';

/** Headers given as `name=value,name=value` (the OTEL_EXPORTER_OTLP_HEADERS convention). */
export function parseHeaderList(list: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of (list ?? '').split(',')) {
    const at = pair.indexOf('=');
    if (at > 0) headers[pair.slice(0, at).trim().toLowerCase()] = decodeURIComponent(pair.slice(at + 1).trim());
  }
  return headers;
}

/**
 * Pooled keep-alive connections to the collector (SPEC §6). Requests are built from scratch, so
 * nothing the runner sent (its tokens above all) reaches the collector but the payload itself.
 */
export class HttpCollectorClient implements CollectorClient {
  private readonly pool: Pool;
  private readonly basePath: string;

  constructor(
    url: string,
    private readonly extraHeaders: Record<string, string>,
    private readonly timeoutMs: number,
  ) {
    const target = new URL(url);
    this.pool = new Pool(target.origin, { connections: 32, keepAliveTimeout: 30_000, pipelining: 1 });
    this.basePath = target.pathname.replace(/\/+$/, '');
  }

  /**
   * Dispatched with a handler of our own rather than `request()`: the answer is a few bytes, and
   * `request()` wraps every one in an async resource and a readable stream (a measurable share of an
   * export's cost in the gateway's profile).
   */
  export(signal: OtlpSignal, encoding: OtlpEncoding, body: Buffer | WireBody): Promise<ExportResult> {
    return new Promise((resolve) => {
      let status = 0;
      let headers: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      const header = (name: string) => {
        const value = headers[name];
        return Array.isArray(value) ? value[0] : value;
      };
      const handler: Dispatcher.DispatchHandler = {
        // undici tells the handler interfaces apart by this member.
        onRequestStart: () => undefined,
        onResponseStart: (_controller, statusCode, responseHeaders) => {
          status = statusCode;
          headers = responseHeaders;
        },
        onResponseData: (_controller, chunk) => void chunks.push(chunk),
        onResponseEnd: () =>
          resolve(
            exportResult(signal, encoding, {
              status,
              contentType: header('content-type'),
              retryAfter: header('retry-after'),
              body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks),
            }),
          ),
        onResponseError: (_controller, error) => {
          const timedOut = error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError;
          resolve({ kind: 'retry', happened: timedOut ? 'timeout' : 'unreachable' });
        },
      };
      try {
        this.pool.dispatch(
          {
            path: `${this.basePath}/v1/${signal}`,
            method: 'POST',
            headers: { ...this.extraHeaders, 'content-type': OTLP_MEDIA_TYPES[encoding] },
            body: wholeBody(body),
            headersTimeout: this.timeoutMs,
            bodyTimeout: this.timeoutMs,
          },
          handler,
        );
      } catch {
        resolve({ kind: 'retry', happened: 'unreachable' });
      }
    });
  }

  /** Any HTTP answer means the collector is there (readiness, SPEC §8). */
  async reachable(timeoutMs = 1000): Promise<boolean> {
    try {
      const response = await this.pool.request({ path: this.basePath + '/', method: 'GET', headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
      await response.body.dump();
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
