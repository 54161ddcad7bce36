export const OUTBOX_STORE = Symbol('OUTBOX_STORE');
