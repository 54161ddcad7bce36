/**
 * The UTF-8 byte length of `JSON.stringify(value)`, without building the text: the JSON enforcement measures
 * every span against the per-span limit (SPEC §6), and stringifying each span only to count its bytes cost
 * a fifth of the JSON path (issue 12 profile). For what JSON.parse produces and edits of it: plain objects,
 * arrays, strings, numbers, booleans, null (undefined members are left out, as JSON.stringify leaves them).
 * A `value` nested too deeply for the stack throws the RangeError JSON.stringify would throw.
 */
export function jsonTextBytes(value: unknown): number {
  switch (typeof value) {
    case 'string':
      return jsonStringBytes(value);
    case 'number':
      return jsonNumberBytes(value);
    case 'boolean':
      return value ? 4 : 5;
    case 'object':
      if (value === null) return 4;
      return Array.isArray(value) ? jsonArrayBytes(value) : jsonObjectBytes(value as Record<string, unknown>);
    default:
      // undefined, functions, symbols: JSON.stringify writes nothing for them (null inside an array, see below).
      return 0;
  }
}

function jsonArrayBytes(array: unknown[]): number {
  const length = array.length;
  // Brackets and the commas between elements.
  let bytes = length === 0 ? 2 : length + 1;
  for (let i = 0; i < length; i++) {
    const element = array[i];
    bytes += omitted(element) ? 4 /* null */ : jsonTextBytes(element);
  }
  return bytes;
}

function jsonObjectBytes(object: Record<string, unknown>): number {
  let bytes = 2;
  let members = 0;
  for (const key in object) {
    if (!Object.prototype.hasOwnProperty.call(object, key)) continue;
    const member = object[key];
    if (omitted(member)) continue;
    // Key, colon, value.
    bytes += jsonStringBytes(key) + 1 + jsonTextBytes(member);
    members++;
  }
  return members === 0 ? bytes : bytes + members - 1;
}

function omitted(value: unknown): boolean {
  return value === undefined || typeof value === 'function' || typeof value === 'symbol';
}

function jsonNumberBytes(value: number): number {
  if (!Number.isFinite(value)) return 4; // null
  // Integers below 2^31 are most of OTLP's numbers (kinds, codes, counts, flags): counted without a string.
  if ((value | 0) === value && !Object.is(value, -0)) {
    let digits = value < 0 ? 2 : 1;
    let rest = value < 0 ? -value : value;
    while (rest >= 10) {
      rest = (rest / 10) | 0;
      digits++;
    }
    return digits;
  }
  return String(value).length;
}

/** Quotes plus each UTF-16 unit as JSON.stringify writes it: escaped, or as UTF-8 (well-formed JSON.stringify). */
function jsonStringBytes(text: string): number {
  const length = text.length;
  let bytes = length + 2;
  for (let i = 0; i < length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0x20 && unit < 0x7f) {
      if (unit === 0x22 /* " */ || unit === 0x5c /* \ */) bytes += 1;
    } else if (unit < 0x20) {
      // \b \t \n \f \r have two-character escapes, every other control character \u00XX.
      bytes += unit === 0x08 || unit === 0x09 || unit === 0x0a || unit === 0x0c || unit === 0x0d ? 1 : 5;
    } else if (unit < 0x80) {
      // DEL is written as is.
    } else if (unit < 0x800) {
      bytes += 1;
    } else if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < length && isLowSurrogate(text.charCodeAt(i + 1))) {
      // A surrogate pair: one code point, four bytes for two units.
      bytes += 2;
      i++;
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      // A lone surrogate is written as \uXXXX.
      bytes += 5;
    } else {
      bytes += 2;
    }
  }
  return bytes;
}

function isLowSurrogate(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}
