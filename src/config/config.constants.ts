/** Injection token of the secrets; each configuration section is provided by its own class. */
export const SECRETS = Symbol('SECRETS');
