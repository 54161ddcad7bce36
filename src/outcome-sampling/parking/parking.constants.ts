export const PARKING_STORE = Symbol('PARKING_STORE');
