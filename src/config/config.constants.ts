/** Injection tokens of the configuration providers. */
export const APP_CONFIG = Symbol('APP_CONFIG');
export const SECRETS = Symbol('SECRETS');
