import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as protobuf from 'protobufjs';
import type { OtlpSignal } from './otlp-encoding';

const PROTO_FROM_ROOT = join('src', 'otlp', 'proto', 'otlp.proto');

/**
 * Where otlp.proto is: beside this module, in src/ (ts-jest) and in dist/ (`npm run build` copies it there);
 * otherwise in the clone's source tree, for compiled copies of src/ that carry no copy of it (the demo's and
 * the benches' tsc output).
 */
function protoPath(): string {
  const beside = join(__dirname, 'proto', 'otlp.proto');
  if (existsSync(beside)) return beside;
  for (let dir = __dirname; dirname(dir) !== dir; dir = dirname(dir)) {
    const inSource = join(dir, PROTO_FROM_ROOT);
    if (existsSync(inSource)) return inSource;
  }
  throw new Error(`otlp.proto is neither beside ${__dirname} nor under any parent's ${PROTO_FROM_ROOT}`);
}

let root: protobuf.Root | undefined;

/** The OTLP schema (package `otlp`), parsed on first use: the gateway's hot path never needs it. */
export function otlpProto(): protobuf.Root {
  root ??= protobuf.loadSync(protoPath());
  return root;
}

const REQUEST_TYPES: Record<OtlpSignal, string> = {
  traces: 'otlp.ExportTraceServiceRequest',
  metrics: 'otlp.ExportMetricsServiceRequest',
  logs: 'otlp.ExportLogsServiceRequest',
};

const RESPONSE_TYPES: Record<OtlpSignal, string> = {
  traces: 'otlp.ExportTraceServiceResponse',
  metrics: 'otlp.ExportMetricsServiceResponse',
  logs: 'otlp.ExportLogsServiceResponse',
};

/** Export*ServiceRequest of a signal. */
export function exportRequestType(signal: OtlpSignal): protobuf.Type {
  return otlpProto().lookupType(REQUEST_TYPES[signal]);
}

/** Export*ServiceResponse of a signal. */
export function exportResponseType(signal: OtlpSignal): protobuf.Type {
  return otlpProto().lookupType(RESPONSE_TYPES[signal]);
}

/** google.rpc.Status, the body of an OTLP/HTTP error answer. */
export function rpcStatusType(): protobuf.Type {
  return otlpProto().lookupType('otlp.RpcStatus');
}
