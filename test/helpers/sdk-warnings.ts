import { diag, DiagLogLevel } from '@opentelemetry/api';

/**
 * The warnings the OpenTelemetry SDK logs from here on, among them the partial-success warnings its exporters log
 * when the gateway reports rejected spans: what a job's program would see on its console. Empty it with `length = 0`.
 */
export function recordSdkWarnings(): string[] {
  const warnings: string[] = [];
  const quiet = () => undefined;
  diag.setLogger(
    { error: quiet, warn: (...args: unknown[]) => warnings.push(args.map(String).join(' ')), info: quiet, debug: quiet, verbose: quiet },
    DiagLogLevel.WARN,
  );
  return warnings;
}
