import { Agent, createServer, IncomingHttpHeaders, request } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A pass-through in front of ClickHouse's HTTP interface that adds up what each answer's `X-ClickHouse-Summary` says
 * was read: the rows read by the queries of a client the bench cannot hook (the built service, whose ClickHouse client
 * runs in its reads' worker threads). The embedded engine keeps no `system.query_log` (chdb 3.4 has none, whatever
 * `log_queries` says), so the summary header, which test/chdb/http-interface.js computes from the engine's
 * SelectedRows as a server does, is the one count there is. One loopback hop more per query.
 */

export interface QueryRead {
  /** What the query was, from its SQL: `job run rows`, `trace spans`, `locate` or `other`. */
  readonly query: string;
  readonly readRows: number;
  /** The answer's bytes as they crossed the wire (compressed when the client asked for it). */
  readonly wireBytes: number;
}

export interface SummaryProxy {
  /** The proxy's URL, to give the client in place of ClickHouse's. */
  readonly url: string;
  /** Every query answered since the last call, and forgets them. */
  take(): QueryRead[];
  close(): Promise<void>;
}

/** Names the service's queries (src/reads/clickhouse-trace-reads.ts) by the tables and clauses only they use. */
function queryName(sql: string): string {
  if (/\bci_job_runs\b/.test(sql)) return 'job run rows';
  if (/LIMIT 1 BY SpanId/.test(sql)) return 'trace spans';
  if (/\bci_job_telemetry_traces\b/.test(sql)) return 'locate';
  return 'other';
}

export async function startSummaryProxy(target: string): Promise<SummaryProxy> {
  const upstream = new URL(target);
  const agent = new Agent({ keepAlive: true });
  let answered: QueryRead[] = [];
  const server = createServer((incoming, outgoing) => {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers: IncomingHttpHeaders = { ...incoming.headers, host: upstream.host };
      const forwarded = request({ agent, host: upstream.hostname, port: upstream.port, method: incoming.method, path: incoming.url, headers }, (answer) => {
        const summary = answer.headers['x-clickhouse-summary'];
        let wireBytes = 0;
        answer.on('data', (chunk: Buffer) => (wireBytes += chunk.length));
        answer.on('end', () => {
          if (typeof summary !== 'string') return;
          // The client sends the statement as the body (its parameters in the URL); a request body may be gzip, which it does not use for queries.
          const readRows = Number((JSON.parse(summary) as { read_rows?: string }).read_rows ?? 0);
          answered.push({ query: queryName(body.toString('utf8')), readRows, wireBytes });
        });
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(outgoing);
      });
      forwarded.on('error', (error) => {
        outgoing.writeHead(502, { 'content-type': 'text/plain' });
        outgoing.end(`summary proxy: ${error.message}`);
      });
      forwarded.end(body);
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    take: () => {
      const taken = answered;
      answered = [];
      return taken;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agent.destroy();
    },
  };
}
