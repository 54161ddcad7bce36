import type { IncomingHttpHeaders } from 'node:http';
import { OTLP_MEDIA_TYPES, OtlpSignal } from '../../src/otlp/otlp-encoding';
import { OtlpJsonRequest, OtlpReceiver, ReceivedExport as Received, ReceiverAnswer, startOtlpReceiver } from '../../src/otlp/otlp-receiver';
import { freePort } from './ports';

/**
 * A stand-in OpenTelemetry Collector: the one OTLP receiver (src/otlp/otlp-receiver.ts) decodes the
 * exports, and the sink answers as the test says. No Collector binary can be fetched here; what this proves
 * is what reached the collector, decoded by protobufjs with the OTLP schema, independently of the gateway.
 */

export type AttributeValue = string | number | boolean | undefined;

export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly traceState: string;
  readonly startNanos: bigint;
  readonly endNanos: bigint;
  /** OTLP Status.code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number;
  readonly statusMessage: string;
  /** The span's own attributes (int values as numbers, strings as strings, so their types show). */
  readonly attributes: Record<string, AttributeValue>;
  /** Every occurrence of each span attribute key, to catch appended duplicates. */
  readonly attributeKeys: string[];
  readonly resource: Record<string, AttributeValue>;
  /** Every occurrence of each resource attribute key, to catch appended duplicates. */
  readonly resourceKeys: string[];
}

export interface ReceivedExport {
  readonly signal: OtlpSignal;
  readonly contentType: string;
  readonly headers: IncomingHttpHeaders;
  /** Resource attributes of each resource in the export. */
  readonly resources: Array<Record<string, AttributeValue>>;
  readonly spans: ReceivedSpan[];
  /** The export exactly as it arrived (what a Collector would decode). */
  readonly body: Buffer;
  /** Epoch milliseconds it arrived. */
  readonly receivedAt: number;
  /** Sent by the control plane's outbox rather than forwarded by the gateway. */
  readonly fromControlPlane: boolean;
}

/** A status alone answers with a google.rpc.Status; `retryAfter` adds the collector's own Retry-After. */
export type SinkAnswer = 'ok' | 'hang' | number | { status: number; retryAfter: string } | { rejectedSpans: number; errorMessage: string };

/** The scope of the control plane's own spans (src/pipeline-spans/pipeline-span-model.ts). */
const CONTROL_PLANE_SCOPE = 'ci-job-telemetry/pipeline-spans';

export interface OtlpSink {
  readonly url: string;
  /** What the gateway forwarded: runners' and jobs' exports. */
  readonly exports: ReceivedExport[];
  /** What the control plane's outbox delivered: pipeline, job, queue-wait and bridge spans (SPEC §10). */
  readonly controlPlaneExports: ReceivedExport[];
  /** The spans the gateway forwarded. */
  spans(): ReceivedSpan[];
  controlPlaneSpans(): ReceivedSpan[];
  /** Everything that reached the collector, as a trace viewer sees it. */
  allSpans(): ReceivedSpan[];
  allExports(): ReceivedExport[];
  answerWith(answer: SinkAnswer): void;
  /** Answers the next requests with these, one each, then goes back to the `answerWith` answer. */
  answerNext(...answers: SinkAnswer[]): void;
  /**
   * Refuses with 400 every forwarded request the test finds something in, as the Collector refuses a whole request
   * it cannot decode (undefined: refuses none). Checked before any scripted answer, which it leaves queued.
   */
  refuseWhen(refuses: ((received: ReceivedExport) => boolean) | undefined): void;
  stop(): Promise<void>;
  start(): Promise<void>;
}

type Decoded = Record<string, unknown>;

