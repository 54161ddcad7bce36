import { appendFileSync, mkdirSync } from 'node:fs';
import { signalFile } from '../src/collector/collector-files';
import { CollectedSpan, collectedSpans } from '../src/cli/waterfall';
import { OtlpJsonRequest, startOtlpReceiver } from '../src/otlp/otlp-receiver';

/** A span as the collector received it, with its `trace_state`: what says how it was sampled (SPEC §11). */
export interface ReceivedSpan extends CollectedSpan {
  /** W3C tracestate, `` when none: `ot=th:0` for a pipeline kept by its outcome. */
  readonly traceState: string;
}

export interface LocalCollector {
  readonly url: string;
  readonly spans: ReceivedSpan[];
  stop(): Promise<void>;
}

type Decoded = Record<string, unknown>;

/** `trace_state` of each span of a request, by trace and span id (the OTLP/JSON mapping writes both in hex). */
function traceStates(request: OtlpJsonRequest): Map<string, string> {
  const states = new Map<string, string>();
  for (const resourceSpans of (request.resourceSpans ?? []) as Decoded[])
    for (const scopeSpans of (resourceSpans.scopeSpans ?? []) as Decoded[])
      for (const span of (scopeSpans.spans ?? []) as Decoded[])
        states.set(`${String(span.traceId).toLowerCase()}/${String(span.spanId).toLowerCase()}`, typeof span.traceState === 'string' ? span.traceState : '');
  return states;
}

/**
 * A local stand-in for the OpenTelemetry Collector: the one OTLP receiver (src/otlp/otlp-receiver.ts),
 * keeping the spans of trace exports in protobuf (what the runner sends through the gateway) and JSON (the
 * service's own pipeline spans): enough for the demo to show what reached the collector, with no Docker.
 * Given a `directory`, it also writes each trace export there as the embedded collector does (one request a line,
 * OTLP/JSON), where the service's read API and `npm run -s trace` find it.
 */
export async function startLocalCollector(options: { directory?: string } = {}): Promise<LocalCollector> {
  const spans: ReceivedSpan[] = [];
  if (options.directory !== undefined) mkdirSync(options.directory, { recursive: true });
  const receiver = await startOtlpReceiver({
    onExport: ({ signal, request }) => {
      if (signal === 'traces') {
        if (options.directory !== undefined) appendFileSync(signalFile(options.directory, 'traces'), `${JSON.stringify(request)}\n`);
        const states = traceStates(request!);
        spans.push(...collectedSpans(request!).map((span) => ({ ...span, traceState: states.get(`${span.traceId}/${span.spanId}`) ?? '' })));
      }
      return { kind: 'accepted' };
    },
  });
  return { url: receiver.url, spans, stop: () => receiver.stop() };
}
