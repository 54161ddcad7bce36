import { parsePrices } from './prices';

describe('runner prices (RUNNER_PRICES_FILE)', () => {
  it('reads prices per runner type and per tag set, the tags in the rows’ form', () => {
    expect(parsePrices({ per_minute: { runner_type: { instance_type: 0.008 }, tags: { 'docker, arm64': 0.012 } } })).toEqual({
      per_minute: { runner_type: { instance_type: 0.008 }, tags: { 'arm64,docker': 0.012 } },
    });
  });

  it.each([
    [{ per_minute: { tags: { docker: -1 } } }, 'per_minute.tags.docker must be a price per minute'],
    [{ per_minute: { tags: { docker: '0.01' } } }, 'per_minute.tags.docker must be a price per minute'],
    [{ per_minute: { runner_types: {} } }, 'not runner_types'],
    [{ perMinute: {} }, 'expected {"per_minute"'],
    [[1, 2], 'expected {"per_minute"'],
  ])('refuses %j, naming what is wrong', (value, message) => {
    expect(() => parsePrices(value)).toThrow(message);
  });
});
