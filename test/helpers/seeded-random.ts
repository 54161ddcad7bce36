// The simulator's seeded generator, for tests and benches: one implementation, which the demo's series uses too.
export { randomSource } from '../../simulator/seeded-random';
