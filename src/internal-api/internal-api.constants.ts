/** Injection tokens of the internal-API checks (SPEC §3). */
export const INTERNAL_API_VERIFIER = Symbol('INTERNAL_API_VERIFIER');
export const CALLER_KEYS = Symbol('CALLER_KEYS');
