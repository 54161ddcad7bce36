import type { IncomingHttpHeaders } from 'node:http';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

export interface RunnerCredentials {
  readonly jobToken?: string;
  readonly runnerToken?: string;
}

/**
 * Runner-side credentials as the runner sends them, on the gateway and on the auth endpoint alike
 * (SPEC §5): the job token as `Authorization: Bearer`, the runner token as `Runner-Token`.
 */
export function runnerCredentials(headers: IncomingHttpHeaders): RunnerCredentials {
  const authorization = headers.authorization;
  const runnerToken = headers['runner-token'];
  return {
    jobToken: typeof authorization === 'string' ? BEARER.exec(authorization)?.[1] : undefined,
    runnerToken: typeof runnerToken === 'string' && runnerToken.length > 0 ? runnerToken : undefined,
  };
}
