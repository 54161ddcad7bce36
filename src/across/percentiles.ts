/** Weighted percentiles and rounding, shared by the reads of SPEC §12 and the calculations across pipelines (§13). */

export const round = (value: number, digits = 3): number => Math.round(value * 10 ** digits) / 10 ** digits;

/** The weighted percentile `q` (0..1): the least value whose cumulative weight reaches q of the total. */
export function weightedPercentile(values: ReadonlyArray<readonly [value: number, weight: number]>, q: number): number | null {
  const plain = new Float64Array(values.length);
  const weights = new Float64Array(values.length);
  for (let i = 0; i < values.length; i++) {
    plain[i] = values[i][0];
    weights[i] = values[i][1];
  }
  return weightedQuantile(plain, weights, q);
}

/**
 * `weightedPercentile` over values and their weights side by side: what a read over a month's rows calls, without a
 * pair allocated per value. Values that are not finite and weights that are not positive are left out. `tolerance`
 * is how far below q of the total the cumulative weight may stay (sums of fractional weights round).
 */
export function weightedQuantile(values: ArrayLike<number>, weights: ArrayLike<number>, q: number, tolerance = 1e-9): number | null {
  const kept = new Float64Array(values.length);
  const keptWeights = new Float64Array(values.length);
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i]) || !(weights[i] > 0)) continue;
    kept[count] = values[i];
    keptWeights[count++] = weights[i];
  }
  if (count === 0) return null;
  const order = ascendingOrder(kept.subarray(0, count));
  // Summed in ascending order, as the walk below adds them.
  let total = 0;
  for (let i = 0; i < count; i++) total += keptWeights[order[i]];
  if (total === 0) return null;
  let cumulative = 0;
  for (let i = 0; i < count; i++) {
    cumulative += keptWeights[order[i]];
    if (cumulative >= q * total - tolerance) return kept[order[i]];
  }
  return kept[order[count - 1]];
}

/**
 * The indexes of `values` in ascending order of value (equal values in any order). Whole milliseconds, the common
 * case, are sorted as one typed array of value·2^21 + index, ten times faster than a comparator; anything else (a
 * fraction, a negative, a month of values past 2^21) through the comparator.
 */
export function ascendingOrder(values: ArrayLike<number>): Int32Array {
  const n = values.length;
  const order = new Int32Array(n);
  let exact = n < 2 ** 21;
  for (let i = 0; i < n && exact; i++) exact = Number.isInteger(values[i]) && values[i] >= 0 && values[i] < 2 ** 32;
  if (exact) {
    const keyed = new Float64Array(n);
    for (let i = 0; i < n; i++) keyed[i] = values[i] * 2 ** 21 + i;
    keyed.sort();
    for (let i = 0; i < n; i++) order[i] = keyed[i] % 2 ** 21;
  } else {
    for (let i = 0; i < n; i++) order[i] = i;
    order.sort((a, b) => values[a] - values[b]);
  }
  return order;
}
