import 'reflect-metadata';
import { Transform } from 'class-transformer';
import { IsInt, IsOptional, IsString, IsUrl, Max, Min, MinLength } from 'class-validator';

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

const toInt = ({ value }: { value: unknown }) => (typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value);

export const toIntList = ({ value }: { value: unknown }) => (toList({ value }) as unknown[] | undefined)?.map((item) => toInt({ value: item }));

const URL_OPTIONS = { require_tld: false, require_protocol: true, protocols: ['http', 'https'] };

/** class-validator's own message ("must be a URL address") does not say which schemes are wanted. */
export const IsHttpUrl = () => IsUrl(URL_OPTIONS, { message: 'must be an http:// or https:// URL' });

/**
 * A whole number written in decimal, within bounds: `@Transform(toInt) @IsInt() @Min(min) @Max(max)` in one, applied
 * as that stack is (bottom first), so a refusal lists the failed checks in the same order.
 */
export function Integer(bounds: { min: number; max?: number }): PropertyDecorator {
  return stacked(Transform(toInt), IsInt(), Min(bounds.min), ...(bounds.max === undefined ? [] : [Max(bounds.max)]));
}

/** Text that is not empty: a name, a path. */
export const Text = () => stacked(IsString(), MinLength(1));

/** Text that is not empty, or unset: a file that holds a secret, an optional name. */
export const OptionalText = () => stacked(IsOptional(), IsString(), MinLength(1));

/** Decorators written top to bottom, applied as a stack of them is: bottom first. */
export function stacked(...decorators: PropertyDecorator[]): PropertyDecorator {
  return (target, property) => {
    for (const decorator of [...decorators].reverse()) decorator(target, property);
  };
}
