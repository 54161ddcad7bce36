export const TRACED_WORK_STORE = Symbol('TRACED_WORK_STORE');
/** The same records, on the connection a pickup waits on (see StoreBackend): the head decision it pins. */
export const PICKUP_TRACED_WORK_STORE = Symbol('PICKUP_TRACED_WORK_STORE');
