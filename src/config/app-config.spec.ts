import { ConfigError, loadConfig, storeMode } from './app-config';

const problemsOf = (env: Record<string, string>) => {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
};

describe('loadConfig', () => {
  it('runs on embedded defaults with an empty environment', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({ ROLE: 'all', INTERNAL_PORT: 8080, GATEWAY_PORT: 4318, BODY_LIMIT_BYTES: 8 * 1024 * 1024 });
    expect(config.REDIS_URL).toBeUndefined();
    expect(config.UNLEASH_URL).toBeUndefined();
  });

  it('parses numbers, lists and booleans from their text', () => {
    const config = loadConfig({
      INTERNAL_PORT: '9090',
      INTERNAL_API_ISSUERS: 'gitlab, gitlab-canary',
      HOSTED_RUNNER_IDS: '1,2',
      UNADVERTISED_RUNNERS_ELIGIBLE: 'false',
    });
    expect(config.INTERNAL_PORT).toBe(9090);
    expect(config.INTERNAL_API_ISSUERS).toEqual(['gitlab', 'gitlab-canary']);
    expect(config.HOSTED_RUNNER_IDS).toEqual([1, 2]);
    expect(config.UNADVERTISED_RUNNERS_ELIGIBLE).toBe(false);
  });

  it('names every bad variable once, with the value it got', () => {
    const problems = problemsOf({ INTERNAL_PORT: '70000', ROLE: 'edge', UNLEASH_URL: 'not a url', STORE_TIMEOUT_MS: '1.5' });
    expect(problems.map((line) => line.split(':')[0]).sort()).toEqual(['INTERNAL_PORT', 'ROLE', 'STORE_TIMEOUT_MS', 'UNLEASH_URL']);
    expect(problems.find((line) => line.startsWith('ROLE'))).toContain('"edge"');
  });

  it('refuses ROLE=gateway without a shared store in one line, unless per-process quotas are intended', () => {
    const gateway = { ROLE: 'gateway', AUTH_URL: 'http://control:8080/internal/ci/telemetry/auth', OTLP_UPSTREAM_URL: 'http://otel-collector:4318' };
    const problems = problemsOf(gateway);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^REDIS_URL: required with ROLE=gateway.*GATEWAY_PER_PROCESS_QUOTAS=true/);
    expect(problemsOf({ ...gateway, REDIS_URL: 'redis://redis:6379' })).toEqual([]);
    expect(problemsOf({ ...gateway, GATEWAY_PER_PROCESS_QUOTAS: 'true' })).toEqual([]);
    expect(problemsOf({ REDIS_URL: '' })).toEqual([]);
  });

  it('keeps exports in the embedded collector unless OTLP_UPSTREAM_URL is set, and refuses that for ROLE=gateway in one line', () => {
    const defaults = loadConfig({});
    expect(defaults.OTLP_UPSTREAM_URL).toBeUndefined();
    expect(defaults.DATA_DIR).toBe('.data');
    expect(defaults.LOCAL_COLLECTOR_MAX_BYTES).toBe(64 * 1024 * 1024);
    expect(problemsOf({ LOCAL_COLLECTOR_MAX_BYTES: '100' })[0]).toMatch(/^LOCAL_COLLECTOR_MAX_BYTES: /);
    const gateway = { ROLE: 'gateway', AUTH_URL: 'http://control:8080/internal/ci/telemetry/auth', REDIS_URL: 'redis://redis:6379' };
    expect(problemsOf(gateway)).toEqual(['OTLP_UPSTREAM_URL: required with ROLE=gateway (an edge gateway keeps no exports on its own disk)']);
  });

  it('hands runners a URL that follows GATEWAY_PORT unless GATEWAY_PUBLIC_URL is set', () => {
    expect(loadConfig({}).GATEWAY_PUBLIC_URL).toBe('http://localhost:4318');
    expect(loadConfig({ GATEWAY_PORT: '4400' }).GATEWAY_PUBLIC_URL).toBe('http://localhost:4400');
    expect(loadConfig({ GATEWAY_PORT: '4400', GATEWAY_PUBLIC_URL: 'https://otlp.example' }).GATEWAY_PUBLIC_URL).toBe('https://otlp.example');
  });

  it('refuses, one line each, ports and addresses that cannot be right together', () => {
    expect(problemsOf({ INTERNAL_PORT: '9000', GATEWAY_PORT: '9000' })).toEqual([
      'GATEWAY_PORT: 9000 is INTERNAL_PORT too; ROLE=all listens on both, so give them different ports',
    ]);
    expect(problemsOf({ ROLE: 'control', INTERNAL_PORT: '9000', GATEWAY_PORT: '9000' })).toEqual([
      "GATEWAY_PUBLIC_URL: http://localhost:9000 is this process's internal API (INTERNAL_PORT=9000), not the OTLP gateway runners must be handed",
    ]);
    expect(problemsOf({ ROLE: 'control', INTERNAL_PORT: '9000', GATEWAY_PORT: '9000', GATEWAY_PUBLIC_URL: 'https://otlp.example' })).toEqual([]);
    expect(problemsOf({ GATEWAY_PORT: '0' })).toEqual([
      'GATEWAY_PUBLIC_URL: required with GATEWAY_PORT=0, since runners must be handed the port the gateway actually gets',
    ]);
    expect(problemsOf({ INTERNAL_PORT: '0', GATEWAY_PORT: '0', GATEWAY_PUBLIC_URL: 'http://127.0.0.1:4318' })).toEqual([]);
    expect(problemsOf({ GATEWAY_PUBLIC_URL: 'http://127.0.0.1:8080' })).toEqual([
      "GATEWAY_PUBLIC_URL: http://127.0.0.1:8080 is this process's internal API (INTERNAL_PORT=8080), not the OTLP gateway runners must be handed",
    ]);
    // Another machine's loopback is not this process's.
    expect(problemsOf({ HOST: '10.1.2.3', GATEWAY_PUBLIC_URL: 'http://127.0.0.1:8080' })).toEqual([]);
    expect(problemsOf({ OTLP_UPSTREAM_URL: 'http://localhost:4318' })).toEqual([
      "OTLP_UPSTREAM_URL: http://localhost:4318 is this process's own gateway (GATEWAY_PORT=4318), so exports would loop; point it at the OpenTelemetry Collector's OTLP/HTTP receiver",
    ]);
    expect(problemsOf({ ROLE: 'control', OTLP_UPSTREAM_URL: 'http://localhost:4318' })).toEqual([]);
  });

  it('says which schemes a URL takes, and never echoes a password back', () => {
    expect(problemsOf({ REDIS_URL: 'http://:hunter2@redis:6379' })).toEqual([
      'REDIS_URL: must be a redis:// or rediss:// (TLS) URL, e.g. redis://localhost:6379 (got "http://:***@redis:6379")',
    ]);
    expect(problemsOf({ UNLEASH_URL: 'unleash:4242' })).toEqual(['UNLEASH_URL: must be an http:// or https:// URL (got "unleash:4242")']);
  });

  it('does not read "false" as true', () => {
    expect(problemsOf({ UNADVERTISED_RUNNERS_ELIGIBLE: 'nope' })).toHaveLength(1);
  });

  it('picks the store from which Redis variables are set, and refuses an ambiguous or incomplete one', () => {
    expect(storeMode(loadConfig({}))).toBe('memory');
    expect(storeMode(loadConfig({ REDIS_URL: 'rediss://redis:6380' }))).toBe('single');
    const sentinel = loadConfig({ REDIS_SENTINELS: 'sentinel-0:26379, [::1]:26379', REDIS_SENTINEL_MASTER: 'cjt' });
    expect(storeMode(sentinel)).toBe('sentinel');
    expect(sentinel.REDIS_SENTINELS).toEqual(['sentinel-0:26379', '[::1]:26379']);
    expect(storeMode(loadConfig({ REDIS_CLUSTER_NODES: 'redis-0:6379,redis-1:6379', REDIS_TLS: 'true' }))).toBe('cluster');

    expect(problemsOf({ REDIS_URL: 'redis://a:6379', REDIS_CLUSTER_NODES: 'b:6379' })).toEqual([
      'REDIS_CLUSTER_NODES: cannot be combined with REDIS_URL (set exactly one of them)',
    ]);
    expect(problemsOf({ REDIS_SENTINELS: 'sentinel-0:26379' })[0]).toMatch(/^REDIS_SENTINEL_MASTER: required/);
    expect(problemsOf({ REDIS_CLUSTER_NODES: 'redis-0' })[0]).toMatch(/^REDIS_CLUSTER_NODES: each entry must be host:port/);
    // A gateway replica shares quotas through any of the three.
    const gateway = { ROLE: 'gateway', AUTH_URL: 'http://control:8080/internal/ci/telemetry/auth', OTLP_UPSTREAM_URL: 'http://otel-collector:4318' };
    expect(problemsOf({ ...gateway, REDIS_CLUSTER_NODES: 'redis-0:6379' })).toEqual([]);
    expect(problemsOf({ ...gateway, REDIS_SENTINELS: 'sentinel-0:26379', REDIS_SENTINEL_MASTER: 'cjt' })).toEqual([]);
    expect(problemsOf(gateway)[0]).toMatch(/^REDIS_URL: required with ROLE=gateway/);
    expect(problemsOf({ REDIS_URL: 'redis://a:6379', REDIS_SENTINEL_PASSWORD_FILE: '/run/secrets/x' })[0]).toMatch(
      /^REDIS_SENTINEL_PASSWORD_FILE: only meaningful with REDIS_SENTINELS/,
    );
  });
});
