/**
 * What the Collector's OTLP/JSON reader (pdata) refuses in a parsed OTLP/JSON message: the JSON counterpart of
 * otlp-decodable.ts. The reader fails the whole request on one value it cannot read, so the gateway forwards
 * nothing it could not read (JSON exports are joined too: a kept pipeline's parked batch is one request).
 *
 * pdata's rules, member by member (both the lowerCamelCase and the original snake_case names are read, unknown
 * members skipped):
 * - ids are hex strings of exactly 32 (trace) or 16 (span) digits, or empty;
 * - strings are strings; bytes are standard padded base64;
 * - 32- and 64-bit integers are JSON numbers or decimal strings within their range; enums a number or a name;
 * - booleans are true or false; doubles numbers (or "NaN", "Infinity", "-Infinity");
 * - messages are objects and repeated fields arrays; null stands for an absent message, string or array, but not
 *   for a number or a boolean.
 */
import { OtlpMessageName, OtlpScalarType, otlpFields } from './otlp-fields';

type JsonKind = 'string' | 'bytes' | 'traceId' | 'spanId' | 'uint32' | 'int32' | 'uint64' | 'int64' | 'enum' | 'bool' | 'double';

/** The members of one OTLP/JSON message, by both spellings. */
export interface JsonMessageRule {
  readonly name: string;
  readonly members: ReadonlyMap<string, JsonMember>;
}

interface JsonMember {
  readonly name: string;
  readonly kind: JsonKind | JsonMessageRule;
  readonly repeated: boolean;
}

/** How OTLP/JSON writes each scalar type of the table: 32-bit integers as numbers, 64-bit ones as numbers or strings. */
const JSON_KINDS: Readonly<Record<OtlpScalarType, JsonKind>> = {
  string: 'string',
  bytes: 'bytes',
  TraceID: 'traceId',
  SpanID: 'spanId',
  bool: 'bool',
  enum: 'enum',
  int32: 'int32',
  sint32: 'int32',
  int64: 'int64',
  sfixed64: 'int64',
  uint32: 'uint32',
  fixed32: 'uint32',
  uint64: 'uint64',
  fixed64: 'uint64',
  double: 'double',
};

const rules = new Map<OtlpMessageName, JsonMessageRule>();

/** The rule of a message of the OTLP table, with the rules of the messages it holds (made once each). */
function jsonRule(message: OtlpMessageName): JsonMessageRule {
  const made = rules.get(message);
  if (made !== undefined) return made;
  const members = new Map<string, JsonMember>();
  const rule: JsonMessageRule = { name: message, members };
  // Kept before its members are linked: AnyValue and ArrayValue hold each other.
  rules.set(message, rule);
  for (const field of otlpFields(message)) {
    if (field.protobufOnly) continue;
    const member = { name: field.name, kind: field.message === undefined ? JSON_KINDS[field.scalar!] : jsonRule(field.message), repeated: field.repeated };
    members.set(field.name, member);
    members.set(field.jsonName, member);
  }
  return rule;
}

export const JSON_RESOURCE_RULE = jsonRule('Resource');
export const JSON_SCOPE_RULE = jsonRule('InstrumentationScope');
export const JSON_SPAN_RULE = jsonRule('Span');
export const JSON_LOG_RECORD_RULE = jsonRule('LogRecord');

/** As for protobuf: beyond this depth a message is refused rather than walked. */
const MAX_JSON_DEPTH = 64;

const HEX = /^[0-9a-fA-F]*$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const UNSIGNED = /^\d+$/;
const SIGNED = /^-?\d+$/;
const DOUBLE_NAMES = new Set(['NaN', 'Infinity', '-Infinity']);
const UINT32_MAX = 0xffffffff;
const INT32_MIN = -0x80000000;
const INT32_MAX = 0x7fffffff;

/**
 * Why the Collector could not read `message` as the message `rule`, or `undefined` when it can. Allocates nothing
 * for a message it can read, apart from a decimal string's range check.
 */
export function jsonUndecodableReason(message: unknown, rule: JsonMessageRule, depth = 0): string | undefined {
  if (message === null || message === undefined) return undefined;
  if (typeof message !== 'object' || Array.isArray(message)) return `${rule.name} is not an object`;
  if (depth > MAX_JSON_DEPTH) return `${rule.name}: nested deeper than ${MAX_JSON_DEPTH} messages`;
  const object = message as Record<string, unknown>;
  for (const key in object) {
    const member = rule.members.get(key);
    if (member === undefined) continue;
    const value = object[key];
    if (value === undefined) continue;
    if (member.repeated) {
      if (value === null) continue;
      if (!Array.isArray(value)) return `${rule.name}.${key} is not an array`;
      for (const element of value) {
        const reason = memberReason(rule, key, member, element, depth);
        if (reason !== undefined) return reason;
      }
    } else {
      const reason = memberReason(rule, key, member, value, depth);
      if (reason !== undefined) return reason;
    }
  }
  return undefined;
}

function memberReason(rule: JsonMessageRule, key: string, member: JsonMember, value: unknown, depth: number): string | undefined {
  const { kind } = member;
  if (typeof kind !== 'string') return jsonUndecodableReason(value, kind, depth + 1);
  return valueFits(kind, value) ? undefined : `${rule.name}.${key} is not ${KIND_NAMES[kind]}`;
}

const KIND_NAMES: Record<JsonKind, string> = {
  string: 'a string',
  bytes: 'padded base64',
  traceId: '32 hex digits',
  spanId: '16 hex digits',
  uint32: 'a uint32',
  int32: 'an int32',
  uint64: 'a uint64',
  int64: 'an int64',
  enum: 'an enum number or name',
  bool: 'true or false',
  double: 'a number',
};

function valueFits(kind: JsonKind, value: unknown): boolean {
  switch (kind) {
    case 'string':
      return value === null || typeof value === 'string';
    case 'bytes':
      return value === null || (typeof value === 'string' && BASE64.test(value));
    case 'traceId':
      return value === null || (typeof value === 'string' && (value.length === 32 || value.length === 0) && HEX.test(value));
    case 'spanId':
      return value === null || (typeof value === 'string' && (value.length === 16 || value.length === 0) && HEX.test(value));
    case 'bool':
      return typeof value === 'boolean';
    case 'double':
      return typeof value === 'number' || (typeof value === 'string' && (DOUBLE_NAMES.has(value) || (value.trim() !== '' && !Number.isNaN(Number(value)))));
    case 'enum':
      return typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value) && value >= INT32_MIN && value <= INT32_MAX);
    case 'uint32':
      return integerFits(value, UNSIGNED, 0n, BigInt(UINT32_MAX));
    case 'int32':
      return integerFits(value, SIGNED, BigInt(INT32_MIN), BigInt(INT32_MAX));
    case 'uint64':
      return integerFits(value, UNSIGNED, 0n, 0xffffffffffffffffn);
    case 'int64':
      return integerFits(value, SIGNED, -0x8000000000000000n, 0x7fffffffffffffffn);
    default: {
      const unknownKind: never = kind;
      throw new TypeError(`unknown JSON kind ${String(unknownKind)}`);
    }
  }
}

/** A JSON number that is an integer in range, or a decimal string of one (the walker quotes numbers past 2^53). */
function integerFits(value: unknown, digits: RegExp, min: bigint, max: bigint): boolean {
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= Number(min) && value <= Number(max);
  if (typeof value !== 'string' || !digits.test(value)) return false;
  const integer = BigInt(value);
  return integer >= min && integer <= max;
}
