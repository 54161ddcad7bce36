import { localCollectorDirectory, readSignalLines, signalFile } from '../collector/collector-files';
import { AppConfig, ConfigError, loadConfig } from '../config/app-config';
import { loadClickHousePassword } from '../config/secrets';
import { decodeExportRequest } from '../otlp/otlp-receiver';
import { carriesId, identityOf } from '../otlp/span-identity';
import { completenessOf } from '../reads/completeness';
import { CollectorFilesTraceReads } from '../reads/collector-files-reads';
import { answerRead } from '../reads/read-answers';
import { DAY_MS } from '../reads/reads-request';
import { traceReadsOf } from '../reads/reads-backend';
import { backendSpecFor } from '../reads/reads.module';
import { ReadsUnavailableError, TimeWindow, TraceReads } from '../reads/trace-reads';
import { criticalPath } from '../critical-path/critical-path';
import type { PipelineComparison } from '../across/compare';
import { renderComparison } from './comparison';
import { CollectedSpan, collectedSpans, criticalPathMarks, formatDuration, latestVersions, renderWaterfall, whereTheTimeWent } from './waterfall';

/** Where the command writes: standard output and standard error, or a test's buffers. */
export interface TraceOutput {
  out(text: string): void;
  err(text: string): void;
}

const USAGE = 'usage: npm run -s trace [-- <trace id>] | npm run -s trace -- --compare <pipeline id> [--baseline <pipeline id>] [--project <project id>]';

/** What was asked: one trace (the latest when no id), or a pipeline compared with its baseline. */
type TraceArgs =
  | { readonly kind: 'trace'; readonly traceId?: string }
  | { readonly kind: 'compare'; readonly pipelineId: number; readonly baselineId: number | null; readonly projectId: number | null };

const POSITIVE_ID = /^[1-9][0-9]{0,15}$/;

/** The arguments, or what is wrong with them, in words. */
export function parseTraceArgs(args: readonly string[]): TraceArgs | string {
  const options = new Map<string, string>();
  const positional: string[] = [];
  for (let index = 0; index < args.length; index += 1) {
    const arg = args[index];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const [name, inline] = arg.slice(2).split('=', 2);
    if (!['compare', 'baseline', 'project'].includes(name)) return `unknown option --${name}`;
    const value = inline ?? args[(index += 1)];
    if (value === undefined || !POSITIVE_ID.test(value)) return `--${name} needs a ${name === 'project' ? 'project' : 'pipeline'} id (a positive integer)`;
    options.set(name, value);
  }
  if (!options.has('compare')) {
    if (options.size > 0) return `--${[...options.keys()][0]} goes with --compare`;
    if (positional.length > 1) return 'one trace id at most';
    return { kind: 'trace', traceId: positional[0]?.toLowerCase() };
  }
  if (positional.length > 0) return `--compare takes a pipeline id, not a trace id (${positional[0]})`;
  const id = (name: string) => (options.has(name) ? Number(options.get(name)) : null);
  return { kind: 'compare', pipelineId: id('compare')!, baselineId: id('baseline'), projectId: id('project') };
}

function spanDuration(spans: readonly CollectedSpan[]): bigint {
  const start = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
  const end = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
  return end - start;
}

/**
 * `npm run -s trace [trace id]`: one trace the embedded collector kept (the one written last when no id is given) as
 * a waterfall, its critical path marked on the jobs, and one line of where the path's time went. Asked for a trace it
 * does not hold, it lists those it does. With `--compare <pipeline id>`, the pipeline's trace so, then why its
 * critical path took longer or shorter than its baseline's (SPEC §13), computed by the compare read itself over the
 * same files. Returns the exit status.
 */
