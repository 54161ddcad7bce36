import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BUILD_STAGES, exportJobAsRunner } from '../../simulator/stock-runner';
import { localCollectorDirectory, previousFile, signalFile } from '../../src/collector/collector-files';
import { PickedUpJob, pickUpPipelineJob } from '../helpers/ci-pipeline';
import { waitFor } from '../helpers/ports';
import { ServiceProcess, startService } from '../helpers/service';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const MAX_BYTES = 16 * 1024;

type Json = Record<string, unknown>;

const linesOf = (path: string): Json[] =>
  existsSync(path)
    ? readFileSync(path, 'utf8')
        .split('\n')
        .filter((line) => line.length > 0)
        .map((line) => JSON.parse(line) as Json)
    : [];

/** Spans of OTLP/JSON trace export lines, with their attributes as a plain map. */
function spansOf(requests: Json[]): Array<Json & { attributes: Record<string, unknown> }> {
  return requests.flatMap((request) =>
    (request.resourceSpans as Json[]).flatMap((resourceSpans) =>
      (resourceSpans.scopeSpans as Json[]).flatMap((scopeSpans) =>
        (scopeSpans.spans as Json[]).map((span) => ({
          ...span,
          attributes: Object.fromEntries(((span.attributes ?? []) as Json[]).map((entry) => [entry.key, Object.values(entry.value as Json)[0]])),
        })),
      ),
    ),
  );
}

/** `npm run -s trace [id]` in `cwd`: the built printer (the tests run after `npm run build`). */
function showTrace(cwd: string, ...args: string[]) {
  return run(process.execPath, [join(ROOT, 'dist', 'cli', 'show-trace.js'), ...args], { cwd, env: { PATH: process.env.PATH }, timeout: 30_000 });
}

/**
 * Issue 20: on its embedded defaults (no OTLP_UPSTREAM_URL), the service keeps what runners export under
 * `.data/otlp/` of its working directory, as the Collector's file exporter would, and `npm run -s trace`
 * shows it.
 */
