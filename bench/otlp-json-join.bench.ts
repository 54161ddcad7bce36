/**
 * Issue 29, "JSON exports: join them as JSON, or send them alone; measure and say." N OTLP/JSON traces exports,
 * each exactly as the gateway forwards it (enforceExport's output for a 100-span CI-job batch), arrive together
 * and go to a collector through the gateway's upstream client (HttpCollectorClient, pooled keep-alive):
 *   json alone      N requests, one per export: what the coalescing client does with JSON today,
 *   json spliced    one request: the bodies' `resourceSpans` arrays spliced as bytes (the walker writes every traces
 *                   body as `{"resourceSpans":[…]}`, so the join is a copy, no parse),
 *   json reparsed   one request: each body parsed and the arrays joined and written again (what joining JSON costs
 *                   when the joiner cannot rely on the bodies' shape),
 *   protobuf alone, protobuf joined   the same spans in protobuf, N requests against one concatenated (what the
 *                   coalescing client does with protobuf): the reference for what one saved request is worth.
 * Per export: CPU of this process (the gateway's side: joining plus sending) and of the sink (the collector's side:
 * receiving), bytes upstream, and exports/s. The sink is the otlp-gateway bench's (reads the body, answers 200,
 * decodes nothing), in its own process.
 *
 * Run: npm run bench -- otlp-json-join [options]
 * Options: --exports 2,8,16 (exports arriving together)  --spans 100  --attributes 10  --rounds 3  --round-seconds 2
 *          --in-flight 2 (groups sent at once, as a coalescing client has one request out and one gathering)
 * Rounds alternate the approaches (order rotated each round) and medians are compared: ratios, not absolute
 * figures, mean something on a shared machine. Exits 1 if any request was not accepted or a joined body does not
 * carry every export's spans.
 */
import { spawn } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { HttpCollectorClient } from '../src/collector/http-collector-client';
import { OtlpEncoding } from '../src/otlp/otlp-encoding';
import { enforceExport } from '../src/otlp-gateway/export-policy/enforce-export';
import { runBench } from './lib/bench-env';
import { ciJobSpanBatch } from './lib/otlp-batch';
import { median } from './lib/percentiles';
import { procCpuMicros } from './lib/proc-cpu';
import { printTable } from './lib/table';
import { otlpTypes, traceExport } from './otlp-gateway.payload';
import type { SinkStats } from './otlp-gateway.sink';

const { values: args } = parseArgs({
  options: {
    exports: { type: 'string', default: '2,8,16' },
    spans: { type: 'string', default: '100' },
    attributes: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    'round-seconds': { type: 'string', default: '2' },
    'in-flight': { type: 'string', default: '2' },
  },
});
const groupSizes = args.exports.split(',').map(Number);
const spans = Number(args.spans);
const attributesPerSpan = Number(args.attributes);
const rounds = Number(args.rounds);
const roundMs = Number(args['round-seconds']) * 1000;
const inFlight = Number(args['in-flight']);
if (!groupSizes.every((n) => Number.isInteger(n) && n >= 1) || !(rounds >= 1) || !(roundMs > 0) || !(inFlight >= 1)) {
  throw new Error('usage: --exports <n,n,…> --spans <n> --rounds <n> --round-seconds <s> --in-flight <n>');
}

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const GRANT = { jobId: 123456789, projectId: 278964, pipelineId: 1500000001, runnerId: 42, traceId: TRACE_ID };
const JSON_HEAD = Buffer.from('{"resourceSpans":[');
const JSON_TAIL = Buffer.from(']}');
const COMMA = Buffer.from(',');

type Approach = 'json alone' | 'json spliced' | 'json reparsed' | 'protobuf alone' | 'protobuf joined';
const APPROACHES: readonly Approach[] = ['json alone', 'json spliced', 'json reparsed', 'protobuf alone', 'protobuf joined'];

/** The arrays of bodies written as `{"resourceSpans":[…]}`, spliced into one such body (empty arrays skipped). */
function spliceJson(bodies: readonly Buffer[]): Buffer {
  const parts: Buffer[] = [JSON_HEAD];
  for (const body of bodies) {
    if (!body.subarray(0, JSON_HEAD.length).equals(JSON_HEAD) || !body.subarray(body.length - JSON_TAIL.length).equals(JSON_TAIL)) {
      throw new Error('not a body the walker wrote');
    }
    const inner = body.subarray(JSON_HEAD.length, body.length - JSON_TAIL.length);
    if (inner.length === 0) continue;
    if (parts.length > 1) parts.push(COMMA);
    parts.push(inner);
  }
  parts.push(JSON_TAIL);
  return Buffer.concat(parts);
}

