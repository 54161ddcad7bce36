// Unit specs live next to the code (src/, *.spec.ts); HTTP and e2e tests under test/.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src', '<rootDir>/test'],
  // test/unleash, test/chdb and test/kubernetes hold their own node_modules, nothing of ours.
  modulePathIgnorePatterns: ['<rootDir>/test/unleash/', '<rootDir>/test/chdb/', '<rootDir>/test/kubernetes/'],
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/unleash/', '<rootDir>/test/chdb/', '<rootDir>/test/kubernetes/'],
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
  },
  testTimeout: 30000,
};
