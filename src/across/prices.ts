import { readFileSync } from 'node:fs';
import type { Prices } from './waste';

export type { Prices };

/**
 * RUNNER_PRICES_FILE (SPEC §13 "priced per runner type when an operator configures prices"): per runner minute, by
 * runner type or by tag set (tags as the rows have them: sorted, joined by ','; `docker, arm64` is read as
 * `arm64,docker`). Checked whole when read: a price that is not a finite number ≥ 0, or a key the file does not know,
 * is an error naming it, so a typo never prices a fleet at nothing.
 */
export function loadPrices(file: string): Prices {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new Error(`RUNNER_PRICES_FILE ${file}: ${(error as Error).message}`);
  }
  return parsePrices(parsed, `RUNNER_PRICES_FILE ${file}`);
}

/**
 * Start-up check: a configured RUNNER_PRICES_FILE that cannot be read, or that names a price it cannot use, stops the
 * start (exit 78, one line) rather than leaving every waste read without its cost. Undefined when the file is good.
 */
export function pricesFileProblem(file: string): string | undefined {
  try {
    loadPrices(file);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

export function parsePrices(value: unknown, where = 'prices'): Prices {
  const perMinute = isObject(value) ? value.per_minute : undefined;
  if (!isObject(value) || !isObject(perMinute) || Object.keys(value).some((key) => key !== 'per_minute')) {
    throw new Error(`${where}: expected {"per_minute": {"runner_type": {...}, "tags": {...}}}`);
  }
  const unknown = Object.keys(perMinute).filter((key) => key !== 'runner_type' && key !== 'tags');
  if (unknown.length > 0) throw new Error(`${where}: per_minute knows runner_type and tags, not ${unknown.join(', ')}`);
  const table = (key: 'runner_type' | 'tags', normalize: (name: string) => string): Record<string, number> | undefined => {
    const entries = perMinute[key];
    if (entries === undefined) return undefined;
    if (!isObject(entries)) throw new Error(`${where}: per_minute.${key} must be an object of prices`);
    const prices: Record<string, number> = {};
    for (const [name, price] of Object.entries(entries)) {
      if (typeof price !== 'number' || !Number.isFinite(price) || price < 0) {
        throw new Error(`${where}: per_minute.${key}.${name} must be a price per minute, a number of 0 or more`);
      }
      prices[normalize(name)] = price;
    }
    return prices;
  };
  const tagSet = (tags: string) =>
    [
      ...new Set(
        tags
          .split(',')
          .map((tag) => tag.trim())
          .filter((tag) => tag !== ''),
      ),
    ]
      .sort()
      .join(',');
  const runnerType = table('runner_type', (name) => name);
  const tags = table('tags', tagSet);
  return { per_minute: { ...(runnerType === undefined ? {} : { runner_type: runnerType }), ...(tags === undefined ? {} : { tags }) } };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
