/** Nearest-rank percentile of unsorted samples (p in 0..100); NaN when there are none. */
export function percentile(samples: ArrayLike<number>, p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = Float64Array.from(samples).sort();
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}
