import { MAX_JSON_DEPTH, payloadJson, scanRequestText } from './job-payload-text';

/** The nesting JSON.parse itself sees: the reference the scan must agree with. */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  const children = Array.isArray(value) ? value : Object.values(value as Record<string, unknown>);
  return 1 + children.reduce<number>((deepest, child) => Math.max(deepest, depthOf(child)), 0);
}

const nestsDeeperThan = (text: string, maxDepth: number) => scanRequestText(text, maxDepth).tooDeep;

/** A small deterministic generator, so a failure names a reproducible case. */
function randomSource(seed: number) {
  return (below: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % below;
}

describe('scanRequestText: nesting', () => {
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
    const random = randomSource(7);
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
    expect(scanRequestText('{"payload": {"unterminated: [[[[', MAX_JSON_DEPTH)).toEqual({ tooDeep: false });
  });
});

/**
 * JSON text of `value` as other encoders may write it: spaces and newlines anywhere between tokens,
 * keys escaped, some members sent twice (the first time with a value JSON.parse then replaces).
 */
function anyJsonText(value: unknown, random: (below: number) => number): string {
  const space = () => ['', ' ', '\n  ', '\t'][random(4)];
  const key = (name: string) =>
    random(3) === 0 ? `"${[...name].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"` : JSON.stringify(name);
  if (Array.isArray(value)) return `[${space()}${value.map((element) => anyJsonText(element, random)).join(`${space()},${space()}`)}${space()}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.entries(value).map(([name, member]) => {
      const decoy = random(5) === 0 ? `${key(name)}${space()}:${space()}{"replaced":[1,"]"]}${space()},${space()}` : '';
      return `${decoy}${key(name)}${space()}:${space()}${anyJsonText(member, random)}`;
    });
    return `{${space()}${members.join(`${space()},${space()}`)}${space()}}`;
  }
  return JSON.stringify(value);
}

const DECORATOR_KEYS = new Set(['TRACEPARENT', 'TRACESTATE', 'CI_JOB_TELEMETRY_OTLP_ENDPOINT']);

/** What the decorator does to a payload (SPEC §4), on objects: the reference the text must parse to. */
function decorated(payload: Record<string, unknown>): Record<string, unknown> {
  const variables = ((payload.variables as Array<{ key?: unknown }> | undefined) ?? []).filter((variable) => !DECORATOR_KEYS.has(variable.key as string));
  return {
    ...payload,
    variables: [...variables, { key: 'TRACEPARENT', value: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03', public: true, masked: false }],
    features: { ...(payload.features as object), tracing: { trace_id: '0af7651916cd43dd8448eb211c80319c', otel_endpoints: [{ url: 'http://gw/v1/traces' }] } },
  };
}

function randomPayload(random: (below: number) => number): Record<string, unknown> {
  const strings = ['make', 'echo "[{"', 'a\\b', 'ü € 😀', '\u2028', '', 'x'.repeat(200)];
  const string = () => strings[random(strings.length)];
  const payload: Record<string, unknown> = { id: 1 + random(1e9), token: string() };
  if (random(4) !== 0) {
    payload.variables = Array.from({ length: random(6) }, () => ({
      key: ['CI_JOB_ID', 'TRACEPARENT', 'TRACESTATE', 'CI_JOB_TELEMETRY_OTLP_ENDPOINT', 'OTHER'][random(5)],
      value: string(),
      public: random(2) === 0,
    }));
  }
  if (random(4) !== 0) payload.features = random(2) === 0 ? {} : { trace_sections: true, tracing: { trace_id: 'stale' }, list: [1, [2, [3]]] };
  if (random(2) === 0) payload.steps = [{ name: 'script', script: Array.from({ length: random(4) }, string) }, { nested: [[[string()]]] }];
  if (random(3) === 0) payload.image = random(2) === 0 ? null : { name: string(), ports: [] };
  if (random(3) === 0) payload.allow_git_fetch = random(2) === 0;
  return payload;
}

describe('payloadJson', () => {
  it('writes an undecorated payload back exactly as it was sent', () => {
    const random = randomSource(11);
    for (let i = 0; i < 300; i++) {
      const payloadText = anyJsonText(randomPayload(random), random);
      const text = `{"runner":{"id":17},"payload":${payloadText},"job":{"id":[1,{"payload":{}}]}}`;
      const original = (JSON.parse(text) as { payload: Record<string, unknown> }).payload;
      const { payload: layout } = scanRequestText(text, MAX_JSON_DEPTH);
      expect(payloadJson(text, layout!, original, original)).toBe(payloadText);
    }
  });

  it('writes a decorated payload that parses to exactly the decorated object, however the request was written', () => {
    const random = randomSource(13);
    for (let i = 0; i < 1000; i++) {
      const sent = randomPayload(random);
      // The payload sometimes comes twice; JSON.parse keeps the last, and so must the layout.
      const decoy = random(4) === 0 ? `"payload":${anyJsonText(randomPayload(random), random)},` : '';
      const text = `{ "job": {"id": 1}, ${decoy}"p\\u0061yload" : ${anyJsonText(sent, random)} , "runner": {"features": {"tracing": true}} }`;
      const original = (JSON.parse(text) as { payload: Record<string, unknown> }).payload;
      const expected = decorated(original);
      const { payload: layout } = scanRequestText(text, MAX_JSON_DEPTH);
      const written = payloadJson(text, layout!, original, expected);
      expect(JSON.parse(written)).toEqual(expected);
      expect(Object.keys(JSON.parse(written) as object)).toEqual(Object.keys(expected));
    }
  });

  it('reuses the text of what the decoration kept, and writes only what it changed', () => {
    const sent = {
      id: 1001,
      steps: [{ script: ['make  test'] }],
      variables: [
        { key: 'A', value: '1' },
        { key: 'TRACEPARENT', value: 'old' },
      ],
    };
    const text = `{"payload":${JSON.stringify(sent, null, 1)}}`;
    const original = (JSON.parse(text) as { payload: Record<string, unknown> }).payload;
    const written = payloadJson(text, scanRequestText(text, MAX_JSON_DEPTH).payload!, original, decorated(original));
    // Kept members and elements keep the sender's formatting; the new ones are compact.
    expect(written).toContain('"steps": [\n  {\n   "script": [\n    "make  test"\n   ]\n  }\n ]');
    expect(written).toContain('"variables":[\n  {\n   "key": "A",\n   "value": "1"\n  },{"key":"TRACEPARENT"');
    expect(written).not.toContain('old');
  });
});

describe('scanRequestText: keys that could poison a prototype', () => {
  const plain = (text: string) => scanRequestText(text, MAX_JSON_DEPTH).plain;

  it('finds __proto__ and constructor keys at any depth, as written or escaped', () => {
    for (const text of [
      '{"__proto__":{"admin":true}}',
      '{"payload":{"a":[{"b":{"constructor":{"prototype":{}}}}]}}',
      '[1,{"x":2},{"__proto__":3}]',
      '{"a":"b","\\u005f_proto__":1}',
      '{"a":{"cons\\u0074ructor":1}}',
    ]) {
      expect(plain(text)).toBe(false);
    }
  });

  it('lets a job payload whose strings, not keys, say __proto__ go to JSON.parse alone', () => {
    for (const text of [
      JSON.stringify({ payload: { steps: [{ script: ['echo "__proto__"', 'constructor'] }], variables: [{ key: 'A', value: '__proto__' }] } }),
      '{"a":["__proto__","constructor"],"longer_key_without_escapes":1}',
    ]) {
      expect(plain(text)).toBe(true);
    }
  });

  it('says nothing about a text it could not scan to its end', () => {
    expect(plain('{"a":"never closed')).not.toBe(true);
  });
});
