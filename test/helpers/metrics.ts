import type { Registry } from 'prom-client';

/** A metric's value as an operator's query would sum it: every series whose labels include `labels`; 0 when none. */
export async function counted(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  return ((await registry.getSingleMetric(name)?.get())?.values ?? [])
    .filter((value) => Object.entries(labels).every(([label, wanted]) => String(value.labels[label]) === wanted))
    .reduce((sum, value) => sum + value.value, 0);
}
