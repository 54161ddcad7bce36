import { CollectedSpan, collectedSpans } from '../src/cli/waterfall';
import { startOtlpReceiver } from '../src/otlp/otlp-receiver';

export interface LocalCollector {
  readonly url: string;
  readonly spans: CollectedSpan[];
  stop(): Promise<void>;
}

/**
 * A local stand-in for the OpenTelemetry Collector: the one OTLP receiver (src/otlp/otlp-receiver.ts),
 * keeping the spans of trace exports in protobuf (what the runner sends through the gateway) and JSON (the
 * service's own pipeline spans): enough for the demo to show what reached the collector, with no Docker.
 */
export async function startLocalCollector(): Promise<LocalCollector> {
  const spans: CollectedSpan[] = [];
  const receiver = await startOtlpReceiver({
    onExport: ({ signal, request }) => {
      if (signal === 'traces') spans.push(...collectedSpans(request!));
      return { kind: 'accepted' };
    },
  });
  return { url: receiver.url, spans, stop: () => receiver.stop() };
}
