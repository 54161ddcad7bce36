import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly hitCount?: number;
  readonly children?: number[];
}

interface CpuProfile {
  readonly nodes: ProfileNode[];
  readonly startTime: number;
  readonly endTime: number;
  readonly samples?: number[];
  readonly timeDeltas?: number[];
}

export interface SelfTimeEntry {
  /** `function (file:line)`, file relative to `root` when under it. */
  readonly frame: string;
  readonly selfMs: number;
  readonly share: number;
}

export interface ProfileSummary {
  readonly totalMs: number;
  /** Share of samples that were not idle ((idle) / (program) excluded from the denominator's busy part). */
  readonly busyMs: number;
  readonly top: SelfTimeEntry[];
  /** Busy time of the frames whose location matches each pattern, including everything they call (inclusive). */
  readonly inclusive: Array<{ readonly pattern: string; readonly ms: number; readonly share: number }>;
}

/**
 * Self time per function of a V8 `.cpuprofile` (as `node --cpu-prof` writes it), busiest first, plus
 * inclusive time of chosen frames; idle time is left out of the shares.
 */
export function summarizeCpuProfile(file: string, root: string, topCount = 25, inclusivePatterns: readonly RegExp[] = []): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfMicros = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    // A sample's time is the delta to the next one (V8's own convention in DevTools).
    const micros = i + 1 < deltas.length ? deltas[i + 1] : 0;
    selfMicros.set(samples[i], (selfMicros.get(samples[i]) ?? 0) + Math.max(0, micros));
  }
  const frameOf = (node: ProfileNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const location = url === '' ? '' : ` (${url.replace(/^file:\/\//, '').replace(root + '/', '')}:${lineNumber + 1})`;
    return `${functionName || '(anonymous)'}${location}`;
  };
  const idle = new Set(['(idle)']);
  const totals = new Map<string, number>();
  let busy = 0;
  for (const [id, micros] of selfMicros) {
    const node = byId.get(id)!;
    if (idle.has(node.callFrame.functionName)) continue;
    busy += micros;
    const frame = frameOf(node);
    totals.set(frame, (totals.get(frame) ?? 0) + micros);
  }

  // Inclusive time: a node's self time plus its subtree's, counted once per matching subtree root.
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  const inclusive = inclusivePatterns.map((pattern) => {
    let micros = 0;
    for (const [id, self] of selfMicros) {
      for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
        const node = byId.get(at)!;
        if (pattern.test(frameOf(node))) {
          micros += self;
          break;
        }
      }
    }
    return { pattern: pattern.source, ms: micros / 1000, share: busy === 0 ? 0 : micros / busy };
  });

  const top = [...totals.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, topCount)
    .map(([frame, micros]) => ({ frame, selfMs: micros / 1000, share: busy === 0 ? 0 : micros / busy }));
  return { totalMs: (profile.endTime - profile.startTime) / 1000, busyMs: busy / 1000, top, inclusive };
}

/** Prints the busiest functions (self time) of every .cpuprofile in `dir`, each under its file's name (the process's). */
export function printCpuProfiles(dir: string, root: string): void {
  if (!existsSync(dir)) return;
  for (const file of readdirSync(dir).filter((name) => name.endsWith('.cpuprofile'))) {
    const summary = summarizeCpuProfile(join(dir, file), root, 30);
    console.log(
      `\nCPU profile ${join(dir, file)}: ${(summary.busyMs / 1000).toFixed(1)} s busy of ${(summary.totalMs / 1000).toFixed(1)} s; busiest functions (self time):`,
    );
    for (const entry of summary.top) console.log(`  ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.selfMs.toFixed(0).padStart(6)} ms  ${entry.frame}`);
  }
}
