import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { EnvironmentVariables, loadConfig } from '../../src/config/app-config';
import { SHUTDOWN_GRACE_MS } from '../../src/observability/shutdown';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const read = (...path: string[]) => readFileSync(join(ROOT, ...path), 'utf8');
const components = JSON.parse(read('test', 'fixtures', 'otelcol-contrib-components.json')) as Record<string, string[] | string>;

type Service = {
  image?: string;
  build?: unknown;
  environment?: Record<string, string>;
  ports?: Array<{ published: number | string; target: number }>;
  networks?: Record<string, unknown>;
  secrets?: Array<{ source: string; target?: string }>;
  stop_grace_period?: string;
  /** docker-compose 1.x prints `source:target[:mode]`. */
  volumes?: string[];
};
type Compose = { services: Record<string, Service>; secrets: Record<string, { file: string }> };

const SERVICE = 'ci-job-telemetry';

/** A component id is `type` or `type/name`; the image ships it when a module of its kind is `<type without _><kind>` or `<type without _>`. */
function shipped(kind: 'receivers' | 'processors' | 'exporters' | 'extensions' | 'connectors', id: string): boolean {
  const type = id.split('/')[0].replace(/_/g, '');
  const suffix = kind.slice(0, -1);
  return (components[kind] as string[]).some((module) => module === `${type}${suffix}` || module === type);
}

