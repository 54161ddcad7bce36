/**
 * An MCP tool call against the HTTP read it wraps (SPEC §14, issue 59's target: a tool call's p95 within 1.5× the
 * read's), on the trace-reads bench data: the built service on its embedded files holding one pipeline of 100 jobs ×
 * 1,000 spans their programs exported (test/suites/large-pipeline.ts, as bench/trace-reads.pickups.ts writes it).
 *
 * Two pairs, each the same question both ways, in the same run, interleaved call by call (the order swapped every
 * call, so neither side always goes first after a pause): the pipeline's critical path (GET …/critical_path against
 * `pipeline_critical_path`) and a 1,000-span job's trace (GET …/jobs/{id}/trace against `job_trace_summary`, which
 * reads the same trace and summarises it). Both sides over one keep-alive connection each, with the same JWT header;
 * a tool call is one JSON-RPC POST as an MCP client sends it (no initialize: the server is stateless), so the figure is
 * the server's cost and the wire's, not a client library's. Printed: p50/p95 of each side and the p95 ratio.
 *
 *   npm run bench -- mcp                  # 100 jobs × 1,000 spans, 200 calls a side a read
 *   npm run bench -- mcp --smoke          # 5 jobs × 50 spans, 5 calls: that it runs
 *   npm run bench -- mcp --service-root ../main --calls 100
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { localCollectorDirectory, signalFile } from '../src/collector/collector-files';
import { MCP_PATH } from '../src/mcp/mcp.route';
import { startService } from '../test/helpers/service';
import { largePipeline } from '../test/suites/large-pipeline';
import { repoRoot } from '../simulator/repo-root';
import { rollingAuthHeader, runBench } from './lib/bench-env';
import { percentile } from './lib/percentiles';
import { printTable } from './lib/table';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    'service-root': { type: 'string' },
    calls: { type: 'string' },
    jobs: { type: 'string' },
    'spans-per-job': { type: 'string' },
  },
});

const PROJECT = 56;
const PIPELINE = 5600;
const TARGET_RATIO = 1.5;

interface Pair {
  readonly read: string;
  readonly httpPath: string;
  readonly tool: string;
  readonly arguments: Record<string, number>;
}

interface Timed {
  readonly ms: number;
  readonly ok: boolean;
}

async function main(): Promise<void> {
  const smoke = args.smoke;
  const root = args['service-root'] ?? repoRoot();
  const jobs = Number(args.jobs ?? (smoke ? 5 : 100));
  const spansPerJob = Number(args['spans-per-job'] ?? (smoke ? 50 : 1000));
  const calls = Number(args.calls ?? (smoke ? 5 : 200));
  const warmup = smoke ? 1 : 10;

  const dataDir = mkdtempSync(join(tmpdir(), 'cjt-mcp-bench-'));
  const logDir = mkdtempSync(join(tmpdir(), 'cjt-mcp-bench-log-'));
  mkdirSync(localCollectorDirectory(dataDir), { recursive: true });
  writeFileSync(
    signalFile(localCollectorDirectory(dataDir), 'traces'),
    largePipeline(PROJECT, PIPELINE, jobs, spansPerJob)
      .resourceSpans()
      .map((resourceSpans) => `${JSON.stringify({ resourceSpans: [resourceSpans] })}\n`)
      .join(''),
  );
  console.log(
    `one pipeline of ${jobs} jobs × ${spansPerJob} spans on the embedded files; ${calls} calls a side a read, interleaved, after ${warmup} to warm up`,
  );

  const service = await startService({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' }, { root, logFile: join(logDir, 'service.log') });
  const auth = await rollingAuthHeader(service.secrets.internalApiSecret);
  const http = new Pool(service.url, { connections: 1 });
  const mcp = new Pool(service.url, { connections: 1 });
  try {
    const job = PIPELINE * 1000;
    const pairs: Pair[] = [
      {
        read: 'critical path',
        httpPath: `/internal/ci/telemetry/projects/${PROJECT}/pipelines/${PIPELINE}/critical_path`,
        tool: 'pipeline_critical_path',
        arguments: { project_id: PROJECT, pipeline_id: PIPELINE },
      },
      {
        read: `a job's trace (${spansPerJob + 9} spans)`,
        httpPath: `/internal/ci/telemetry/projects/${PROJECT}/jobs/${job}/trace`,
        tool: 'job_trace_summary',
        arguments: { project_id: PROJECT, job_id: job },
      },
    ];
    const rows = [['read', 'HTTP p50', 'HTTP p95', 'MCP p50', 'MCP p95', 'p95 MCP/HTTP', `target ≤ ${TARGET_RATIO}×`]];
    let id = 0;
    for (const pair of pairs) {
      const viaHttp = async (): Promise<Timed> => {
        const started = performance.now();
        const answer = await http.request({ method: 'GET', path: pair.httpPath, headers: auth.current() });
        await answer.body.arrayBuffer();
        return { ms: performance.now() - started, ok: answer.statusCode === 200 };
      };
      const viaMcp = async (): Promise<Timed> => {
        const started = performance.now();
        const answer = await mcp.request({
          method: 'POST',
          path: MCP_PATH,
          headers: { ...auth.current(), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: pair.tool, arguments: pair.arguments } }),
        });
        const body = (await answer.body.json()) as { result?: { isError?: boolean } };
        return { ms: performance.now() - started, ok: answer.statusCode === 200 && body.result !== undefined && body.result.isError !== true };
      };
      for (let round = 0; round < warmup; round += 1) await Promise.all([viaHttp(), viaMcp()].map((timed) => timed.then(check)));
      const httpMs: number[] = [];
      const mcpMs: number[] = [];
      for (let round = 0; round < calls; round += 1) {
        // One at a time, the order swapped every call: a tool call never waits behind the read it is measured against.
        if (round % 2 === 0) {
          httpMs.push(check(await viaHttp()));
          mcpMs.push(check(await viaMcp()));
        } else {
          mcpMs.push(check(await viaMcp()));
          httpMs.push(check(await viaHttp()));
        }
      }
      const ratio = percentile(mcpMs, 95) / percentile(httpMs, 95);
      rows.push([
        pair.read,
        ms(percentile(httpMs, 50)),
        ms(percentile(httpMs, 95)),
        ms(percentile(mcpMs, 50)),
        ms(percentile(mcpMs, 95)),
        `×${ratio.toFixed(2)}`,
        smoke ? 'not judged (smoke)' : ratio <= TARGET_RATIO ? 'met' : 'missed',
      ]);
    }
    printTable(rows);
  } finally {
    auth.stop();
    await Promise.all([http.close(), mcp.close()]);
    await service.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function check(timed: Timed): number {
  if (!timed.ok) throw new Error('a call was not answered 200 with an answer (see the service log)');
  return timed.ms;
}

const ms = (value: number) => `${value.toFixed(1)} ms`;

runBench(main);