export async function traceCommand(args: readonly string[], env: NodeJS.ProcessEnv | Record<string, string | undefined>, output: TraceOutput): Promise<number> {
  const asked = parseTraceArgs(args);
  if (typeof asked === 'string') {
    output.err(`${asked}\n${USAGE}\n`);
    return 64;
  }
  const config = configured(() => loadConfig(env), output);
  if (config === CONFIG_REFUSED) return 78;
  if (asked.kind === 'compare' && config.reads.clickhouseUrl !== undefined) return compareOnClickHouse(asked, config, output);
  const directory = localCollectorDirectory(config.process.dataDir);
  const path = signalFile(directory, 'traces');
  const spans = readSignalLines(directory, 'traces').flatMap((line) => collectedSpans(decodeExportRequest('traces', 'json', Buffer.from(line))));
  if (spans.length === 0) {
    output.err(`no spans in ${path} yet: start the service with no OTLP_UPSTREAM_URL and let a runner export a job\n`);
    return 1;
  }
  const traces = new Map<string, CollectedSpan[]>();
  for (const span of spans) traces.set(span.traceId, [...(traces.get(span.traceId) ?? []), span]);

  if (asked.kind === 'trace') {
    const wanted = asked.traceId ?? spans[spans.length - 1].traceId;
    const trace = traces.get(wanted);
    if (trace === undefined) {
      output.err(`no trace ${wanted} in ${path}; it holds:\n`);
      for (const [traceId, list] of traces) output.err(`  ${traceId}  ${list.length} spans, ${formatDuration(spanDuration(list))}\n`);
      return 1;
    }
    showTrace(wanted, trace, path, output);
    return 0;
  }

  // The pipeline's trace and project, from the spans that carry its id (GitLab's ids are unique across projects; a
  // project named picks among traces that claim otherwise).
  const holders = [...traces.entries()].filter(([, list]) =>
    list.some((span) => carriesId(span, 'ci.pipeline.id', asked.pipelineId) && (asked.projectId === null || carriesId(span, 'ci.project.id', asked.projectId))),
  );
  if (holders.length === 0) {
    output.err(`no pipeline ${asked.pipelineId}${asked.projectId === null ? '' : ` of project ${asked.projectId}`} in ${path}\n`);
    return 1;
  }
  const projects = [
    ...new Set(
      holders.flatMap(([, list]) =>
        list.filter((span) => carriesId(span, 'ci.pipeline.id', asked.pipelineId)).map((span) => String(identityOf(span, 'ci.project.id') ?? '')),
      ),
    ),
  ].filter((project) => POSITIVE_ID.test(project));
  if (asked.projectId === null && projects.length !== 1) {
    output.err(`pipeline ${asked.pipelineId} is claimed by ${projects.length} projects (${projects.join(', ')}): name one with --project\n`);
    return 1;
  }
  const projectId = asked.projectId ?? Number(projects[0]);
  const [traceId, trace] = holders[0];
  const latest = latestVersions(trace);
  // From the pipeline's first span to the last the files hold: the files' "now", so a baseline named after it is
  // found too, however long ago they were written.
  const msOf = (nanos: bigint) => Number(nanos / 1_000_000n);
  const window = {
    fromMs: msOf(latest.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), latest[0].startNanos)),
    toMs: msOf(spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos)),
  };
  // The compare read itself (SPEC §13), as the endpoint answers it, over the same files: one way of computing it.
  return printCompared(new CollectorFilesTraceReads(directory), { ...asked, projectId }, window, config, path, { traceId, spans: latest }, output);
}

const CONFIG_REFUSED = Symbol('configuration refused');

/** What `load` reads from the configuration, or, when it is invalid, each problem on standard error (exit 78). */
function configured<T>(load: () => T, output: TraceOutput): T | typeof CONFIG_REFUSED {
  try {
    return load();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) output.err(`invalid configuration: ${problem}\n`);
    return CONFIG_REFUSED;
  }
}

type CompareAsked = Extract<TraceArgs, { kind: 'compare' }> & { readonly projectId: number };

/**
 * `--compare` where the service reads ClickHouse (CLICKHOUSE_URL): the pipeline's trace and the compare read from
 * there, as the endpoint reads them, over the lookback before now. ClickHouse is not searched for the project a
 * pipeline belongs to: it is named with --project.
 */
