import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { OTLP_SIGNALS, OtlpSignal } from '../otlp/otlp-encoding';

/**
 * Where the embedded collector keeps exports (issue 20), the one definition its writer, `npm run -s trace`,
 * the demo and the tests read: `<DATA_DIR>/otlp/<signal>.jsonl`, one export request a line in OTLP/JSON as
 * the Collector's file exporter writes them, and `<signal>.jsonl.1` the file before it, once it was full.
 */
export function localCollectorDirectory(dataDir: string): string {
  return resolve(dataDir, 'otlp');
}

export function signalFile(directory: string, signal: OtlpSignal): string {
  return join(directory, `${signal}.jsonl`);
}

/** The name `file` is moved to when it is full (the one before replaced). */
export function previousFile(file: string): string {
  return `${file}.1`;
}

/** Every file the embedded collector writes, as an operator reads them in a log line. */
export const SIGNAL_FILE_NAMES = OTLP_SIGNALS.map((signal) => `${signal}.jsonl`).join(', ');

/** The lines kept for a signal, oldest first: the previous file, then the current one. */
export function readSignalLines(directory: string, signal: OtlpSignal): string[] {
  const file = signalFile(directory, signal);
  return [previousFile(file), file]
    .filter((path) => existsSync(path))
    .flatMap((path) => readFileSync(path, 'utf8').split('\n'))
    .filter((line) => line.trim().length > 0);
}
