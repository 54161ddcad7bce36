// @ts-check
import eslint from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * One direction of dependencies (STYLE.md "Layout"): features → shared capabilities (runner-auth,
 * internal-api, the store's ports grants, limits, traced-work, flags, collector, outcome-sampling (with parking),
 * pipeline-spans, outbox) → store
 * (the connection the ports share) → config, observability, trace-context, critical-path. Each folder lists what it may
 * not import.
 */
// gitlab-webhooks is GitLab's edge: route, secrets, parsers and spool, telling pipeline-spans what it heard.
const FEATURES = ['job-payload', 'token-auth', 'otlp-gateway', 'gitlab-webhooks', 'reads', 'mcp'];
/**
 * The features a feature may use: the MCP server (SPEC §14) is a second edge over the reads, beside their HTTP
 * controller, and asks ReadsService what the HTTP reads ask it. Never the other way round.
 */
const FEATURE_USES = { mcp: ['reads'] };
// pipeline-spans is shared: the decorator, the gateway and the webhooks tell it what they saw.
const SHARED = ['runner-auth', 'internal-api', 'grants', 'limits', 'traced-work', 'flags', 'collector', 'outcome-sampling', 'pipeline-spans', 'outbox'];
/**
 * The shared capabilities each shared capability may use: gitlab-webhooks → pipeline-spans → outcome-sampling
 * (parking/ beneath it) → outbox → collector, one way.
 */
const SHARED_USES = {
  'runner-auth': ['grants', 'limits'],
  'pipeline-spans': ['traced-work', 'outbox', 'outcome-sampling'],
  // SPEC §11: provisional pipelines' spans park in the store, the outcome decides, kept ones leave through the outbox.
  'outcome-sampling': ['outbox', 'collector'],
  outbox: ['collector'],
  // A traced job remembers the outcome-sampling policy it was picked up under (its type only).
  'traced-work': ['outcome-sampling'],
  // A pickup writes its grant and its traced job in one step (SaveGrant).
  grants: ['traced-work'],
};
/** Every shared capability may use it; it uses only the base. */
const STORE = 'store';
/**
 * critical-path is pure (spans in, the path out, SPEC §12) and below everything that computes it: the reads (a
 * feature) answer it, pipeline-spans (shared) writes it on the spans it emits at a pipeline's end, the CLI prints
 * it. Neither of those may import the other, so the one implementation lives beneath both, beside trace-context.
 */
const BASE = ['config', 'observability', 'trace-context', 'critical-path'];
/**
 * across is pure too (SPEC §13: the rows of job runs, from a trace through the critical path's walk): the reads (a
 * feature) keep and answer them, so it sits beneath every feature and shared capability, above critical-path.
 */
const ACROSS = 'across';

const folders = (names) => names.flatMap((name) => [`../${name}`, `../${name}/*`, `../../${name}/*`]);
const layer = (folder, forbidden, message) => ({
  files: [`src/${folder}/**/*.ts`],
  rules: { 'no-restricted-imports': ['error', { patterns: [{ group: folders(forbidden), message }] }] },
});

export default tseslint.config(
  { ignores: ['dist/', 'build/', 'coverage/', 'node_modules/', 'test/unleash/', 'test/chdb/', 'test/kubernetes/'] },
  eslint.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' }],
      // Non-null assertions mark values the code has just established (a route param, a validated config value).
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  ...FEATURES.map((feature) =>
    layer(
      feature,
      FEATURES.filter((other) => other !== feature && !(FEATURE_USES[feature] ?? []).includes(other)),
      'a feature does not import another feature (FEATURE_USES lists the exceptions)',
    ),
  ),
  ...SHARED.map((shared) =>
    layer(
      shared,
      [...FEATURES, ...SHARED.filter((other) => other !== shared && !(SHARED_USES[shared] ?? []).includes(other))],
      'shared capabilities import only config, observability and the shared capabilities SHARED_USES allows',
    ),
  ),
  layer(STORE, [...FEATURES, ...SHARED], 'the store imports only config and observability'),
  layer(ACROSS, [...FEATURES, ...SHARED, STORE], 'across/ is pure: the rows of job runs over critical-path, beneath the reads'),
  ...BASE.map((base) =>
    layer(
      base,
      [...FEATURES, ...SHARED, STORE, ACROSS, ...BASE.filter((other) => other !== base && !(base === 'observability' && other === 'config'))],
      'config and observability import nothing above them',
    ),
  ),
  {
    // src/otlp is the bottom of the house: OTLP itself, no Nest, nothing from src/ (the gateway, the outbox,
    // the embedded collector, the demo and the tests all build on it).
    files: ['src/otlp/**/*.ts'],
    ignores: ['src/otlp/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ regex: '^(\\.\\./|@nestjs/)', message: 'src/otlp imports nothing from src/' }] }],
    },
  },
  {
    // Its specs may use the shared test helpers, nothing else from src/.
    files: ['src/otlp/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^(\\.\\./(?!\\.\\./test/helpers/)|@nestjs/)', message: 'src/otlp specs import only test helpers from above it' }] },
      ],
    },
  },
  {
    // The simulator (GitLab's hooks, a stock runner, a local collector) and the demo on it run on the product alone;
    // tests and benches may use the simulator, never the other way round.
    files: ['simulator/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['../test/*', '../bench/*'], message: 'simulator/ imports only src/ and its own files' }] }],
    },
  },
  {
    // The export policy and its walkers: no Nest, nothing above them but src/otlp (benchmarked and tested alone).
    files: ['src/otlp-gateway/export-policy/**/*.ts'],
    ignores: ['src/otlp-gateway/export-policy/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^(\\.\\./(?!\\.\\./otlp/)|@nestjs/)', message: 'otlp-gateway/export-policy imports only src/otlp' }] },
      ],
    },
  },
  {
    files: ['src/otlp-gateway/export-policy/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\./(?!\\.\\./otlp/|\\.\\./\\.\\./test/helpers/)|@nestjs/)',
              message: 'otlp-gateway/export-policy specs import only src/otlp and test helpers from above it',
            },
          ],
        },
      ],
    },
  },
);
