export const LIMIT_STORE = Symbol('LIMIT_STORE');