async function compareOnClickHouse(asked: Extract<TraceArgs, { kind: 'compare' }>, config: AppConfig, output: TraceOutput): Promise<number> {
  if (asked.projectId === null) {
    output.err(`on ClickHouse (CLICKHOUSE_URL), name the pipeline's project with --project\n${USAGE}\n`);
    return 64;
  }
  const password = configured(() => loadClickHousePassword(config), output);
  if (password === CONFIG_REFUSED) return 78;
  const reads = traceReadsOf(backendSpecFor(config.reads, config.process, password));
  const where = `ClickHouse at ${config.reads.clickhouseUrl}`;
  try {
    const now = Date.now();
    const window = { fromMs: now - config.reads.lookbackDays * DAY_MS, toMs: now };
    const trace = await reads.pipelineTrace(asked.projectId, asked.pipelineId, window, { limit: config.reads.maxSpans });
    if (trace === null || trace.spans.length === 0) {
      output.err(`no pipeline ${asked.pipelineId} of project ${asked.projectId} in ${where} within READS_LOOKBACK_DAYS (${config.reads.lookbackDays})\n`);
      return 1;
    }
    const shown = { traceId: trace.spans[0].traceId, spans: latestVersions(trace.spans) };
    return await printCompared(reads, { ...asked, projectId: asked.projectId }, window, config, where, shown, output);
  } catch (error) {
    if (!(error instanceof ReadsUnavailableError)) throw error;
    output.err(`${where} did not answer: ${error.message}\n`);
    return 69;
  } finally {
    await reads.close?.();
  }
}

/** The compare read over `reads`, then the pipeline's waterfall and why it took longer or shorter than its baseline. */
async function printCompared(
  reads: TraceReads,
  asked: CompareAsked,
  window: TimeWindow,
  config: AppConfig,
  where: string,
  shown: { readonly traceId: string; readonly spans: readonly CollectedSpan[] },
  output: TraceOutput,
): Promise<number> {
  const outcome = await answerRead(reads, {
    read: 'compare',
    projectId: asked.projectId,
    pipelineId: asked.pipelineId,
    baselineId: asked.baselineId,
    window,
    lookbackMs: config.reads.lookbackDays * DAY_MS,
  });
  if (outcome.kind === 'not_found') {
    const which = outcome.what === 'baseline pipeline' ? `baseline pipeline ${asked.baselineId}` : `pipeline ${asked.pipelineId}`;
    output.err(`no ${which} of project ${asked.projectId} in ${where} within READS_LOOKBACK_DAYS (${config.reads.lookbackDays}) before it\n`);
    return 1;
  }
  if (outcome.kind === 'unanswerable') {
    output.err(`pipeline ${asked.pipelineId} cannot be compared: ${outcome.reason} (--baseline <pipeline id>)\n`);
    return 1;
  }
  showTrace(shown.traceId, shown.spans, where, output);
  output.out('\n');
  for (const line of renderComparison(JSON.parse(new TextDecoder().decode(outcome.body)) as PipelineComparison)) output.out(`${line}\n`);
  return 0;
}

/**
 * The trace's latest story (SPEC §10, §12): each span once, in its latest version (a pipeline that finished again, a
 * job span with the critical path written on it at the pipeline's end), the path marked on its jobs, and where its
 * time went.
 */
function showTrace(traceId: string, spans: readonly CollectedSpan[], path: string, output: TraceOutput): void {
  const latest = latestVersions(spans);
  output.out(`trace ${traceId}: ${latest.length} spans, ${formatDuration(spanDuration(latest))} (${path})\n`);
  const critical = criticalPath(latest);
  const marks = critical === null ? new Map<string, string>() : criticalPathMarks(latest, critical);
  for (const row of renderWaterfall(latest, marks)) output.out(`${row}\n`);
  if (critical !== null) output.out(`${whereTheTimeWent(critical, completenessOf(latest).final)}\n`);
}
