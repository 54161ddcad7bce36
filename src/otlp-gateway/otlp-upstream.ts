import { errors, Pool } from 'undici';

export interface UpstreamAnswer {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly retryAfter: string | undefined;
  readonly body: Buffer;
}

/** The collector could not give an answer at all: no connection, or no answer in time. */
export class UpstreamFailure extends Error {
  constructor(
    readonly kind: 'unreachable' | 'timeout',
    cause: unknown,
  ) {
    super(`collector ${kind}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

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
export class OtlpUpstream {
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

  async send(path: string, contentType: string, body: Buffer): Promise<UpstreamAnswer> {
    try {
      const response = await this.pool.request({
        path: this.basePath + path,
        method: 'POST',
        headers: { ...this.extraHeaders, 'content-type': contentType },
        body,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      const answer = Buffer.from(await response.body.arrayBuffer());
      const header = (name: string) => {
        const value = response.headers[name];
        return Array.isArray(value) ? value[0] : value;
      };
      return { status: response.statusCode, contentType: header('content-type'), retryAfter: header('retry-after'), body: answer };
    } catch (error) {
      const timedOut = error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError;
      throw new UpstreamFailure(timedOut ? 'timeout' : 'unreachable', error);
    }
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
