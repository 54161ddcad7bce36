import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Ajv from 'ajv';
import { SignJWT } from 'jose';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MCP_PATH } from '../../src/mcp/mcp.route';
import { internalApiHeaders, ISSUER } from '../helpers/internal-api';
import { expectMatchesOpenApi } from '../helpers/openapi';
import { mcpClient, signingFetch } from '../helpers/mcp-client';
import { PipelineTrace } from '../helpers/pipeline-trace';
import { readsWorld, writeCollectorFiles } from '../helpers/reads-cases';
import { ServiceProcess, startService } from '../helpers/service';
import { ACROSS_PROJECT, acrossWorld } from '../suites/across-endpoints.suite';

/**
 * SPEC §14 as a client uses it: the built service on its embedded defaults, its collector files holding the read
 * tests' worlds (test/helpers/reads-cases.ts, test/suites/across-endpoints.suite.ts), asked over real HTTP by the
 * SDK's own Client and StreamableHTTPClientTransport. Every structured answer is checked against the output schema
 * the tool declares, and its first key against what the seeded pipelines hold.
 */

const TOOLS = [
  'pipeline_critical_path',
  'job_trace_summary',
  'compare_pipeline',
  'list_regressions',
  'list_waste',
  'runner_queue_health',
  'runner_what_if',
  'slowest_jobs',
];
const BUDGET = 8000;
/** A job of project 7 whose program exported many spans: its trace summary is longer than one answer. */
const LONG_JOB = 9501;
const LONG_JOB_SPANS = 400;

type ToolAnswer = { isError?: boolean; content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, unknown> };