describe('the embedded default collector (no OTLP_UPSTREAM_URL)', () => {
  let cwd: string;
  let service: ServiceProcess;
  let job: PickedUpJob;
  const otlpDir = () => localCollectorDirectory(join(cwd, '.data'));

  beforeAll(async () => {
    cwd = realpathSync(mkdtempSync(join(tmpdir(), 'cjt-local-collector-')));
    service = await startService({ LOCAL_COLLECTOR_MAX_BYTES: String(MAX_BYTES) }, { cwd });
    job = await pickUpPipelineJob(service, { jobId: 2001, projectId: 7, pipelineId: 600, queuedAt: new Date(Date.now() - 75_000) });
    await exportJobAsRunner(job.tracing, {
      jobId: job.jobId,
      projectId: 7,
      runnerId: 17,
      pipelineId: job.pipelineVariable,
      pipelineSource: 'push',
      executor: 'shell',
      status: 'success',
      startedAt: new Date(),
      stageSeconds: { prepare_executor: 2, get_sources: 3, restore_cache: 1, step_script: 30, after_script: 1, archive_cache: 1, upload_artifacts: 2 },
    });
    // The control plane's job span goes out through the outbox after the export is answered: wait for it, so
    // every test below reads the trace settled, not whatever the outbox had delivered by then.
    await waitFor('the job span in traces.jsonl', async () => {
      const spans = spansOf(linesOf(signalFile(otlpDir(), 'traces')));
      return spans.some((span) => span.traceId === job.tracing.trace_id && span.spanId === job.tracing.span_parent_id) ? true : undefined;
    });
  }, 120_000);

  afterAll(async () => {
    await service?.stop();
    rmSync(cwd, { recursive: true, force: true });
  });

  it('says at start where it keeps exports, in one line', async () => {
    // Log lines leave in batches, at most LOG_FLUSH_INTERVAL_MS after they are written: on a loaded machine the
    // pickup and export above can be done before the first batch is.
    const lines = await waitFor('the start-up line naming OTLP_UPSTREAM_URL', async () => {
      const found = service
        .output()
        .split('\n')
        .filter((line) => line.includes('OTLP_UPSTREAM_URL'));
      return found.length > 0 ? found : undefined;
    });
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0])).toMatchObject({ level: 30, directory: otlpDir(), msg: expect.stringContaining(`exports are kept in ${otlpDir()}`) });
  });

  it("keeps the runner's export as OTLP/JSON lines: its trace, the job_execution span under the payload's parent, the gateway's identity", () => {
    const spans = spansOf(linesOf(signalFile(otlpDir(), 'traces'))).filter((span) => span.traceId === job.tracing.trace_id);
    const jobExecution = spans.find((span) => span.name === 'job_execution');
    expect(jobExecution).toMatchObject({
      parentSpanId: job.tracing.span_parent_id,
      spanId: expect.stringMatching(/^[0-9a-f]{16}$/),
      startTimeUnixNano: expect.stringMatching(/^\d{19}$/),
    });
    // Stamped by the gateway from the grant, in the OTLP/JSON mapping (int64 as a decimal string).
    expect(jobExecution!.attributes).toMatchObject({ 'ci.job.id': '2001', 'ci.project.id': '7', 'ci.pipeline.id': '600', 'ci.runner.id': '17' });
    const stages = spans.filter((span) => span.parentSpanId === jobExecution!.spanId).map((span) => span.name);
    expect(stages.sort()).toEqual([...BUILD_STAGES].sort());
  });

  it('prints that trace as a waterfall with `npm run -s trace`, and lists the traces it holds when asked for another', async () => {
    const { stdout } = await showTrace(cwd);
    expect(stdout.split('\n')[0]).toMatch(new RegExp(`^trace ${job.tracing.trace_id}: \\d+ spans, `));
    const rows = stdout.split('\n').filter((line) => /\|[ █]{40}\|/.test(line));
    const jobExecution = rows.findIndex((row) => /^ *job_execution {2}runner 17 shell/.test(row));
    expect(jobExecution).toBeGreaterThanOrEqual(0);
    const depth = (row: string) => /^ */.exec(row)![0].length;
    const stageRows = rows.slice(jobExecution + 1, jobExecution + 1 + BUILD_STAGES.length);
    expect(stageRows.map((row) => row.trim().split(/\s+/)[0])).toEqual([...BUILD_STAGES]);
    for (const row of stageRows) expect(depth(row)).toBe(depth(rows[jobExecution]) + 2);
    expect(stageRows.find((row) => row.trim().startsWith('step_script'))).toMatch(/\| +30\.0s$/);

    expect((await showTrace(cwd, job.tracing.trace_id)).stdout).toBe(stdout);
    const missing = await showTrace(cwd, 'f'.repeat(32)).then(
      () => undefined,
      (error: { code: number; stderr: string }) => error,
    );
    expect(missing?.code).toBe(1);
    expect(missing?.stderr).toContain(`no trace ${'f'.repeat(32)} in ${signalFile(otlpDir(), 'traces')}; it holds:`);
    expect(missing?.stderr).toMatch(new RegExp(`^  ${job.tracing.trace_id}  \\d+ spans, `, 'm'));
  });

  it('keeps metrics and logs in files of their own, and rotates each at LOCAL_COLLECTOR_MAX_BYTES keeping one previous file', async () => {
    const endpoint = (signal: string) => job.tracing.otel_endpoints![0].url.replace(/\/v1\/traces$/, `/v1/${signal}`);
    const post = (signal: string, body: unknown) =>
      fetch(endpoint(signal), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const metrics = {
      resourceMetrics: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'runner' } }] },
          scopeMetrics: [
            {
              metrics: [
                {
                  name: 'ci.job.test.count',
                  sum: { aggregationTemporality: 2, isMonotonic: true, dataPoints: [{ asInt: '12', timeUnixNano: '1700000000000000000' }] },
                },
              ],
            },
          ],
        },
      ],
    };
    const metricsAnswer = await post('metrics', metrics);
    expect(metricsAnswer.status).toBe(200);
    expect(JSON.stringify(linesOf(signalFile(otlpDir(), 'metrics')))).toContain('"name":"ci.job.test.count"');

    // About 1.2 KiB a line: the 16 KiB bound is passed after some 14 exports.
    const logLine = (n: number) => ({
      resourceLogs: [{ scopeLogs: [{ logRecords: [{ timeUnixNano: '1700000000000000000', body: { stringValue: `line ${n} ${'x'.repeat(1200)}` } }] }] }],
    });
    for (let n = 0; n < 30; n++) expect((await post('logs', logLine(n))).status).toBe(200);
    const current = signalFile(otlpDir(), 'logs');
    const kept = [...linesOf(previousFile(current)), ...linesOf(current)];
    for (const file of [current, previousFile(current)]) expect(readFileSync(file).length).toBeLessThanOrEqual(MAX_BYTES);
    const numbers = kept.map((request) => Number(/"line (\d+) x/.exec(JSON.stringify(request))![1]));
    // The newest exports, in order, and nothing older than the previous file.
    expect(numbers[numbers.length - 1]).toBe(29);
    expect(numbers).toEqual(numbers.map((_, i) => 30 - numbers.length + i));
    expect(numbers.length).toBeLessThan(30);
    expect(existsSync(`${current}.2`)).toBe(false);
  });

  it('takes the pipeline spans of the control plane through the same collector', () => {
    // Without webhooks the job span is closed from the runner's job_execution (SPEC §10): both land in the trace
    // file, the job span and its queue wait under the pipeline's span, the trace's one root.
    const spans = spansOf(linesOf(signalFile(otlpDir(), 'traces'))).filter((span) => span.traceId === job.tracing.trace_id);
    const jobSpan = spans.find((span) => span.spanId === job.tracing.span_parent_id);
    const roots = spans.filter((span) => span.parentSpanId === undefined || span.parentSpanId === '');
    expect(roots).toHaveLength(1);
    expect(jobSpan?.parentSpanId).toBe(roots[0].spanId);
    expect(spans.find((span) => span.name === 'queue_wait')?.parentSpanId).toBe(job.tracing.span_parent_id);
  });
});
