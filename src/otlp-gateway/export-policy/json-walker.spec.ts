import { quoteLossyNumbers } from './json-walker';
import { randomSource } from '../../../test/helpers/seeded-random';

// Number tokens JSON.parse keeps (small, safe 16-digit, fractions, exponents, -0, underflow) and ones it
// changes (integers beyond 2^53, overflow to Infinity): the first group must be left as written.
const KEPT = [
  '0',
  '-0',
  '7',
  '257',
  '9007199254740991',
  '-9007199254740991',
  '1234567890123456',
  '0.1234567890123456789',
  '1.5e-7',
  '1.5e300',
  '1e308',
  '1E-400',
  '12345678901234567.5',
];
const CHANGED = ['9007199254740993', '-9007199254740993', '1700000000000000123', '123456789012345678901234567890', '1e400', '9.99e308', '-1E+999'];
// String contents that look like numbers in value position, escapes, and hex ids with exponent-like runs.
const STRING_PIECES = [
  'a',
  ': 12345678901234567',
  ',99999999999999999',
  '[1e400',
  '\\"',
  '\\\\',
  '\\":1e999',
  '4bf92f3577b34da6a3ce929d0e0e4736',
  '1700000000000000000',
  ' ',
];
const SPACES = ['', ' ', '\n  ', '\t'];

function pick<T>(random: () => number, values: readonly T[]): T {
  return values[Math.floor(random() * values.length)];
}

/** A JSON text and the same text with every lossy number token quoted, built side by side. */
function randomValue(random: () => number, depth: number): [input: string, expected: string] {
  // The root is an array or an object, as an export's root must be.
  const kind = depth === 0 ? 3 + Math.floor(random() * 2) : Math.floor(random() * (depth > 3 ? 3 : 5));
  switch (kind) {
    case 0: {
      const token = pick(random, KEPT);
      return [token, token];
    }
    case 1: {
      const token = pick(random, CHANGED);
      return [token, `"${token}"`];
    }
    case 2: {
      let content = '';
      const pieces = Math.floor(random() * 4);
      for (let i = 0; i < pieces; i++) content += pick(random, STRING_PIECES);
      return [`"${content}"`, `"${content}"`];
    }
    case 3: {
      const elements = Array.from({ length: Math.floor(random() * 4) }, () => randomValue(random, depth + 1));
      const space = pick(random, SPACES);
      return [`[${space}${elements.map(([input]) => input).join(`,${space}`)}]`, `[${space}${elements.map(([, expected]) => expected).join(`,${space}`)}]`];
    }
    default: {
      const members = Array.from(
        { length: Math.floor(random() * 4) },
        () => [randomValue(random, 2)[0].startsWith('"') ? '"k:1e400"' : '"key"', randomValue(random, depth + 1)] as const,
      );
      const space = pick(random, SPACES);
      return [
        `{${members.map(([key, [input]]) => `${key}:${space}${input}`).join(',')}}`,
        `{${members.map(([key, [, expected]]) => `${key}:${space}${expected}`).join(',')}}`,
      ];
    }
  }
}

describe('quoteLossyNumbers', () => {
  it('quotes exactly the number tokens JSON.parse would change, never text inside strings, over many texts', () => {
    const random = randomSource(7);
    for (let i = 0; i < 20_000; i++) {
      const [input, expected] = randomValue(random, 0);
      const quoted = quoteLossyNumbers(input);
      if (quoted !== expected) expect({ input, quoted }).toEqual({ input, quoted: expected });
      // What reaches the collector parses, and every changed number arrives as the decimal string it was.
      expect(() => JSON.parse(quoted)).not.toThrow();
    }
  });

  it('without the string walk, either gives the same values or text JSON.parse refuses, never other values', () => {
    const random = randomSource(8);
    let refused = 0;
    for (let i = 0; i < 20_000; i++) {
      const [input, expected] = randomValue(random, 0);
      let guessed: unknown;
      try {
        guessed = JSON.parse(quoteLossyNumbers(input, true));
      } catch {
        refused++;
        continue;
      }
      expect(guessed).toEqual(JSON.parse(expected));
    }
    // The generator puts number-like text in strings often enough for the refusals to be exercised.
    expect(refused).toBeGreaterThan(100);
  });

  it('returns the text itself when nothing needs quoting, as for what the OTel SDK JSON exporter sends', () => {
    const text = '{"startTimeUnixNano":"1700000000000000000","traceId":"4bf92f3577b34da6a3ce929d0e0e4736","intValue":12,"doubleValue":1.5e-7}';
    expect(quoteLossyNumbers(text)).toBe(text);
  });
});
