import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The clone's root, found from this file whether it runs from simulator/ (tests) or from its build output. */
export function repoRoot(from = __dirname): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'ci-job-telemetry') return dir;
    if (dirname(dir) === dir) throw new Error(`no ci-job-telemetry package.json above ${from}`);
  }
}
