/** Injection tokens and route metadata of the internal-API checks (SPEC §3). */
export const INTERNAL_API_VERIFIER = Symbol('INTERNAL_API_VERIFIER');
export const CALLER_KEYS = Symbol('CALLER_KEYS');
/** Route metadata: the route also accepts a caller key in place of the internal-API JWT (SPEC §3). */
export const ACCEPTS_CALLER_KEY = 'ci-job-telemetry:accepts-caller-key';
