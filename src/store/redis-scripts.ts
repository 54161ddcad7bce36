import { RedisStore } from './redis-store';

/** What a script's KEYS and ARGV hold: a number goes as its decimal text (ioredis writes `String(n)`), a body as bytes. */
export type ScriptArgument = string | number | Buffer;

/** Whether a type is a union of several (an optional key makes a tuple's length `3 | 4`). */
type IsUnion<T, All = T> = T extends unknown ? ([All] extends [T] ? false : true) : never;

/** How many KEYS a script takes: its keys' tuple length when fixed, else `variable` (each call says, as EVAL's numkeys). */
export type KeyCount<Keys extends readonly string[]> = number extends Keys['length']
  ? 'variable'
  : IsUnion<Keys['length']> extends false
    ? Keys['length']
    : 'variable';

/**
 * A Lua script of a store. Redis runs a script whole, serving nothing else meanwhile, so each is one atomic step of
 * the store; Redis Cluster runs it only when all its KEYS hash to one slot (redis-keys.ts gives each operation's keys
 * one hash tag). `Keys` and `Args` name KEYS and ARGV in order, `Reply` is what ioredis answers.
 */
interface Script<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply> {
  readonly keys: KeyCount<Keys>;
  readonly lua: string;
  /** Never set: what a call takes and answers, for the types only. */
  readonly call?: (keys: Keys, args: Args) => Reply;
}

/** A script called by name (`defineScripts`). */
export interface LuaScript<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply> extends Script<Keys, Args, Reply> {
  readonly inTransaction: false;
}

/**
 * A script sent whole (EVAL) with the commands of a transaction, never defined on the connection: one missing from
 * Redis' cache would fail inside MULTI while the commands beside it still ran (see `RedisStore.transaction`).
 */
export interface TransactionScript<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply> extends Script<Keys, Args, Reply> {
  readonly inTransaction: true;
}

export function luaScript<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply>(script: {
  keys: KeyCount<Keys>;
  lua: string;
}): LuaScript<Keys, Args, Reply> {
  return { ...script, inTransaction: false };
}

/** Its KEYS are as many as a call gives. */
export function transactionScript<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply>(
  lua: string,
): TransactionScript<Keys, Args, Reply> {
  return { keys: 'variable' as KeyCount<Keys>, lua, inTransaction: true };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyScript = LuaScript<any, any, any> | TransactionScript<any, any, any>;

type CallOf<S> = S extends LuaScript<infer Keys, infer Args, infer Reply> ? (keys: Readonly<Keys>, args: Readonly<Args>) => Promise<Reply> : never;
type CalledByName<Table> = { [Name in keyof Table]: Table[Name] extends { inTransaction: true } ? never : Name }[keyof Table];

/** A store's scripts called by name: KEYS and ARGV checked against what the script declares. */
export type ScriptCalls<Table> = { readonly [Name in CalledByName<Table>]: CallOf<Table[Name]> };

type ScriptCommand = (...numberOfKeysKeysAndArgs: ScriptArgument[]) => Promise<unknown>;

/** The Lua of each command defined on a connection, by its name: one name is one script on a connection every store shares. */
const definedOn = new WeakMap<RedisStore['client'], Map<string, string>>();

/**
 * Defines a store's scripts (but those sent in transactions) on its connection as ioredis commands, each sent by SHA
 * (EVALSHA) after its first use on a socket, as text again when Redis answers NOSCRIPT; on a cluster routed by its
 * keys. A script's command is `cjt` and its name (`saveGrant`: `cjtSaveGrant`), the name the benches report it by
 * (bench/lib/redis-holds.ts); a name another store defined with other Lua is refused, as it would replace that
 * store's script on the shared connection. A store opened again on a connection defines nothing new.
 */
export function defineScripts<Table extends Record<string, AnyScript>>(store: RedisStore, table: Table): ScriptCalls<Table> {
  const client = store.client as unknown as Record<string, ScriptCommand>;
  const defined = definedOn.get(store.client) ?? new Map<string, string>();
  definedOn.set(store.client, defined);
  const calls: Record<string, (keys: readonly string[], args: readonly ScriptArgument[]) => Promise<unknown>> = {};
  for (const [name, script] of Object.entries(table)) {
    if (script.inTransaction) continue;
    const command = `cjt${name[0].toUpperCase()}${name.slice(1)}`;
    const lua = defined.get(command);
    if (lua !== undefined && lua !== script.lua) throw new Error(`a script named ${command} is defined on this connection already, with other Lua`);
    if (lua === undefined) {
      store.client.defineCommand(command, script.keys === 'variable' ? { lua: script.lua } : { numberOfKeys: script.keys, lua: script.lua });
      defined.set(command, script.lua);
    }
    calls[name] =
      script.keys === 'variable' ? (keys, args) => client[command](keys.length, ...keys, ...args) : (keys, args) => client[command](...keys, ...args);
  }
  return calls as ScriptCalls<Table>;
}

/** EVAL's arguments for a script in a transaction (`redis.eval(...evalArguments(...))`): the Lua, how many keys, the keys, ARGV. */
export function evalArguments<Keys extends readonly string[], Args extends readonly ScriptArgument[], Reply>(
  script: TransactionScript<Keys, Args, Reply>,
  keys: Readonly<Keys>,
  args: Readonly<Args>,
): [lua: string, numberOfKeys: number, ...keysAndArgs: ScriptArgument[]] {
  return [script.lua, keys.length, ...(keys as readonly string[]), ...(args as readonly ScriptArgument[])];
}

/** A time to live as PX and PEXPIRE take it: whole milliseconds, at least one (Redis refuses 0 and fractions). */
export const ttlArgument = (ms: number): number => Math.max(1, Math.round(ms));