describe('the MCP server (SPEC §14) over the built service', () => {
  let service: ServiceProcess;
  let client: Client;
  const across = acrossWorld();
  const reads = readsWorld();
  const window = { from: across.from, to: across.to };
  const long = new PipelineTrace(7, 950, reads.pipeline.createdAt).job({
    jobId: LONG_JOB,
    name: 'integration',
    queuedAt: 0,
    pickedUpAt: 2,
    finishedAt: 200,
    programSpans: Array.from({ length: LONG_JOB_SPANS }, (_, index) => ({ name: `rspec example ${index}`, attributes: { 'test.index': index } })),
  });
  const ajv = new Ajv({ strict: false });
  const outputSchemas = new Map<string, ReturnType<Ajv['compile']>>();

  const call = async (name: string, args: Record<string, unknown>): Promise<ToolAnswer> => (await client.callTool({ name, arguments: args })) as ToolAnswer;
  /** A tool's answer, checked against the output schema tools/list declared for it. */
  const answer = async (name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> => {
    const result = await call(name, args);
    expect([result.isError ?? false, result.content[0]?.text]).toEqual([false, expect.any(String)]);
    const validate = outputSchemas.get(name)!;
    if (!validate(result.structuredContent)) throw new Error(`${name}: ${ajv.errorsText(validate.errors)}`);
    expect(JSON.stringify(result.structuredContent).length).toBeLessThanOrEqual(BUDGET);
    return result.structuredContent!;
  };
  const refusal = async (name: string, args: Record<string, unknown>): Promise<string> => {
    const result = await call(name, args);
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toBeUndefined();
    return result.content[0].text!;
  };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the HTTP reads' answers, checked against openapi.yaml by their own tests
  const httpRead = async (path: string): Promise<any> => {
    const response = await fetch(`${service.url}/internal/ci/telemetry/projects/${path}`, {
      headers: await internalApiHeaders(service.secrets.internalApiSecret),
    });
    expect(response.status).toBe(200);
    return response.json();
  };

  beforeAll(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cjt-mcp-'));
    writeCollectorFiles(dataDir, [...across.exports, ...reads.exports, ...long.resourceSpans()]);
    service = await startService({ DATA_DIR: dataDir, LOG_LEVEL: 'info' });
    client = await mcpClient(service.url, service.secrets.internalApiSecret);
    for (const tool of (await client.listTools()).tools) outputSchemas.set(tool.name, ajv.compile(tool.outputSchema!));
  }, 60_000);

  afterAll(async () => {
    await client?.close();
    await service?.stop();
  });

  it('lists the eight tools, each read-only and declared so, with an input and an output schema', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name).sort()).toEqual([...TOOLS].sort());
    for (const tool of tools) {
      expect(tool.annotations).toMatchObject({ readOnlyHint: true, idempotentHint: true, openWorldHint: false });
      expect(tool.inputSchema).toMatchObject({ type: 'object', required: expect.arrayContaining(['project_id']) });
      expect(tool.outputSchema).toMatchObject({ type: 'object', properties: expect.any(Object) });
      expect(tool.description!.length).toBeGreaterThan(40);
    }
  });

  it("names test's +60 s restore_cache as the cause of pipeline 71020's slowdown, in the first key", async () => {
    const compared = await answer('compare_pipeline', { project_id: ACROSS_PROJECT, pipeline_id: ACROSS_PROJECT * 1000 + 20 });
    expect(Object.keys(compared)[0]).toBe('cause');
    expect(compared.cause).toEqual({ part: 'restore_cache', job: 'test', stage: 'test', seconds: 60 });
    expect(compared).toMatchObject({ pipelines_considered: expect.any(Number), baseline: { among: 20 } });
    // The same against a baseline named by the agent.
    const named = await answer('compare_pipeline', {
      project_id: ACROSS_PROJECT,
      pipeline_id: ACROSS_PROJECT * 1000 + 20,
      baseline_pipeline_id: ACROSS_PROJECT * 1000 + 2,
    });
    expect(named).toMatchObject({ cause: { part: 'restore_cache', job: 'test' }, baseline: { pipeline_id: ACROSS_PROJECT * 1000 + 2 } });
  });

  it("puts the critical path's largest part first: test's 60 s script, after its 38 s queue wait", async () => {
    const path = await answer('pipeline_critical_path', { project_id: 7, pipeline_id: 500 });
    expect(Object.keys(path)[0]).toBe('longest');
    expect(path.longest).toEqual({ job: 'test', job_id: 2, stage: 'test', part: 'step_script', seconds: 60 });
    expect(path).toMatchObject({ duration_seconds: 230, final: true, path_jobs: 4, next_cursor: null });
    expect((path.path as Array<{ job: string; parts: unknown[] }>)[0]).toMatchObject({
      job: 'test',
      parts: [
        { part: 'step_script', seconds: 60 },
        { part: 'queue', seconds: 38 },
        { part: 'delay', seconds: 1 },
      ],
    });
  });

  it("summarises a job's trace: its slowest runner stage first, never the raw spans", async () => {
    const job = await answer('job_trace_summary', { project_id: 7, job_id: 1 });
    expect(Object.keys(job)[0]).toBe('slowest_stage');
    expect(job).toMatchObject({ slowest_stage: { stage: 'step_script', seconds: 30 }, job: 'build', status: 'success', queue_seconds: 4, spans_total: 9 });
    expect((job.runner_stages as Array<{ stage: string }>).map((stage) => stage.stage)).toEqual([
      'step_script',
      'restore_cache',
      'get_sources',
      'prepare_executor',
      'upload_artifacts_on_success',
      'archive_cache',
    ]);
  });

  it("finds the step in test's restore_cache, the largest waste, the slowest queue, a what-if and the slowest job", async () => {
    const regressions = await answer('list_regressions', { project_id: ACROSS_PROJECT, ...window, ref: 'main' });
    expect(regressions.largest).toMatchObject({
      job: 'test',
      part: 'restore_cache',
      before_seconds: 10,
      after_seconds: 70,
      change_seconds: 60,
      first_ref: 'main',
    });
    expect(Math.abs((regressions.largest as { first_pipeline_id: number }).first_pipeline_id - (ACROSS_PROJECT * 1000 + 15))).toBeLessThanOrEqual(1);
    expect(regressions.pipelines_considered).toBe(30);

    // test's cache time (a 10 s restore, 70 s from the 16th pipeline on) outweighs every retry, flaky run and queue wait.
    const waste = await answer('list_waste', { project_id: ACROSS_PROJECT, ...window });
    const ledger = await httpRead(`${ACROSS_PROJECT}/waste?from=${encodeURIComponent(window.from)}&to=${encodeURIComponent(window.to)}`);
    const testCache = ledger.jobs.find((job: { name: string }) => job.name === 'test').cache_seconds.total;
    expect(waste.largest).toEqual({ job: 'test', kind: 'cache', seconds: testCache });
    expect((waste.jobs as Array<{ job: string; retry_seconds: number }>).find((job) => job.job === 'test')?.retry_seconds).toBe(41);

    const queue = await answer('runner_queue_health', { project_id: ACROSS_PROJECT, ...window });
    expect(queue.longest_wait).toMatchObject({ tags: 'docker,linux', p95_seconds: 3 });
    expect((queue.tag_sets as Array<{ tags: string }>).map((set) => set.tags)).toEqual(['docker,linux', 'deploy']);

    const whatIf = await answer('runner_what_if', { project_id: ACROSS_PROJECT, tags: 'docker, linux', runners: 2, ...window });
    expect(whatIf.effect).toMatchObject({ tags: 'docker,linux', runners_added: 2 });
    const effect = whatIf.effect as { queue_p95_before_seconds: number; queue_p95_after_seconds: number };
    expect(effect.queue_p95_after_seconds).toBeLessThanOrEqual(effect.queue_p95_before_seconds);

    const slowest = await answer('slowest_jobs', { project_id: ACROSS_PROJECT, ...window });
    expect((slowest.slowest as { job: string }).job).toBe('test');
    expect((slowest.jobs as Array<{ job: string }>).map((job) => job.job).sort()).toEqual(['build', 'deploy', 'lint', 'test']);
  });

  it("answers not_found for another project's pipeline or job, exactly as for one that does not exist", async () => {
    const refusals = await Promise.all([
      refusal('compare_pipeline', { project_id: ACROSS_PROJECT, pipeline_id: 72 * 1000 + 20 }),
      refusal('pipeline_critical_path', { project_id: 7, pipeline_id: 800 }),
      refusal('pipeline_critical_path', { project_id: 7, pipeline_id: 123456 }),
      refusal('job_trace_summary', { project_id: 8, job_id: 1 }),
      refusal('job_trace_summary', { project_id: 7, job_id: 81 }),
    ]);
    expect(refusals.map((text) => text.split(':')[0])).toEqual(['not_found', 'not_found', 'not_found', 'not_found', 'not_found']);
    expect(refusals[1]).toBe(refusals[2]);
    // Nothing of project 72 is counted in project 71's answers: its test got 600 s slower.
    const regressions = await answer('list_regressions', { project_id: ACROSS_PROJECT, ...window });
    expect((regressions.regressions as Array<{ after_seconds: number }>).every((point) => point.after_seconds < 600)).toBe(true);
  });

  it('refuses bad arguments naming the argument, a long window as window_too_long, and a question with no answer as unanswerable', async () => {
    const invalid: Array<[string, Record<string, unknown>, string]> = [
      ['pipeline_critical_path', { project_id: '7', pipeline_id: 500 }, 'project_id'],
      ['pipeline_critical_path', { project_id: 7, pipeline_id: 0 }, 'pipeline_id'],
      ['job_trace_summary', { project_id: 7 }, 'job_id'],
      ['compare_pipeline', { project_id: 71, pipeline_id: 71020, baseline_pipeline_id: -1 }, 'baseline_pipeline_id'],
      ['list_regressions', { project_id: 71, from: 'yesterday' }, 'from'],
      ['slowest_jobs', { project_id: 71, ref: '' }, 'ref'],
      ['runner_what_if', { project_id: 71, tags: 'docker', runners: 2.5 }, 'runners'],
      ['runner_what_if', { project_id: 71, tags: 'docker', runners: 5000 }, 'runners'],
      ['list_waste', { project_id: 71, cursor: 'not-a-cursor' }, 'cursor'],
    ];
    for (const [name, args, field] of invalid) expect(await refusal(name, args)).toMatch(new RegExp(`^invalid_argument: ${field}: `));
    expect(await refusal('list_waste', { project_id: 71, from: '2026-01-01T00:00:00Z', to: '2026-03-01T00:00:00Z' })).toMatch(/^window_too_long: /);
    expect(await refusal('compare_pipeline', { project_id: ACROSS_PROJECT, pipeline_id: ACROSS_PROJECT * 1000 })).toMatch(/^unanswerable: .*baseline/);
  });

  it('pages a long answer with its cursor: every span once, in order, each page within the budget, the cursor of no other question', async () => {
    const pages: Array<Record<string, unknown>> = [];
    let cursor: string | undefined;
    do {
      const page = await answer('job_trace_summary', { project_id: 7, job_id: LONG_JOB, ...(cursor === undefined ? {} : { cursor }) });
      pages.push(page);
      cursor = (page.next_cursor as string | null) ?? undefined;
    } while (cursor !== undefined && pages.length < 100);
    expect(pages.length).toBeGreaterThan(2);
    // The finding stays first on every page.
    expect(new Set(pages.map((page) => JSON.stringify(page.slowest_stage))).size).toBe(1);
    const listed = pages.flatMap((page) => (page.spans as Array<{ span_id: string }>).map((span) => span.span_id));
    const trace = await httpRead(`7/jobs/${LONG_JOB}/trace`);
    const all = trace.trace.resourceSpans.flatMap((resource: { scopeSpans: Array<{ spans: Array<{ spanId: string }> }> }) =>
      resource.scopeSpans.flatMap((scope) => scope.spans.map((span) => span.spanId)),
    );
    expect(all.length).toBeGreaterThan(LONG_JOB_SPANS);
    expect(listed.length).toBe(new Set(listed).size);
    expect([...listed].sort()).toEqual([...all].sort());

    const first = await answer('job_trace_summary', { project_id: 7, job_id: LONG_JOB });
    expect(await refusal('job_trace_summary', { project_id: 7, job_id: 1, cursor: first.next_cursor })).toMatch(
      /^invalid_argument: cursor: .*another question/,
    );
  });

  describe('who may ask (SPEC §3)', () => {
    const initialize = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } },
    };
    const post = (headers: Record<string, string>) =>
      fetch(`${service.url}${MCP_PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify(initialize),
      });

    it('answers 401 with a JSON error without a token, or with a forged, stale or malformed one, in either header', async () => {
      const secret = service.secrets.internalApiSecret;
      const forged = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setIssuer(ISSUER)
        .setIssuedAt()
        .setExpirationTime('1m')
        .sign(Buffer.alloc(32, 9));
      const stale = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setIssuer(ISSUER)
        .setIssuedAt(Math.floor(Date.now() / 1000) - 600)
        .sign(secret);
      const refused: Array<Record<string, string>> = [
        {},
        { authorization: `Bearer ${forged}` },
        { authorization: `Bearer ${stale}` },
        { authorization: 'Basic Z2l0bGFiOnNlY3JldA==' },
        { 'gitlab-ci-telemetry-api-request': forged },
        { 'gitlab-ci-telemetry-api-request': 'not a jwt' },
      ];
      for (const headers of refused) {
        const response = await post(headers);
        const body = (await response.json()) as { error: unknown };
        expect([response.status, typeof body.error]).toEqual([401, 'string']);
        expectMatchesOpenApi(MCP_PATH, 'POST', 401, response.headers.get('content-type')!, body);
      }
      await expect(mcpClient(service.url, Buffer.alloc(32, 9))).rejects.toThrow();
    });

    it('accepts the JWT as Authorization: Bearer and in the internal API header alike', async () => {
      for (const place of ['bearer', 'header'] as const) {
        const response = await signingFetch(service.secrets.internalApiSecret, place)(`${service.url}${MCP_PATH}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify(initialize),
        });
        const body = (await response.json()) as { result: { serverInfo: { name: string } } };
        expect([response.status, body.result.serverInfo.name]).toEqual([200, 'ci-job-telemetry']);
        expectMatchesOpenApi(MCP_PATH, 'POST', 200, response.headers.get('content-type')!, body);
      }
      const viaHeader = await mcpClient(service.url, service.secrets.internalApiSecret, 'header');
      expect((await viaHeader.listTools()).tools).toHaveLength(TOOLS.length);
      await viaHeader.close();
    });

    it('answers GET and DELETE 405: the server is stateless, there is no stream to open nor session to end', async () => {
      for (const method of ['GET', 'DELETE']) {
        const response = await signingFetch(service.secrets.internalApiSecret)(`${service.url}${MCP_PATH}`, {
          method,
          headers: { accept: 'text/event-stream' },
        });
        expect([response.status, response.headers.get('allow')]).toEqual([405, 'POST']);
        expectMatchesOpenApi(MCP_PATH, method, 405, response.headers.get('content-type')!, await response.json());
      }
    });

    it("answers what is not JSON-RPC in JSON-RPC's terms, as openapi.yaml has it, and a notification 202", async () => {
      const send = (body: string, headers: Record<string, string> = {}) =>
        signingFetch(service.secrets.internalApiSecret)(`${service.url}${MCP_PATH}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
          body,
        });
      const cases: Array<[Response, number, number]> = [
        [await send('{"jsonrpc": "2.0", "id": 1, "method": '), 400, -32700],
        [await send(JSON.stringify(initialize), { accept: 'application/json' }), 406, -32000],
        [await send(JSON.stringify(initialize), { 'content-type': 'text/plain' }), 415, -32000],
      ];
      for (const [response, status, code] of cases) {
        const body = (await response.json()) as { error: { code: number } };
        expect([response.status, body.error.code]).toEqual([status, code]);
        expectMatchesOpenApi(MCP_PATH, 'POST', status, response.headers.get('content-type')!, body);
      }
      const notification = await send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      expect([notification.status, await notification.text()]).toEqual([202, '']);
      const call = await send(
        JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: { name: 'compare_pipeline', arguments: { project_id: 71, pipeline_id: 71020 } },
        }),
      );
      const answered = (await call.json()) as { result: { structuredContent: { cause: unknown } } };
      expect(answered.result.structuredContent.cause).toMatchObject({ part: 'restore_cache', job: 'test' });
      expectMatchesOpenApi(MCP_PATH, 'POST', 200, call.headers.get('content-type')!, answered);
    });

    it('never writes a token to its log', async () => {
      await post({ authorization: 'Bearer not.a.jwt-with-a-recognisable-marker' });
      expect(service.output()).not.toContain('recognisable-marker');
      expect(service.output()).toContain('internal API caller refused');
    });
  });
});
