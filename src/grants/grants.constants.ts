export const GRANT_STORE = Symbol('GRANT_STORE');