function anyValue(value: Decoded | undefined): AttributeValue {
  if (value === undefined) return undefined;
  const camel = (key: string) => value[key] ?? value[key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
  const found = camel('string_value') ?? camel('int_value') ?? camel('bool_value') ?? camel('double_value');
  return typeof found === 'string' && /^-?\d+$/.test(found) && camel('int_value') !== undefined ? Number(found) : (found as AttributeValue);
}

/** OTLP/JSON writes the enum as its number; a JSON client may write its name. */
function statusCode(code: unknown): number {
  if (typeof code === 'number') return code;
  return ({ STATUS_CODE_UNSET: 0, STATUS_CODE_OK: 1, STATUS_CODE_ERROR: 2 } as Record<string, number>)[String(code)] ?? 0;
}

function attributes(list: Decoded[] | undefined): { map: Record<string, AttributeValue>; keys: string[] } {
  const map: Record<string, AttributeValue> = {};
  const keys: string[] = [];
  for (const attribute of list ?? []) {
    keys.push(attribute.key as string);
    map[attribute.key as string] = anyValue(attribute.value as Decoded);
  }
  return { map, keys };
}

function summarize({ signal, encoding, headers, body, request: decoded }: Received): ReceivedExport {
  const request = decoded as OtlpJsonRequest;
  const top = (request.resourceSpans ?? request.resource_spans ?? request.resourceMetrics ?? request.resourceLogs ?? []) as Decoded[];
  const resources: Array<Record<string, AttributeValue>> = [];
  const spans: ReceivedSpan[] = [];
  const scopes: string[] = [];
  for (const resourceEntry of top) {
    const { map, keys } = attributes((resourceEntry.resource as Decoded | undefined)?.attributes as Decoded[] | undefined);
    resources.push(map);
    for (const scope of (resourceEntry.scopeSpans ?? resourceEntry.scope_spans ?? []) as Decoded[]) {
      scopes.push(String((scope.scope as Decoded | undefined)?.name ?? ''));
      for (const span of (scope.spans ?? []) as Decoded[]) {
        const own = attributes(span.attributes as Decoded[] | undefined);
        spans.push({
          traceId: String(span.traceId ?? span.trace_id ?? '').toLowerCase(),
          spanId: String(span.spanId ?? span.span_id ?? '').toLowerCase(),
          parentSpanId: String(span.parentSpanId ?? span.parent_span_id ?? '').toLowerCase(),
          name: span.name as string,
          traceState: String(span.traceState ?? span.trace_state ?? ''),
          startNanos: BigInt(String(span.startTimeUnixNano ?? span.start_time_unix_nano ?? 0)),
          endNanos: BigInt(String(span.endTimeUnixNano ?? span.end_time_unix_nano ?? 0)),
          statusCode: statusCode((span.status as Decoded | undefined)?.code),
          statusMessage: String((span.status as Decoded | undefined)?.message ?? ''),
          attributes: own.map,
          attributeKeys: own.keys,
          resource: map,
          resourceKeys: keys,
        });
      }
    }
  }
  return {
    signal,
    contentType: OTLP_MEDIA_TYPES[encoding],
    headers,
    resources,
    spans,
    body,
    receivedAt: Date.now(),
    fromControlPlane: scopes.length > 0 && scopes.every((name) => name === CONTROL_PLANE_SCOPE),
  };
}

/** What the sink tells the receiver for one scripted answer. */
function receiverAnswer(answer: Exclude<SinkAnswer, 'hang'>): ReceiverAnswer {
  if (answer === 'ok') return { kind: 'accepted' };
  if (typeof answer === 'number') return { kind: 'failed', status: answer, message: `sink answers ${answer}` };
  if ('status' in answer) return { kind: 'failed', status: answer.status, message: `sink answers ${answer.status}`, retryAfter: answer.retryAfter };
  return { kind: 'accepted', partialSuccess: { rejectedItems: answer.rejectedSpans, errorMessage: answer.errorMessage } };
}

export async function startOtlpSink(): Promise<OtlpSink> {
  const port = await freePort();
  const exports: ReceivedExport[] = [];
  const controlPlaneExports: ReceivedExport[] = [];
  let standing: SinkAnswer = 'ok';
  const queued: SinkAnswer[] = [];
  let receiver: OtlpReceiver | undefined;
  let refuses: ((received: ReceivedExport) => boolean) | undefined;

  const onExport = (exported: Received): ReceiverAnswer | 'hang' => {
    const received = summarize(exported);
    if (!received.fromControlPlane && refuses?.(received) === true) return receiverAnswer(400);
    // The answers a test scripts are for the gateway's forwarding; the control plane's own deliveries
    // (queue waits at pickup, job spans) are accepted beside them without taking one.
    const answer = received.fromControlPlane ? 'ok' : (queued.shift() ?? standing);
    if (answer === 'hang') return 'hang';
    const reply = receiverAnswer(answer);
    if (reply.kind === 'accepted') (received.fromControlPlane ? controlPlaneExports : exports).push(received);
    return reply;
  };
  const start = async () => {
    receiver = await startOtlpReceiver({ port, onExport });
  };
  const stop = async () => {
    await receiver?.stop();
    receiver = undefined;
  };

  await start();
  return {
    url: `http://127.0.0.1:${port}`,
    exports,
    controlPlaneExports,
    spans: () => exports.flatMap((received) => received.spans),
    controlPlaneSpans: () => controlPlaneExports.flatMap((received) => received.spans),
    allSpans: () => [...exports, ...controlPlaneExports].flatMap((received) => received.spans),
    allExports: () => [...exports, ...controlPlaneExports].sort((a, b) => a.receivedAt - b.receivedAt),
    answerWith: (next) => {
      standing = next;
      queued.length = 0;
    },
    answerNext: (...next) => queued.push(...next),
    refuseWhen: (next) => {
      refuses = next;
    },
    stop,
    start,
  };
}
