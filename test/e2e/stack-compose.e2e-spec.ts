import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { EnvironmentVariables, loadConfig } from '../../src/config/app-config';
import { SHUTDOWN_GRACE_MS } from '../../src/observability/shutdown';
import { startClickHouse } from '../helpers/clickhouse';

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
type Compose = { services: Record<string, Service>; secrets: Record<string, { file: string }>; networks: Record<string, { internal?: boolean } | null> };

/**
 * The tables the Collector's clickhouse exporter (collector-contrib 0.136, Map attributes) writes logs and
 * metrics to, when its configuration names none but logs_table_name, and the columns and types it inserts
 * into each, by name: a fact carried over, so that an init script drifting from what the exporter writes
 * fails here and not on the first insert.
 */
const METRIC_COLUMNS: Array<[string, string]> = [
  ['ResourceAttributes', 'Map(LowCardinality(String), String)'],
  ['ResourceSchemaUrl', 'String'],
  ['ScopeName', 'String'],
  ['ScopeVersion', 'String'],
  ['ScopeAttributes', 'Map(LowCardinality(String), String)'],
  ['ScopeDroppedAttrCount', 'UInt32'],
  ['ScopeSchemaUrl', 'String'],
  ['ServiceName', 'LowCardinality(String)'],
  ['MetricName', 'String'],
  ['MetricDescription', 'String'],
  ['MetricUnit', 'String'],
  ['Attributes', 'Map(LowCardinality(String), String)'],
  ['StartTimeUnix', 'DateTime64(9)'],
  ['TimeUnix', 'DateTime64(9)'],
];
const EXEMPLAR_COLUMNS: Array<[string, string]> = [
  ['Exemplars.FilteredAttributes', 'Array(Map(LowCardinality(String), String))'],
  ['Exemplars.TimeUnix', 'Array(DateTime64(9))'],
  ['Exemplars.Value', 'Array(Float64)'],
  ['Exemplars.SpanId', 'Array(String)'],
  ['Exemplars.TraceId', 'Array(String)'],
];
const EXPORTER_METRICS_TABLES: Record<string, Array<[string, string]>> = {
  otel_metrics_gauge: [...METRIC_COLUMNS, ['Value', 'Float64'], ['Flags', 'UInt32'], ...EXEMPLAR_COLUMNS],
  otel_metrics_sum: [
    ...METRIC_COLUMNS,
    ['Value', 'Float64'],
    ['Flags', 'UInt32'],
    ...EXEMPLAR_COLUMNS,
    ['AggregationTemporality', 'Int32'],
    ['IsMonotonic', 'Bool'],
  ],
  otel_metrics_summary: [
    ...METRIC_COLUMNS,
    ['Count', 'UInt64'],
    ['Sum', 'Float64'],
    ['ValueAtQuantiles.Quantile', 'Array(Float64)'],
    ['ValueAtQuantiles.Value', 'Array(Float64)'],
    ['Flags', 'UInt32'],
  ],
  otel_metrics_histogram: [
    ...METRIC_COLUMNS,
    ['Count', 'UInt64'],
    ['Sum', 'Float64'],
    ['BucketCounts', 'Array(UInt64)'],
    ['ExplicitBounds', 'Array(Float64)'],
    ...EXEMPLAR_COLUMNS,
    ['Flags', 'UInt32'],
    ['Min', 'Float64'],
    ['Max', 'Float64'],
    ['AggregationTemporality', 'Int32'],
  ],
  otel_metrics_exponential_histogram: [
    ...METRIC_COLUMNS,
    ['Count', 'UInt64'],
    ['Sum', 'Float64'],
    ['Scale', 'Int32'],
    ['ZeroCount', 'UInt64'],
    ['PositiveOffset', 'Int32'],
    ['PositiveBucketCounts', 'Array(UInt64)'],
    ['NegativeOffset', 'Int32'],
    ['NegativeBucketCounts', 'Array(UInt64)'],
    ...EXEMPLAR_COLUMNS,
    ['Flags', 'UInt32'],
    ['Min', 'Float64'],
    ['Max', 'Float64'],
    ['AggregationTemporality', 'Int32'],
  ],
};
const EXPORTER_LOGS_COLUMNS: Array<[string, string]> = [
  ['Timestamp', 'DateTime64(9)'],
  ['TraceId', 'String'],
  ['SpanId', 'String'],
  ['TraceFlags', 'UInt8'],
  ['SeverityText', 'LowCardinality(String)'],
  ['SeverityNumber', 'UInt8'],
  ['ServiceName', 'LowCardinality(String)'],
  ['Body', 'String'],
  ['ResourceSchemaUrl', 'LowCardinality(String)'],
  ['ResourceAttributes', 'Map(LowCardinality(String), String)'],
  ['ScopeSchemaUrl', 'LowCardinality(String)'],
  ['ScopeName', 'String'],
  ['ScopeVersion', 'LowCardinality(String)'],
  ['ScopeAttributes', 'Map(LowCardinality(String), String)'],
  ['LogAttributes', 'Map(LowCardinality(String), String)'],
];
/** Google's issuer of the ID tokens hosted runners present (GitLab Runner's `http_bearer_gcp_oidc`). */
const GOOGLE_ISSUER = 'https://accounts.google.com';

