import { basename } from 'node:path';
import { INTERNAL_API_HEADER, signInternalApiToken } from '../../src/internal-api/internal-api-token';
import { ISSUER } from '../../test/helpers/internal-api';

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
 * Its first line names the bench and the Node.js version: figures of two runtimes are not the same figures.
 */
export function runBench(main: () => Promise<void>): void {
  console.log(`${basename(process.argv[1] ?? 'bench', '.bench.js')} bench on node ${process.version}`);
  main().then(
    () => process.exit(process.exitCode ?? 0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