function reparseJson(bodies: readonly Buffer[]): Buffer {
  const resourceSpans = bodies.flatMap((body) => (JSON.parse(body.toString('utf8')) as { resourceSpans: unknown[] }).resourceSpans);
  return Buffer.from(JSON.stringify({ resourceSpans }));
}

function spansIn(body: Buffer): number {
  const request = JSON.parse(body.toString('utf8')) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: unknown[] }> }> };
  return request.resourceSpans.reduce((sum, resource) => sum + resource.scopeSpans.reduce((inner, scope) => inner + scope.spans.length, 0), 0);
}

async function startSink(): Promise<{ origin: string; pid: number; stats(): Promise<SinkStats>; stop(): void }> {
  const child = spawn(process.execPath, [join(__dirname, 'otlp-gateway.sink.js')], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (message: { port: number }) => resolve(message.port));
    child.once('exit', (code) => reject(new Error(`sink exited (${code})`)));
  });
  const origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    pid: child.pid!,
    stats: async () => (await (await fetch(`${origin}/-/stats`)).json()) as SinkStats,
    stop: () => child.kill('SIGTERM'),
  };
}

interface RoundStats {
  readonly exportsPerSecond: number;
  readonly clientCpuPerExport: number;
  readonly sinkCpuPerExport: number;
  readonly bytesPerExport: number;
  readonly requestsPerExport: number;
}

