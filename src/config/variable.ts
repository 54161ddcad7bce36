import 'reflect-metadata';
import { IsUrl } from 'class-validator';

/** A section's class → its properties, each the environment variable it is read from. */
const VARIABLES_OF = new WeakMap<object, Map<string, string>>();

/**
 * The environment variable a section's property is read from. Inside the service a value has its section's
 * camelCase name (`store.commandTimeoutMs`); users, docs and every error message know it by this name.
 */
export function Variable(name: string): PropertyDecorator {
  return (target, property) => {
    const section = target.constructor;
    const variables = VARIABLES_OF.get(section) ?? new Map<string, string>();
    variables.set(String(property), name);
    VARIABLES_OF.set(section, variables);
  };
}

/** The properties of a section with the variables they are read from, in declaration order. */
export function variablesOf(section: object): ReadonlyMap<string, string> {
  return VARIABLES_OF.get(section) ?? new Map();
}

export const toList = ({ value }: { value: unknown }) =>
  typeof value === 'string'
    ? value
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item.length > 0)
    : value;

/** Only the literal words count: `Boolean("false")` is true, which is how flags get silently flipped. */
export const toBoolean = ({ value }: { value: unknown }) => {
  if (typeof value !== 'string') return value;
  const word = value.trim().toLowerCase();
  if (['true', '1', 'yes'].includes(word)) return true;
  if (['false', '0', 'no'].includes(word)) return false;
  return value;
};

export const toInt = ({ value }: { value: unknown }) => (typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value);

export const toIntList = ({ value }: { value: unknown }) => (toList({ value }) as unknown[] | undefined)?.map((item) => toInt({ value: item }));

/** `host:port`, the host a name, IPv4 or bracketed IPv6 address. */
export const HOST_PORT = /^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/;

const URL_OPTIONS = { require_tld: false, require_protocol: true, protocols: ['http', 'https'] };

/** class-validator's own message ("must be a URL address") does not say which schemes are wanted. */
export const IsHttpUrl = () => IsUrl(URL_OPTIONS, { message: 'must be an http:// or https:// URL' });