describe('docker-compose.yml, validated by docker-compose itself (no engine needed)', () => {
  let compose: Compose;

  beforeAll(async () => {
    // Defaults only: the stack must come up with no .env file.
    const { stdout } = await run('docker-compose', ['--project-directory', ROOT, '-f', join(ROOT, 'docker-compose.yml'), 'config'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH },
    });
    compose = parse(stdout) as Compose;
  }, 60_000);

  const service = () => compose.services[SERVICE];
  const environment = () => service().environment!;
  const networksOf = (name: string) => Object.keys(compose.services[name].networks ?? {});
  const url = (variable: string) => new URL(environment()[variable]);
  const mounts = (name: string) => (compose.services[name].volumes ?? []).map((volume) => ({ source: volume.split(':')[0], target: volume.split(':')[1] }));

  it('runs the whole stack: the service, Redis, Unleash on PostgreSQL, the Collector, ClickHouse and Grafana', () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      [SERVICE, 'clickhouse', 'grafana', 'otel-collector', 'postgres', 'prometheus', 'redis', 'unleash'].sort(),
    );
    expect(service().build).toBeDefined();
    expect(existsSync(join(ROOT, 'Dockerfile'))).toBe(true);
    // docker stop waits long enough for the service's own drain before it kills.
    expect(Number(/^(\d+)s$/.exec(service().stop_grace_period ?? '')?.[1])).toBeGreaterThan(SHUTDOWN_GRACE_MS / 1000);
  });

  it('pins every image to a version', () => {
    for (const [name, definition] of Object.entries(compose.services)) {
      if (name === SERVICE) continue;
      const tag = definition.image?.split(':')[1];
      expect({ name, tag }).toEqual({ name, tag: expect.stringMatching(/^v?\d+(\.\d+)+(-[a-z0-9.]+)?$/) });
    }
    expect(compose.services['otel-collector'].image).toBe(`otel/opentelemetry-collector-contrib:${components.version}`);
  });

  it('sets every variable the service needs, valid as the service itself validates them', () => {
    const known = Object.keys(new EnvironmentVariables());
    expect(Object.keys(environment()).filter((name) => !known.includes(name))).toEqual([]);
    expect(() => loadConfig(environment())).not.toThrow();
    // A shared store across replicas, a real Unleash, and no secret generated inside a container.
    expect(environment()).toMatchObject({ REDIS_URL: expect.any(String), UNLEASH_URL: expect.any(String), UNLEASH_API_TOKEN: expect.any(String) });
    const mounted = (service().secrets ?? []).map((secret) => secret.target ?? `/run/secrets/${secret.source}`);
    for (const variable of ['INTERNAL_API_SECRET_FILE', 'TRACE_KEY_FILE', 'CAPABILITY_KEY_FILE']) {
      expect({ variable, file: environment()[variable] }).toEqual({ variable, file: expect.any(String) });
      expect(mounted).toContain(environment()[variable]);
    }
    // Every secret file is one scripts/stack-secrets.sh creates.
    const created = /for name in ([\w ]+); do/.exec(read('scripts', 'stack-secrets.sh'))![1].split(' ');
    for (const secret of Object.values(compose.secrets)) expect(created.map((name) => join(ROOT, '.secrets', name))).toContain(secret.file);
  });

  it('agrees on ports and URLs across services', () => {
    const config = loadConfig(environment());
    const published = (name: string, target: number) => compose.services[name].ports?.find((port) => port.target === target)?.published;
    // Runners reach the gateway at the URL the decorator hands out; GitLab reaches the internal port.
    expect(String(published(SERVICE, config.GATEWAY_PORT))).toBe(url('GATEWAY_PUBLIC_URL').port);
    expect(published(SERVICE, config.INTERNAL_PORT)).toBeDefined();
    expect([url('REDIS_URL').hostname, url('REDIS_URL').port]).toEqual(['redis', '6379']);
    expect([url('UNLEASH_URL').hostname, url('UNLEASH_URL').port, url('UNLEASH_URL').pathname]).toEqual(['unleash', '4242', '/api/']);
    expect(compose.services.unleash.environment!.INIT_CLIENT_API_TOKENS).toBe(environment().UNLEASH_API_TOKEN);

    const collector = parse(read('deploy', 'collector', 'otel-collector.yaml'));
    const receiverPort = String(collector.receivers.otlp.protocols.http.endpoint).split(':').pop();
    expect([url('OTLP_UPSTREAM_URL').hostname, url('OTLP_UPSTREAM_URL').port]).toEqual(['otel-collector', receiverPort]);

    const clickhouse = compose.services.clickhouse.environment!;
    const exporter = collector.exporters.clickhouse;
    expect(new URL(exporter.endpoint).host).toBe('clickhouse:9000');
    expect([exporter.database, exporter.username]).toEqual([clickhouse.CLICKHOUSE_DB, clickhouse.CLICKHOUSE_USER]);
    expect(read('deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql')).toContain(`CREATE DATABASE IF NOT EXISTS ${clickhouse.CLICKHOUSE_DB};`);
    expect(mounts('clickhouse')).toContainEqual({ source: join(ROOT, 'deploy', 'clickhouse', 'init'), target: '/docker-entrypoint-initdb.d' });

    // Grafana's provisioning YAML, read as it is: the test asserts the few members it needs.
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const datasources = parse(read('deploy', 'grafana', 'provisioning', 'datasources', 'datasources.yaml')).datasources as Array<Record<string, any>>;
    const clickhouseSource = datasources.find((source) => source.type === 'grafana-clickhouse-datasource')!;
    expect([
      clickhouseSource.jsonData.host,
      clickhouseSource.jsonData.port,
      clickhouseSource.jsonData.defaultDatabase,
      clickhouseSource.jsonData.username,
    ]).toEqual(['clickhouse', 9000, clickhouse.CLICKHOUSE_DB, clickhouse.CLICKHOUSE_USER]);
    const prometheusSource = datasources.find((source) => source.type === 'prometheus')!;
    expect(new URL(prometheusSource.url).hostname).toBe('prometheus');
    const scrape = parse(read('deploy', 'prometheus', 'prometheus.yml')).scrape_configs[0];
    expect(scrape.static_configs[0].targets).toEqual([`${SERVICE}:${config.INTERNAL_PORT}`]);
    expect(scrape.metrics_path).toBe('/metrics');

    // The dashboard uses only provisioned data sources, and Grafana loads it from where it is mounted.
    const dashboard = read('deploy', 'grafana', 'dashboards', 'ci-job-telemetry.json');
    const uids = new Set([...dashboard.matchAll(/"uid": "([^"]+)"/g)].map((match) => match[1]).filter((uid) => uid !== 'ci-job-telemetry'));
    expect([...uids].sort()).toEqual(datasources.map((source) => source.uid).sort());
    const provider = parse(read('deploy', 'grafana', 'provisioning', 'dashboards', 'dashboards.yaml')).providers[0];
    expect(mounts('grafana')).toContainEqual({ source: join(ROOT, 'deploy', 'grafana', 'dashboards'), target: provider.options.path });
    // Every service reaches the ones it talks to.
    const shareNetwork = (a: string, b: string) => networksOf(a).some((network) => networksOf(b).includes(network));
    for (const [from, to] of [
      [SERVICE, 'redis'],
      [SERVICE, 'unleash'],
      [SERVICE, 'otel-collector'],
      ['unleash', 'postgres'],
      ['otel-collector', 'clickhouse'],
      ['grafana', 'clickhouse'],
      ['grafana', 'prometheus'],
      ['prometheus', SERVICE],
    ]) {
      expect({ from, to, connected: shareNetwork(from, to) }).toEqual({ from, to, connected: true });
    }
  });

  it("keeps the Collector's OTLP receiver reachable only through the gateway", () => {
    expect(compose.services['otel-collector'].ports ?? []).toEqual([]);
    const neighbours = Object.keys(compose.services).filter(
      (name) => name !== 'otel-collector' && networksOf(name).some((network) => networksOf('otel-collector').includes(network)),
    );
    // ClickHouse shares a network with it only to receive inserts; it sends no OTLP.
    expect(neighbours.sort()).toEqual([SERVICE, 'clickhouse'].sort());
  });

  it('configures the Collector with components the contrib image ships: batch, proportional sampling, ClickHouse', () => {
    const collector = parse(read('deploy', 'collector', 'otel-collector.yaml'));
    for (const kind of ['receivers', 'processors', 'exporters', 'extensions', 'connectors'] as const) {
      for (const id of Object.keys(collector[kind] ?? {})) expect({ kind, id, shipped: shipped(kind, id) }).toEqual({ kind, id, shipped: true });
    }
    const traces = collector.service.pipelines.traces;
    for (const [kind, ids] of [
      ['receivers', traces.receivers],
      ['processors', traces.processors],
      ['exporters', traces.exporters],
    ] as const) {
      for (const id of ids as string[]) expect(Object.keys(collector[kind])).toContain(id);
    }
    for (const id of collector.service.extensions) expect(Object.keys(collector.extensions)).toContain(id);
    expect(traces.processors).toEqual(expect.arrayContaining(['probabilistic_sampler', 'batch']));
    expect(traces.processors.at(-1)).toBe('batch');
    expect(traces.exporters).toEqual(['clickhouse']);
    // Proportional mode honours the ot=th threshold the decorator writes (SPEC §4 "Flags").
    expect(collector.processors.probabilistic_sampler).toMatchObject({ mode: 'proportional' });
    expect(collector.processors.probabilistic_sampler.hash_seed).toBeUndefined();
    // The init script owns otel_traces, which the view reads.
    expect(collector.exporters.clickhouse).toMatchObject({ traces_table_name: 'otel_traces', create_schema: false });
    // And the checker itself refuses what the image does not ship.
    expect(shipped('processors', 'no_such_sampler')).toBe(false);
    expect(shipped('exporters', 'clickhouse/backup')).toBe(true);
  });
});
