import { ConfigError, loadConfig, valueOf, VARIABLE_NAMES } from './app-config';
import { storeMode } from './sections/store';

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
    expect(config).toMatchObject({ process: { role: 'all', internalPort: 8080, gatewayPort: 4318 }, internalApi: { bodyLimitBytes: 8 * 1024 * 1024 } });
    expect(config.store.url).toBeUndefined();
    expect(config.flags.unleashUrl).toBeUndefined();
  });

  it('parses numbers, lists and booleans from their text', () => {
    const config = loadConfig({
      INTERNAL_PORT: '9090',
      INTERNAL_API_ISSUERS: 'gitlab, gitlab-canary',
      HOSTED_RUNNER_IDS: '1,2',
      UNADVERTISED_RUNNERS_ELIGIBLE: 'false',
    });
    expect(config.process.internalPort).toBe(9090);
    expect(config.internalApi.issuers).toEqual(['gitlab', 'gitlab-canary']);
    expect(config.jobPayload.hostedRunnerIds).toEqual([1, 2]);
    expect(config.jobPayload.unadvertisedRunnersEligible).toBe(false);
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
    expect(defaults.collector.upstreamUrl).toBeUndefined();
    expect(defaults.process.dataDir).toBe('.data');
    expect(defaults.collector.localMaxBytes).toBe(64 * 1024 * 1024);
    expect(problemsOf({ LOCAL_COLLECTOR_MAX_BYTES: '100' })[0]).toMatch(/^LOCAL_COLLECTOR_MAX_BYTES: /);
    const gateway = { ROLE: 'gateway', AUTH_URL: 'http://control:8080/internal/ci/telemetry/auth', REDIS_URL: 'redis://redis:6379' };
    expect(problemsOf(gateway)).toEqual(['OTLP_UPSTREAM_URL: required with ROLE=gateway (an edge gateway keeps no exports on its own disk)']);
  });

  it('hands runners a URL that follows GATEWAY_PORT unless GATEWAY_PUBLIC_URL is set', () => {
    expect(loadConfig({}).jobPayload.gatewayPublicUrl).toBe('http://localhost:4318');
    expect(loadConfig({ GATEWAY_PORT: '4400' }).jobPayload.gatewayPublicUrl).toBe('http://localhost:4400');
    expect(loadConfig({ GATEWAY_PORT: '4400', GATEWAY_PUBLIC_URL: 'https://otlp.example' }).jobPayload.gatewayPublicUrl).toBe('https://otlp.example');
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
    expect(storeMode(loadConfig({}).store)).toBe('memory');
    expect(storeMode(loadConfig({ REDIS_URL: 'rediss://redis:6380' }).store)).toBe('single');
    const sentinel = loadConfig({ REDIS_SENTINELS: 'sentinel-0:26379, [::1]:26379', REDIS_SENTINEL_MASTER: 'cjt' }).store;
    expect(storeMode(sentinel)).toBe('sentinel');
    expect(sentinel.sentinels).toEqual(['sentinel-0:26379', '[::1]:26379']);
    expect(storeMode(loadConfig({ REDIS_CLUSTER_NODES: 'redis-0:6379,redis-1:6379', REDIS_TLS: 'true' }).store)).toBe('cluster');

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

describe('the sections', () => {
  it('read each variable once, into the section of the feature that uses it, under a camelCase name', () => {
    expect(VARIABLE_NAMES.size).toBe(95);
    const config = loadConfig({ REDIS_COMMAND_TIMEOUT_MS: '300', READS_MAX_SPANS: '500', GITLAB_WEBHOOK_SECRET_FILE: '/run/secrets/hooks' });
    expect([config.store.commandTimeoutMs, config.reads.maxSpans, config.webhooks.secretFile]).toEqual([300, 500, '/run/secrets/hooks']);
    expect(valueOf(config, 'REDIS_COMMAND_TIMEOUT_MS')).toBe(300);
    expect(Object.isFrozen(config) && Object.values(config).every((section) => Object.isFrozen(section))).toBe(true);
  });

  it('name the variable, never the property, in every message', () => {
    expect(problemsOf({ ROLE: 'edge', INTERNAL_API_ISSUERS: 'gitlab,,', HOSTED_RUNNER_IDS: '1,x', REDIS_COMMAND_TIMEOUT_MS: '0' })).toEqual([
      'ROLE: ROLE must be one of the following values: all, control, gateway (got "edge")',
      'HOSTED_RUNNER_IDS: each value in HOSTED_RUNNER_IDS must be an integer number (got [1,"x"])',
      'REDIS_COMMAND_TIMEOUT_MS: REDIS_COMMAND_TIMEOUT_MS must not be less than 1 (got 0)',
    ]);
  });
});
