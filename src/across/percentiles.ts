/** Weighted percentiles and rounding, shared by the reads of SPEC §12 and the calculations across pipelines (§13). */

export const round = (value: number, digits = 3): number => Math.round(value * 10 ** digits) / 10 ** digits;

/** The weighted percentile `q` (0..1): the least value whose cumulative weight reaches q of the total. */
export function weightedPercentile(values: ReadonlyArray<readonly [value: number, weight: number]>, q: number): number | null {
  const usable = values.filter(([value, weight]) => Number.isFinite(value) && weight > 0).sort((a, b) => a[0] - b[0]);
  const total = usable.reduce((sum, [, weight]) => sum + weight, 0);
  if (total === 0) return null;
  let cumulative = 0;
  for (const [value, weight] of usable) {
    cumulative += weight;
    if (cumulative >= q * total - 1e-9) return value;
  }
  return usable[usable.length - 1][0];
}
