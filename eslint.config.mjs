// @ts-check
import eslint from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * One direction of dependencies (STYLE.md "Layout"): features → shared capabilities (runner-auth,
 * internal-api, grants, flags, collector, pipeline-spans) → config, observability. Each folder lists what it
 * may not import.
 */
const FEATURES = ['job-payload', 'token-auth', 'otlp-gateway'];
// pipeline-spans is shared: the decorator and the gateway tell it what they saw (its webhook route is its own edge).
const SHARED = ['runner-auth', 'internal-api', 'grants', 'flags', 'collector', 'pipeline-spans'];
/** The shared capabilities each shared capability may use. */
const SHARED_USES = { 'runner-auth': ['grants'], 'pipeline-spans': ['grants', 'collector'] };
const BASE = ['config', 'observability', 'trace-context'];

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
      FEATURES.filter((other) => other !== feature),
      'a feature does not import another feature',
    ),
  ),
  ...SHARED.map((shared) =>
    layer(
      shared,
      [...FEATURES, ...SHARED.filter((other) => other !== shared && !(SHARED_USES[shared] ?? []).includes(other))],
      'shared capabilities import only config, observability and the shared capabilities SHARED_USES allows',
    ),
  ),
  ...BASE.map((base) =>
    layer(
      base,
      [...FEATURES, ...SHARED, ...BASE.filter((other) => other !== base && !(base === 'observability' && other === 'config'))],
      'config and observability import nothing above them',
    ),
  ),
  {
    // The OTLP wire code is a leaf: no Nest, nothing from above wire/ (it is benchmarked and tested alone).
    files: ['src/otlp-gateway/wire/**/*.ts'],
    ignores: ['src/otlp-gateway/wire/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['../*', '@nestjs/*'], message: 'otlp-gateway/wire imports nothing above it' }] }],
    },
  },
  {
    // Its specs may use the shared test helpers, nothing else above wire/.
    files: ['src/otlp-gateway/wire/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(\\.\\./(?!\\.\\./\\.\\./test/helpers/)|@nestjs/)', message: 'otlp-gateway/wire specs import only test helpers from above it' },
          ],
        },
      ],
    },
  },
  {
    // The export policy and its walkers: no Nest, only the wire code and src/otlp below them (benchmarked and tested alone).
    files: ['src/otlp-gateway/export-policy/**/*.ts'],
    ignores: ['src/otlp-gateway/export-policy/**/*.spec.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^(\\.\\./(?!wire/|\\.\\./otlp/)|@nestjs/)', message: 'otlp-gateway/export-policy imports only wire/ and src/otlp' }] },
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
              regex: '^(\\.\\./(?!wire/|\\.\\./otlp/|\\.\\./\\.\\./test/helpers/)|@nestjs/)',
              message: 'otlp-gateway/export-policy specs import only wire/, src/otlp and test helpers from above it',
            },
          ],
        },
      ],
    },
  },
);