async function main(): Promise<void> {
  const failures: string[] = [];
  const batch = ciJobSpanBatch({ traceId: TRACE_ID, spans, attributesPerSpan });
  // Exactly what the gateway forwards: the export enforced by the walker (identity stamped, spans re-serialized).
  const jsonBody = enforceExport('traces', 'json', Buffer.from(JSON.stringify(batch)), GRANT, 1_000_000).body;
  const protobufBody = enforceExport('traces', 'protobuf', traceExport(otlpTypes(), { traceId: TRACE_ID, spans, attributesPerSpan }), GRANT, 1_000_000).body;

  const sink = await startSink();
  const client = new HttpCollectorClient(sink.origin, {}, 10_000);
  try {
    console.log(
      `OTLP/JSON join: N traces exports arriving together, sent alone or joined (ratios are the result; absolute numbers are noise)\n` +
        `load average ${loadavg()
          .map((load) => load.toFixed(1))
          .join(' ')} at start · export ${spans} spans × ${attributesPerSpan} attributes: JSON ${(jsonBody.length / 1024).toFixed(1)} KiB, protobuf ` +
        `${(protobufBody.length / 1024).toFixed(1)} KiB (as the gateway forwards them) · ${rounds}×${roundMs / 1000} s alternating rounds · ` +
        `${inFlight} groups in flight · ${cpus().length} CPUs`,
    );

    const send = async (approach: Approach, n: number): Promise<void> => {
      const bodies = Array.from({ length: n }, () => (approach.startsWith('json') ? jsonBody : protobufBody));
      const encoding: OtlpEncoding = approach.startsWith('json') ? 'json' : 'protobuf';
      let requests: Buffer[];
      if (approach === 'json spliced') requests = [spliceJson(bodies)];
      else if (approach === 'json reparsed') requests = [reparseJson(bodies)];
      else if (approach === 'protobuf joined') requests = [Buffer.concat(bodies)];
      else requests = bodies;
      const results = await Promise.all(requests.map((body) => client.export('traces', encoding, body)));
      for (const result of results) if (result.kind !== 'accepted') throw new Error(`${approach}: the sink answered ${JSON.stringify(result)}`);
    };

    // Once, outside the rounds: a joined body is one valid request carrying every export's spans.
    for (const n of groupSizes) {
      const bodies = Array.from({ length: n }, () => jsonBody);
      for (const [name, joined] of [
        ['spliced', spliceJson(bodies)],
        ['reparsed', reparseJson(bodies)],
      ] as const) {
        if (spansIn(joined) !== n * spans) failures.push(`json ${name} of ${n}: ${spansIn(joined)} spans, not ${n * spans}`);
      }
    }

    const round = async (approach: Approach, n: number, ms: number): Promise<RoundStats> => {
      const sinkBefore = await sink.stats();
      const sinkCpuBefore = procCpuMicros(sink.pid);
      const cpuBefore = process.cpuUsage();
      const started = performance.now();
      let groups = 0;
      await Promise.all(
        Array.from({ length: inFlight }, async () => {
          while (performance.now() - started < ms) {
            await send(approach, n);
            groups++;
          }
        }),
      );
      const elapsed = performance.now() - started;
      const cpu = process.cpuUsage(cpuBefore);
      const sinkCpu = procCpuMicros(sink.pid) - sinkCpuBefore;
      const sinkAfter = await sink.stats();
      const exports = groups * n;
      return {
        exportsPerSecond: exports / (elapsed / 1000),
        clientCpuPerExport: (cpu.user + cpu.system) / exports,
        sinkCpuPerExport: sinkCpu / exports,
        bytesPerExport: (sinkAfter.bytes - sinkBefore.bytes) / exports,
        requestsPerExport: (sinkAfter.requests - sinkBefore.requests) / exports,
      };
    };

    const rows: string[][] = [
      ['N', 'approach', 'exports/s by round', 'median', 'µs CPU/export: gateway side', 'sink', 'total', 'B/export upstream', 'requests/export'],
    ];
    const verdicts: string[] = [];
    for (const n of groupSizes) {
      for (const approach of APPROACHES) await round(approach, n, Math.min(500, roundMs)); // warm-up
      const stats = new Map<Approach, RoundStats[]>(APPROACHES.map((approach) => [approach, []]));
      for (let r = 0; r < rounds; r++) {
        const order = APPROACHES.map((_, i) => APPROACHES[(i + r) % APPROACHES.length]);
        for (const approach of order) stats.get(approach)!.push(await round(approach, n, roundMs));
      }
      const med = (approach: Approach, pick: (s: RoundStats) => number) => median(stats.get(approach)!.map(pick));
      const total = (s: RoundStats) => s.clientCpuPerExport + s.sinkCpuPerExport;
      for (const approach of APPROACHES) {
        rows.push([
          String(n),
          approach,
          stats
            .get(approach)!
            .map((s) => s.exportsPerSecond.toFixed(0))
            .join(' '),
          med(approach, (s) => s.exportsPerSecond).toFixed(0),
          med(approach, (s) => s.clientCpuPerExport).toFixed(0),
          med(approach, (s) => s.sinkCpuPerExport).toFixed(0),
          med(approach, total).toFixed(0),
          med(approach, (s) => s.bytesPerExport).toFixed(0),
          med(approach, (s) => s.requestsPerExport).toFixed(3),
        ]);
      }
      const cpuRatio = (a: Approach, b: Approach, pick: (s: RoundStats) => number) => (med(a, pick) / med(b, pick)).toFixed(2);
      verdicts.push(
        `N=${n}: CPU per export, gateway side (total with the sink): json spliced/json alone ×${cpuRatio('json spliced', 'json alone', (s) => s.clientCpuPerExport)} ` +
          `(×${cpuRatio('json spliced', 'json alone', total)}), json reparsed/json alone ×${cpuRatio('json reparsed', 'json alone', (s) => s.clientCpuPerExport)} ` +
          `(×${cpuRatio('json reparsed', 'json alone', total)}), protobuf joined/protobuf alone ×${cpuRatio('protobuf joined', 'protobuf alone', (s) => s.clientCpuPerExport)} ` +
          `(×${cpuRatio('protobuf joined', 'protobuf alone', total)}); exports/s json spliced/json alone ×${cpuRatio('json spliced', 'json alone', (s) => s.exportsPerSecond)}, ` +
          `json reparsed/json alone ×${cpuRatio('json reparsed', 'json alone', (s) => s.exportsPerSecond)}`,
      );
    }
    console.log('');
    printTable(rows);
    console.log('');
    for (const verdict of verdicts) console.log(verdict);
  } catch (error) {
    failures.push(String((error as Error).stack ?? error));
  } finally {
    await client.close();
    sink.stop();
  }
  if (failures.length > 0) {
    console.error(`\nFAILED:\n  ${failures.join('\n  ')}`);
    process.exitCode = 1;
  }
}

runBench(main);
