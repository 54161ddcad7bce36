export const INTERNAL_API_VERIFIER = Symbol('INTERNAL_API_VERIFIER');
export const JOB_TOKEN_VERIFIER = Symbol('JOB_TOKEN_VERIFIER');
/** Route metadata: the route also accepts a caller key in place of the internal-API JWT (SPEC §3). */
export const ACCEPTS_CALLER_KEY = 'ci-job-telemetry:accepts-caller-key';
export const CALLER_KEYS = Symbol('CALLER_KEYS');
export const AUTH_DECISIONS = Symbol('AUTH_DECISIONS');
