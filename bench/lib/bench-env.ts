import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { INTERNAL_API_HEADER, signInternalApiToken } from '../../src/internal-api/internal-api-token';
import { ISSUER } from '../../test/helpers/internal-api';

/** The checkout the bench belongs to, wherever its compiled copy runs from (node_modules/.cache/…). */
export function repositoryRoot(from: string): string {
  // The working directory first: a worktree whose node_modules links to another checkout's would
  // otherwise find that checkout above the compiled bench (node_modules/.cache) and read its files.
  const isRoot = (dir: string) => {
    const manifest = join(dir, 'package.json');
    return existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'ci-job-telemetry';
  };
  if (isRoot(process.cwd())) return process.cwd();
  for (let dir = from; dir !== dirname(dir); dir = dirname(dir)) {
    if (isRoot(dir)) return dir;
  }
  throw new Error(`no ci-job-telemetry package.json above ${from}`);
}

/**
 * The internal-API header, re-signed every 30 s: the service refuses a token issued more than 60 s
 * ago (SPEC §3), whatever the run length.
 */
export async function rollingAuthHeader(secret: Buffer): Promise<{ current(): Record<string, string>; stop(): void }> {
  let header = { [INTERNAL_API_HEADER]: await signInternalApiToken(secret, ISSUER) };
  const timer = setInterval(() => {
    void signInternalApiToken(secret, ISSUER).then((token) => (header = { [INTERNAL_API_HEADER]: token }));
  }, 30_000);
  return { current: () => header, stop: () => clearInterval(timer) };
}

/**
 * Runs a bench's main and ends the process when it is done: exit status 1 when it threw or set
 * `process.exitCode`, else 0. Ending it outright, because a bench's servers and clients may leave handles open.
 */
export function runBench(main: () => Promise<void>): void {
  main().then(
    () => process.exit(process.exitCode ?? 0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
