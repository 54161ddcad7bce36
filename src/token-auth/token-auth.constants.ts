/** The auth endpoint's own decision cache, apart from the gateway's (each counts its hits under its own metric). */
export const AUTH_DECISIONS = Symbol('AUTH_DECISIONS');
