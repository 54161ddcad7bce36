import { jsonTextBytes } from './otlp-json-size';
import { randomSource } from '../../test/helpers/seeded-random';

// UTF-16 units and pairs from every class JSON.stringify treats differently: plain ASCII, the two escaped
// printable characters, short and \u00XX control escapes, DEL, two- and three-byte UTF-8, U+2028 (not escaped
// by JSON.stringify), surrogate pairs, lone high and low surrogates.
const PIECES = [
  'a',
  'Z',
  '7',
  ' ',
  '"',
  '\\',
  '/',
  '\b',
  '\t',
  '\n',
  '\f',
  '\r',
  '\u0000',
  '\u001f',
  '\u007f',
  'é',
  '\u07ff',
  '€',
  '\u2028',
  '\uffff',
  '😀',
  '\ud800',
  '\udfff',
];
const NUMBERS = [
  0,
  -0,
  1,
  -1,
  7,
  42,
  257,
  2 ** 31 - 1,
  -(2 ** 31),
  2 ** 31,
  2 ** 53 + 2,
  1e21,
  1e-7,
  0.1,
  -1.5e300,
  Number.MIN_VALUE,
  NaN,
  Infinity,
  -Infinity,
];

function randomString(random: () => number): string {
  let text = '';
  const pieces = Math.floor(random() * 12);
  for (let i = 0; i < pieces; i++) text += PIECES[Math.floor(random() * PIECES.length)];
  return text;
}

function randomValue(random: () => number, depth: number): unknown {
  const kind = Math.floor(random() * (depth > 4 ? 6 : 8));
  switch (kind) {
    case 0:
      return randomString(random);
    case 1:
      return NUMBERS[Math.floor(random() * NUMBERS.length)];
    case 2:
      return Math.floor((random() - 0.5) * 2 ** Math.floor(random() * 60));
    case 3:
      return random() < 0.5;
    case 4:
      return null;
    case 5:
      return random() < 0.5 ? undefined : (random() - 0.5) * 10 ** Math.floor(random() * 40 - 20);
    case 6: {
      const array: unknown[] = [];
      const length = Math.floor(random() * 5);
      for (let i = 0; i < length; i++) array.push(randomValue(random, depth + 1));
      return array;
    }
    default: {
      const object: Record<string, unknown> = {};
      const members = Math.floor(random() * 5);
      for (let i = 0; i < members; i++) object[randomString(random)] = randomValue(random, depth + 1);
      return object;
    }
  }
}

describe('jsonTextBytes', () => {
  it('equals the UTF-8 length of JSON.stringify over many shapes, unicode, escapes and odd numbers included', () => {
    const random = randomSource(12);
    for (let i = 0; i < 20_000; i++) {
      const value = randomValue(random, 0);
      const text = JSON.stringify(value);
      const expected = text === undefined ? 0 : Buffer.byteLength(text);
      if (jsonTextBytes(value) !== expected) {
        // The failing shape itself, not only two numbers.
        expect({ value: text, bytes: jsonTextBytes(value) }).toEqual({ value: text, bytes: expected });
      }
    }
  });

  it('measures what JSON.parse gives an OTLP span, own __proto__ member and all, as JSON.stringify writes it', () => {
    const body =
      '{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","name":"caf\\u00e9 \\ud83d\\ude00 \\"x\\"","kind":1,' +
      '"startTimeUnixNano":"1700000000000000000","attributes":[{"key":"k","value":{"doubleValue":1.5e-7}},' +
      '{"key":"n","value":{"intValue":12}}],"__proto__":{"x":[1,null,true]},"status":{}}';
    const span: unknown = JSON.parse(body);
    expect(jsonTextBytes(span)).toBe(Buffer.byteLength(JSON.stringify(span)));
  });
});