const SERVICE = 'ci-job-telemetry';

/** Components whose module is named otherwise than their type: the oidc authenticator is the oidcauthextension module. */
const MODULE_OF_TYPE: Record<string, string> = { oidc: 'oidcauthextension' };

/**
 * A component id is `type` or `type/name`; the image ships it when a module of its kind is `<type without _><kind>`
 * or `<type without _>`, or the module MODULE_OF_TYPE names.
 */
function shipped(kind: 'receivers' | 'processors' | 'exporters' | 'extensions' | 'connectors', id: string): boolean {
  const type = id.split('/')[0].replace(/_/g, '');
  const suffix = kind.slice(0, -1);
  return (components[kind] as string[]).some((module) => module === `${type}${suffix}` || module === type || module === MODULE_OF_TYPE[type]);
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
    for (const variable of ['INTERNAL_API_SECRET_FILE', 'TRACE_KEY_FILE', 'CAPABILITY_KEY_FILE', 'GITLAB_WEBHOOK_SECRET_FILE']) {
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
    // Hosted runners reach the Collector's OIDC-checked receiver at the URL they are handed.
    expect(String(published('otel-collector', 4319))).toBe(url('COLLECTOR_PUBLIC_URL').port);
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

  it("keeps the Collector's OTLP receiver reachable only through the gateway, publishing the hosted-runner receiver alone", () => {
    const collector = parse(read('deploy', 'collector', 'otel-collector.yaml'));
    const portOf = (receiver: string) => Number(String(collector.receivers[receiver].protocols.http.endpoint).split(':').pop());
    const published = (compose.services['otel-collector'].ports ?? []).map((port) => ({ published: Number(port.published), target: port.target }));
    expect(published).toEqual([{ published: portOf('otlp/hosted'), target: portOf('otlp/hosted') }]);
    expect(portOf('otlp/hosted')).not.toBe(portOf('otlp'));
    // One network reaches outside (hosted runners in, Google's keys out), and nothing else is on it.
    expect(networksOf('otel-collector').filter((network) => compose.networks[network]?.internal !== true)).toEqual(['hosted']);
    expect(Object.keys(compose.services).filter((name) => networksOf(name).includes('hosted'))).toEqual(['otel-collector']);
    const neighbours = Object.keys(compose.services).filter(
      (name) => name !== 'otel-collector' && networksOf(name).some((network) => networksOf('otel-collector').includes(network)),
    );
    // ClickHouse shares a network with it only to receive inserts; it sends no OTLP.
    expect(neighbours.sort()).toEqual([SERVICE, 'clickhouse'].sort());
  });

  it('authenticates the hosted-runner receiver with Google-signed OIDC ID tokens for the audience the service hands out, on traces only', () => {
    const collector = parse(read('deploy', 'collector', 'otel-collector.yaml'));
    const hosted = collector.receivers['otlp/hosted'];
    expect(Object.keys(hosted.protocols)).toEqual(['http']);
    expect(hosted.protocols.http.auth).toEqual({ authenticator: 'oidc' });
    expect(collector.service.extensions).toContain('oidc');
    expect(collector.extensions.oidc.issuer_url).toBe(GOOGLE_ISSUER);
    // What the decorator asks hosted runners to request from Google (SPEC §4), as compose runs the service.
    expect(collector.extensions.oidc.audience).toBe(loadConfig(environment()).HOSTED_OIDC_AUDIENCE);
    // The gateway's receiver takes no token: the gateway has checked every export it forwards.
    expect(collector.receivers.otlp.protocols.http.auth).toBeUndefined();
    const pipelines = collector.service.pipelines as Record<string, { receivers: string[] }>;
    expect(Object.keys(pipelines).filter((name) => pipelines[name].receivers.includes('otlp/hosted'))).toEqual(['traces']);
  });

  it('configures the Collector with components the contrib image ships: batch, proportional sampling, ClickHouse', () => {
    const collector = parse(read('deploy', 'collector', 'otel-collector.yaml'));
    for (const kind of ['receivers', 'processors', 'exporters', 'extensions', 'connectors'] as const) {
      for (const id of Object.keys(collector[kind] ?? {})) expect({ kind, id, shipped: shipped(kind, id) }).toEqual({ kind, id, shipped: true });
    }
    // Every component a pipeline names is configured, so the image ships it too; the gateway forwards all three signals.
    const pipelines = collector.service.pipelines as Record<string, Record<'receivers' | 'processors' | 'exporters', string[]>>;
    expect(Object.keys(pipelines).sort()).toEqual(['logs', 'metrics', 'traces']);
    for (const [signal, pipeline] of Object.entries(pipelines)) {
      for (const kind of ['receivers', 'processors', 'exporters'] as const) {
        for (const id of pipeline[kind])
          expect({ signal, kind, id, configured: Object.keys(collector[kind]).includes(id) }).toEqual({ signal, kind, id, configured: true });
      }
      expect({ signal, receivers: pipeline.receivers }).toEqual({ signal, receivers: expect.arrayContaining(['otlp']) });
      expect({ signal, last: pipeline.processors.at(-1) }).toEqual({ signal, last: 'batch' });
      expect({ signal, exporters: pipeline.exporters }).toEqual({ signal, exporters: ['clickhouse'] });
    }
    const traces = pipelines.traces;
    for (const id of collector.service.extensions) expect(Object.keys(collector.extensions)).toContain(id);
    expect(traces.processors).toEqual(expect.arrayContaining(['probabilistic_sampler', 'batch']));
    // Proportional mode honours the ot=th threshold the decorator writes (SPEC §4 "Flags").
    expect(collector.processors.probabilistic_sampler).toMatchObject({ mode: 'proportional' });
    expect(collector.processors.probabilistic_sampler.hash_seed).toBeUndefined();
    // The init scripts own otel_traces, which the view reads, and so every table (one setting for all signals).
    expect(collector.exporters.clickhouse).toMatchObject({ traces_table_name: 'otel_traces', logs_table_name: 'otel_logs', create_schema: false });
    // Metrics go to the exporter's default table names, which the logs-and-metrics init script creates.
    expect(collector.exporters.clickhouse.metrics_tables).toBeUndefined();
    expect(collector.exporters.clickhouse.metrics_table_name).toBeUndefined();
    // And the checker itself refuses what the image does not ship.
    expect(shipped('processors', 'no_such_sampler')).toBe(false);
    expect(shipped('exporters', 'clickhouse/backup')).toBe(true);
  });

  it('creates, before the Collector starts, every logs and metrics table its exporter inserts into, with the columns it inserts', async () => {
    const exporter = parse(read('deploy', 'collector', 'otel-collector.yaml')).exporters.clickhouse;
    const tables: Record<string, Array<[string, string]>> = { [exporter.logs_table_name]: EXPORTER_LOGS_COLUMNS, ...EXPORTER_METRICS_TABLES };
    // The ClickHouse image runs the mounted folder's scripts in name order on its first start.
    const init = join(ROOT, 'deploy', 'clickhouse', 'init');
    expect(mounts('clickhouse')).toContainEqual({ source: init, target: '/docker-entrypoint-initdb.d' });
    const script = read('deploy', 'clickhouse', 'init', '02-logs-metrics.sql');
    const clickhouse = await startClickHouse();
    try {
      await clickhouse.query(script);
      const created = await clickhouse.query(`SELECT name FROM system.tables WHERE database = '${exporter.database}' ORDER BY name`);
      expect(created.map((row) => row.name)).toEqual(Object.keys(tables).sort());
      for (const [table, columns] of Object.entries(tables)) {
        const described = await clickhouse.query(`DESCRIBE TABLE ${exporter.database}.${table}`);
        const types = new Map(described.map((row) => [row.name as string, row.type as string]));
        expect({ table, columns: columns.map(([name]) => [name, types.get(name)]) }).toEqual({ table, columns });
        // The exporter's insert, column list and all, goes through (times of now: older rows are past the TTL).
        const value = (type: string) => (type === 'DateTime64(9)' ? 'now64(9)' : `defaultValueOfTypeName('${type}')`);
        await clickhouse.query(
          `INSERT INTO ${exporter.database}.${table} (${columns.map(([name]) => name).join(', ')}) SELECT ${columns.map(([, type]) => value(type)).join(', ')}`,
        );
        expect(await clickhouse.query(`SELECT count() AS rows FROM ${exporter.database}.${table}`)).toEqual([{ rows: 1 }]);
      }
    } finally {
      await clickhouse.stop();
    }
  }, 60_000);
});
