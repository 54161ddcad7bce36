import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type Constraint = { contextName: string; operator: string; values: string[] };

export interface FlagSettings {
  /** Percentage of projects (flexibleRollout, stickiness projectId). */
  rollout?: number;
  enabled?: boolean;
  constraints?: Constraint[];
  /** Pipeline sampling percentage; omitted = no sampling toggle. */
  sampling?: number;
  /**
   * Outcome-based sampling (SPEC §11): on, with this policy as its variant's JSON payload (`{}` for the defaults);
   * omitted = no toggle.
   */
  outcomeSampling?: Record<string, unknown>;
}

export function flagDefinitions({ rollout = 100, enabled = true, constraints = [], sampling, outcomeSampling }: FlagSettings) {
  const features: unknown[] = [
    {
      name: 'ci_job_telemetry',
      enabled,
      strategies: [{ name: 'flexibleRollout', parameters: { rollout: String(rollout), stickiness: 'projectId', groupId: 'ci_job_telemetry' }, constraints }],
    },
  ];
  if (sampling !== undefined) {
    features.push({
      name: 'ci_job_telemetry_sampling',
      enabled: true,
      strategies: [{ name: 'flexibleRollout', parameters: { rollout: String(sampling), stickiness: 'default', groupId: 's' }, constraints: [] }],
    });
  }
  if (outcomeSampling !== undefined) {
    features.push({
      name: 'ci_job_telemetry_outcome_sampling',
      enabled: true,
      strategies: [{ name: 'flexibleRollout', parameters: { rollout: '100', stickiness: 'projectId', groupId: 'o' }, constraints: [] }],
      // As an operator writes the policy in Unleash: one variant, its payload JSON.
      variants: [
        { name: 'policy', weight: 1000, weightType: 'variable', stickiness: 'default', payload: { type: 'json', value: JSON.stringify(outcomeSampling) } },
      ],
    });
  }
  return { version: 2, features };
}

/** A flag file in Unleash's client-features format, as an operator would write it. */
export function writeFlagsFile(settings: FlagSettings, path?: string): string {
  const file = path ?? join(mkdtempSync(join(tmpdir(), 'cjt-flags-')), 'flags.json');
  writeFileSync(file, JSON.stringify(flagDefinitions(settings)));
  return file;
}
