import { localCollectorDirectory, readSignalLines, signalFile } from '../collector/collector-files';
import { ConfigError, loadConfig } from '../config/app-config';
import { decodeExportRequest } from '../otlp/otlp-receiver';
import { completenessOf } from '../reads/completeness';
import { criticalPath } from '../critical-path/critical-path';
import { CollectedSpan, collectedSpans, criticalPathMarks, formatDuration, latestVersions, renderWaterfall, whereTheTimeWent } from './waterfall';

function spanDuration(spans: readonly CollectedSpan[]): bigint {
  const start = spans.reduce((min, span) => (span.startNanos < min ? span.startNanos : min), spans[0].startNanos);
  const end = spans.reduce((max, span) => (span.endNanos > max ? span.endNanos : max), spans[0].endNanos);
  return end - start;
}

/**
 * `npm run -s trace [trace id]`: one trace the embedded collector kept (the one written last when no id is
 * given) as a waterfall, its critical path marked on the jobs, and one line of where the path's time went.
 * Asked for a trace it does not hold, it lists those it does.
 */
function main(): number {
  let dataDir: string;
  try {
    dataDir = loadConfig(process.env).process.dataDir;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) process.stderr.write(`invalid configuration: ${problem}\n`);
    return 78;
  }
  const directory = localCollectorDirectory(dataDir);
  const path = signalFile(directory, 'traces');
  const spans = readSignalLines(directory, 'traces').flatMap((line) => collectedSpans(decodeExportRequest('traces', 'json', Buffer.from(line))));
  if (spans.length === 0) {
    process.stderr.write(`no spans in ${path} yet: start the service with no OTLP_UPSTREAM_URL and let a runner export a job\n`);
    return 1;
  }
  const traces = new Map<string, CollectedSpan[]>();
  for (const span of spans) traces.set(span.traceId, [...(traces.get(span.traceId) ?? []), span]);
  const wanted = (process.argv[2] ?? spans[spans.length - 1].traceId).toLowerCase();
  const trace = traces.get(wanted);
  if (trace === undefined) {
    process.stderr.write(`no trace ${wanted} in ${path}; it holds:\n`);
    for (const [traceId, list] of traces) process.stderr.write(`  ${traceId}  ${list.length} spans, ${formatDuration(spanDuration(list))}\n`);
    return 1;
  }
  // The trace's latest story (SPEC §10, §12): each span once, in its latest version (a pipeline that finished again,
  // a job span with the critical path written on it at the pipeline's end), the path marked on its jobs, and where
  // its time went.
  const latest = latestVersions(trace);
  process.stdout.write(`trace ${wanted}: ${latest.length} spans, ${formatDuration(spanDuration(latest))} (${path})\n`);
  const critical = criticalPath(latest);
  const marks = critical === null ? new Map<string, string>() : criticalPathMarks(latest, critical);
  for (const row of renderWaterfall(latest, marks)) process.stdout.write(`${row}\n`);
  if (critical !== null) process.stdout.write(`${whereTheTimeWent(critical, completenessOf(latest).final)}\n`);
  return 0;
}

process.exitCode = main();
