import { join } from 'node:path';
import { loadConfig } from './config/app-config';
import { listenProblem, readCommandLine, startupSummary, startupWarnings } from './startup';

const failure = (code: string) => Object.assign(new Error(code), { code });

describe('what the process says at start', () => {
  it('names the variable to change for every listening failure that is a configuration mistake', () => {
    expect(listenProblem(failure('EADDRINUSE'), 'GATEWAY_PORT', '127.0.0.1', 4318)).toBe(
      'GATEWAY_PORT: 127.0.0.1:4318 is already in use; stop what listens there or set GATEWAY_PORT to a free port',
    );
    expect(listenProblem(failure('EACCES'), 'INTERNAL_PORT', '0.0.0.0', 80)).toBe(
      'INTERNAL_PORT: 0.0.0.0:80 needs privileges this process does not have; set INTERNAL_PORT to a port above 1023',
    );
    expect(listenProblem(failure('EADDRNOTAVAIL'), 'INTERNAL_PORT', '192.0.2.7', 8080)).toBe(
      'HOST: 192.0.2.7 is not an address of this machine; set HOST to one of its addresses, or 0.0.0.0 for all of them',
    );
    expect(listenProblem(failure('EADDRINUSE'), 'INTERNAL_PORT', '::1', 8080)).toMatch(/^INTERNAL_PORT: \[::1\]:8080 is already in use/);
    // Not the configuration's fault: the caller shows it as the bug it is.
    expect(listenProblem(new Error('boom'), 'INTERNAL_PORT', '0.0.0.0', 8080)).toBeUndefined();
  });

  it('runs with no arguments, helps with --help, and refuses anything else', () => {
    expect(readCommandLine([])).toEqual({ kind: 'run' });
    expect(readCommandLine(['--help'])).toEqual({ kind: 'help' });
    expect(readCommandLine(['-h'])).toEqual({ kind: 'help' });
    expect(readCommandLine(['--port', '8080'])).toEqual({ kind: 'unknown', argument: '--port' });
  });

  it('never shows a password of the store, the flags server or the upstream', () => {
    const config = loadConfig({
      ROLE: 'control',
      REDIS_URL: 'rediss://cjt:hunter2@redis.internal:6380/2',
      UNLEASH_URL: 'https://user:hunter2@unleash.internal/api',
      OTLP_UPSTREAM_URL: 'https://collector:hunter2@otel.internal:4318',
      GITLAB_WEBHOOK_SECRET_FILE: '/run/secrets/gitlab_webhook_secret',
    });
    const summary = startupSummary(config, { internalUrl: 'http://10.0.0.5:8080', readiness: { store: 'failing', flags: 'ok' } });
    expect(summary).toEqual({
      role: 'control',
      internalApi: 'http://10.0.0.5:8080',
      store: 'Redis rediss://cjt@redis.internal:6380/2 (unreachable)',
      flags: 'Unleash https://unleash.internal/api',
      gatewayPublicUrl: 'http://localhost:4318',
      gitlabWebhooks: 'on',
      upstream: 'https://otel.internal:4318',
    });
    expect(JSON.stringify(summary)).not.toContain('hunter2');
  });

  it('says where exports go when no upstream is set, and what a gateway-only process does not have', () => {
    const embedded = startupSummary(loadConfig({}), {
      internalUrl: 'http://127.0.0.1:8080',
      gatewayUrl: 'http://127.0.0.1:4318',
      readiness: { store: 'ok', flags: 'failing' },
    });
    expect(embedded).toMatchObject({
      store: 'memory (this process only) (reachable)',
      flags: `file ${join(process.cwd(), 'config', 'flags.json')} (no definitions yet: telemetry is off)`,
      upstream: `embedded collector, ${join(process.cwd(), '.data', 'otlp')}`,
    });
    const gateway = loadConfig({
      ROLE: 'gateway',
      AUTH_URL: 'http://control:8080/internal/ci/telemetry/auth',
      OTLP_UPSTREAM_URL: 'http://otel-collector:4318',
      REDIS_SENTINELS: 'sentinel-0:26379,sentinel-1:26379',
      REDIS_SENTINEL_MASTER: 'cjt',
    });
    expect(startupSummary(gateway, { internalUrl: 'http://127.0.0.1:8080', gatewayUrl: 'http://127.0.0.1:4318', readiness: { store: 'ok' } })).toEqual({
      role: 'gateway',
      internalApi: 'http://127.0.0.1:8080',
      otlpGateway: 'http://127.0.0.1:4318',
      store: 'Redis Sentinel master cjt via sentinel-0:26379,sentinel-1:26379 (reachable)',
      upstream: 'http://otel-collector:4318',
    });
  });

  it('warns when hosted runners would be told to export to their own localhost, and only then', () => {
    const warned = (env: Record<string, string>) => startupWarnings(loadConfig(env), env);
    expect(warned({ HOSTED_RUNNER_TYPES: 'instance_type' })).toEqual([
      expect.stringMatching(
        /^hosted runners \(HOSTED_RUNNER_TYPES\/HOSTED_RUNNER_IDS\) are told to export to http:\/\/localhost:4318\/v1\/traces, .*COLLECTOR_PUBLIC_URL is unset/,
      ),
    ]);
    expect(warned({ HOSTED_RUNNER_IDS: '12,13', COLLECTOR_PUBLIC_URL: '' })).toHaveLength(1);
    expect(warned({ HOSTED_RUNNER_IDS: '12', COLLECTOR_PUBLIC_URL: 'https://otel.example.com:4319' })).toEqual([]);
    // No hosted runner: the URL is never handed out. A gateway-only process hands out no URL at all.
    expect(warned({})).toEqual([]);
    expect(
      warned({
        ROLE: 'gateway',
        AUTH_URL: 'http://control:8080',
        OTLP_UPSTREAM_URL: 'http://collector:4318',
        REDIS_URL: 'redis://redis:6379',
        HOSTED_RUNNER_TYPES: 'instance_type',
      }),
    ).toEqual([]);
  });
});
