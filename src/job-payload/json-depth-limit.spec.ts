import { nestsDeeperThan } from './json-depth-limit';

/** The nesting JSON.parse itself sees: the reference the scan must agree with. */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  const children = Array.isArray(value) ? value : Object.values(value as Record<string, unknown>);
  return 1 + children.reduce<number>((deepest, child) => Math.max(deepest, depthOf(child)), 0);
}

describe('nestsDeeperThan', () => {
  it('lets a body at the limit through and refuses one a level deeper', () => {
    const body = JSON.stringify({ a: [{ b: ['ü', { c: 1 }] }] });
    expect(nestsDeeperThan(body, 5)).toBe(false);
    expect(nestsDeeperThan('{"a":[{"b":[1,{"c":[]}]}]}', 5)).toBe(true);
  });

  it('does not count brackets inside strings, escaped quotes and backslashes included', () => {
    for (const script of ['[[[{{{ \\" [[[ "[[[[', 'ends in a backslash \\', '\\\\"[[[', '"', '\\"\\\\\\"[{', '€ [ 😀 {']) {
      const body = JSON.stringify({ script, key: [script] });
      expect(nestsDeeperThan(body, 2)).toBe(false);
      expect(nestsDeeperThan(body, 1)).toBe(true);
    }
  });

  it('agrees with the parsed nesting on bodies with every kind of string and structure', () => {
    const pieces = ['"a\\\\"', '"\\""', '"[{"', '"\\\\\\""', '1', 'null', '"ü€😀"'];
    let seed = 7;
    const random = (below: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % below;
    const build = (depth: number): string => {
      if (depth === 0 || random(3) === 0) return pieces[random(pieces.length)];
      const members = Array.from({ length: 1 + random(3) }, () => build(depth - 1));
      // Keys unique within their object, so the parsed value keeps every member the scan sees.
      const key = (i: number) => `"k${i}${['', '\\\\', '\\"', '[{', 'ü'][random(5)]}"`;
      return random(2) === 0 ? `[${members.join(',')}]` : `{${members.map((member, i) => `${key(i)}:${member}`).join(',')}}`;
    };
    for (let i = 0; i < 500; i++) {
      const body = build(1 + random(8));
      const depth = depthOf(JSON.parse(body));
      expect([nestsDeeperThan(body, depth), nestsDeeperThan(body, depth - 1)]).toEqual([false, depth > 0]);
    }
  });

  it('leaves a text that is not JSON to the parser', () => {
    expect(nestsDeeperThan('{"unterminated: [[[[', 1)).toBe(false);
  });
});
