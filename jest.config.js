// Unit specs live next to the code (src/, *.spec.ts); HTTP and e2e tests under test/.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src', '<rootDir>/test'],
  // test/unleash holds the Unleash server's own node_modules, nothing of ours.
  modulePathIgnorePatterns: ['<rootDir>/test/unleash/'],
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/unleash/'],
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
  },
  testTimeout: 30000,
};
