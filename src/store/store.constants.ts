export const STORE_BACKEND = Symbol('STORE_BACKEND');
