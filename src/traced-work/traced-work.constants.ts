export const TRACED_WORK_STORE = Symbol('TRACED_WORK_STORE');
