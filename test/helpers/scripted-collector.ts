import { OtlpReceiver, ReceiverAnswer, startOtlpReceiver } from '../../src/otlp/otlp-receiver';

/** What the collector answers one request: 2xx, no answer at all, or this status with a google.rpc.Status. */
export type ScriptedAnswer = 'ok' | 'hang' | number;
/** A span as the collector decoded it (OTLP/JSON names). */
export type DecodedSpan = { readonly name: string; readonly attributes?: ReadonlyArray<{ key: string; value: Record<string, unknown> }> } & Record<
  string,
  unknown
>;
/** An answer from the names of the spans a request carries, how many requests came before it, and the spans themselves. */
export type CollectorScript = (names: readonly string[], request: number, spans: readonly DecodedSpan[]) => ScriptedAnswer;

export interface ScriptedCollector {
  readonly url: string;
  /** The names of the spans of every request answered 2xx, in order: what reached the collector, as it will count it. */
  readonly delivered: string[];
  /** Those spans whole, as decoded. */
  readonly deliveredSpans: DecodedSpan[];
  /** Requests answered so far, whatever the answer. */
  requests(): number;
  /** From the next request on. */
  answerWith(script: CollectorScript): void;
  stop(): Promise<void>;
}

/**
 * A collector on a real HTTP port (the one OTLP receiver, decoding each request of either encoding as the Collector
 * does) that answers as the test scripts: for the outbox's and parked delivery's tests, where what matters is which
 * spans a collector that refuses, then recovers, ends up holding. A 400 says which span it could not decode when the
 * request held one.
 */
export async function startScriptedCollector(script: CollectorScript = () => 'ok'): Promise<ScriptedCollector> {
  const delivered: string[] = [];
  const deliveredSpans: DecodedSpan[] = [];
  let requests = 0;
  let current = script;
  const receiver: OtlpReceiver = await startOtlpReceiver({
    onExport: ({ request }): ReceiverAnswer | 'hang' => {
      type Resource = { scopeSpans?: Array<{ spans?: DecodedSpan[] }> };
      const resources = ((request as { resourceSpans?: Resource[] }).resourceSpans ?? []) as Resource[];
      const spans = resources.flatMap((resource) => (resource.scopeSpans ?? []).flatMap((scope) => scope.spans ?? []));
      const names = spans.map((span) => span.name);
      const answer = current(names, requests++, spans);
      if (answer === 'hang') return 'hang';
      if (answer === 'ok') {
        delivered.push(...names);
        deliveredSpans.push(...spans);
        return { kind: 'accepted' };
      }
      const message = answer === 400 && names.length === 1 ? `cannot decode span ${names[0]}` : `answered ${answer}`;
      return { kind: 'failed', status: answer, message };
    },
  });
  return {
    url: receiver.url,
    delivered,
    deliveredSpans,
    requests: () => requests,
    answerWith: (next) => {
      current = next;
    },
    stop: () => receiver.stop(),
  };
}
