import { CONTROL_PLANE_MARK } from '../../src/otlp/control-plane-mark';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { loadConfig, VARIABLE_NAMES } from '../../src/config/app-config';
import { SHUTDOWN_GRACE_MS } from '../../src/observability/shutdown';
import { startClickHouse } from '../helpers/clickhouse';

const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const read = (...path: string[]) => readFileSync(join(ROOT, ...path), 'utf8');
const components = JSON.parse(read('test', 'fixtures', 'otelcol-contrib-components.json')) as Record<string, string[] | string>;

type Service = {
  image?: string;
  build?: { context: string; dockerfile?: string };
  command?: string[];
  environment?: Record<string, string>;
  ports?: Array<{ published: number | string; target: number }>;
  networks?: Record<string, unknown>;
  secrets?: Array<{ source: string; target?: string }>;
  stop_grace_period?: string;
  /** docker-compose 1.x prints `source:target[:mode]` (mountsOf). */
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
const BASE = 'docker-compose.yml';
/** The opt-in overlay for hosted runners, always run over the base. */
const OVERLAY = 'docker-compose.hosted-runners.yml';
const STACKS = { default: [BASE], 'hosted-runner overlay': [BASE, OVERLAY] } as const;
type StackName = keyof typeof STACKS;

/** An image tag that names a version: `25.8`, `v3.5.0`, `7.4.5-alpine`, `20.19-bookworm-slim`. */
const PINNED_TAG = /^v?\d+(\.\d+)+(-[a-z0-9.-]+)?$/;

/**
 * Extensions that start without the network: a local listener (health_check, pprof, zpages) or the disk
 * (file_storage). An authenticator such as oidc fetches its issuer's keys in Start, and the Collector does not
 * start when that fails.
 */
const STARTS_OFFLINE = ['health_check', 'pprof', 'zpages', 'file_storage'];

/**
 * The Grafana settings that name a plugin to download at start: the catalog installs GF_INSTALL_PLUGINS and
 * the preinstall lists, and Grafana 12 preinstalls its own default list unless GF_PLUGINS_PREINSTALL_DISABLED.
 */
const GRAFANA_DOWNLOADS = /^GF_(INSTALL_PLUGINS|PLUGINS_PREINSTALL)/;

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

/** `docker-compose config` over these files, with no .env file and no variable set: the stack must come up so. */
async function composeConfig(files: readonly string[]): Promise<Compose> {
  const { stdout } = await run('docker-compose', ['--project-directory', ROOT, ...files.flatMap((file) => ['-f', join(ROOT, file)]), 'config'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH },
  });
  return parse(stdout) as Compose;
}

type Yaml = Record<string, unknown>;
const isMap = (value: unknown): value is Yaml => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The Collector's merge of several --config files: maps key by key, and a later list or value replaces an earlier one. */
function mergeCollectorConfig(base: unknown, over: unknown): unknown {
  if (!isMap(base) || !isMap(over)) return over;
  const merged: Yaml = { ...base };
  for (const [key, value] of Object.entries(over)) merged[key] = key in base ? mergeCollectorConfig(base[key], value) : value;
  return merged;
}

/** docker-compose 1.x prints a bind mount as `source:target[:mode]`. */
const mountsOf = (service: Service) => (service.volumes ?? []).map((volume) => ({ source: volume.split(':')[0], target: volume.split(':')[1] }));

/**
 * The Collector's configuration as its container reads it: each `--config` of its command, found on the host
 * through the container's mounts, merged in order.
 */
function collectorConfigOf(compose: Compose) {
  const collector = compose.services['otel-collector'];
  const files = (collector.command ?? []).filter((arg) => arg.startsWith('--config=')).map((arg) => arg.slice('--config='.length).replace(/^file:/, ''));
  expect(files.length).toBeGreaterThan(0);
  const configs = files.map((file) => {
    const mount = mountsOf(collector).find((candidate) => candidate.target === file);
    expect({ file, mounted: mount !== undefined }).toEqual({ file, mounted: true });
    return parse(readFileSync(mount!.source, 'utf8'));
  });
  // The configuration is read as YAML; the tests assert the members they need.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return configs.reduce((merged, config) => mergeCollectorConfig(merged, config)) as Record<string, any>;
}

/** The image a Dockerfile starts from and what it sets and runs, as the tests need them. */
function dockerfile(context: string) {
  const text = readFileSync(join(context, 'Dockerfile'), 'utf8');
  const lines = text.split('\n').filter((line) => !line.startsWith('#'));
  return {
    from: lines.filter((line) => line.startsWith('FROM ')).map((line) => line.split(/\s+/)[1]),
    env: Object.fromEntries(lines.filter((line) => line.startsWith('ENV ')).map((line) => line.slice(4).split('='))) as Record<string, string>,
    run: lines.filter((line) => line.startsWith('RUN ')).map((line) => line.slice(4)),
    args: lines.filter((line) => line.startsWith('ARG ')).map((line) => line.slice(4)),
  };
}

const stacks = {} as Record<StackName, Compose>;

beforeAll(async () => {
  for (const [name, files] of Object.entries(STACKS)) stacks[name as StackName] = await composeConfig(files);
}, 60_000);

describe.each(Object.keys(STACKS) as StackName[])('the %s stack, validated by docker-compose itself (no engine needed)', (stack) => {
  const compose = () => stacks[stack];
  const service = () => compose().services[SERVICE];
  const environment = () => service().environment!;
  const networksOf = (name: string) => Object.keys(compose().services[name].networks ?? {});
  const url = (variable: string) => new URL(environment()[variable]);
  const mounts = (name: string) => mountsOf(compose().services[name]);
  const collector = () => collectorConfigOf(compose());

  it('runs the whole stack: the service, Redis, Unleash on PostgreSQL, the Collector, ClickHouse and Grafana', () => {
    expect(Object.keys(compose().services).sort()).toEqual(
      [SERVICE, 'clickhouse', 'grafana', 'otel-collector', 'postgres', 'prometheus', 'redis', 'unleash'].sort(),
    );
    expect(service().build).toBeDefined();
    expect(existsSync(join(ROOT, 'Dockerfile'))).toBe(true);
    // docker stop waits long enough for the service's own drain before it kills.
    expect(Number(/^(\d+)s$/.exec(service().stop_grace_period ?? '')?.[1])).toBeGreaterThan(SHUTDOWN_GRACE_MS / 1000);
  });

  it('pins every image to a version, and every image it builds starts from a pinned one', () => {
    for (const [name, definition] of Object.entries(compose().services)) {
      if (definition.build !== undefined) {
        for (const from of dockerfile(definition.build.context).from)
          expect({ name, tag: from.split(':')[1] }).toEqual({ name, tag: expect.stringMatching(PINNED_TAG) });
      }
      if (name === SERVICE) continue;
      const tag = definition.image?.split(':')[1];
      expect({ name, tag }).toEqual({ name, tag: expect.stringMatching(PINNED_TAG) });
    }
    expect(compose().services['otel-collector'].image).toBe(`otel/opentelemetry-collector-contrib:${components.version}`);
  });

  it('sets every variable the service needs, valid as the service itself validates them', () => {
    expect(Object.keys(environment()).filter((name) => !VARIABLE_NAMES.has(name))).toEqual([]);
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
    for (const secret of Object.values(compose().secrets)) expect(created.map((name) => join(ROOT, '.secrets', name))).toContain(secret.file);
  });

  it('agrees on ports and URLs across services', () => {
    const config = loadConfig(environment());
    const published = (name: string, target: number) => compose().services[name].ports?.find((port) => port.target === target)?.published;
    // Runners reach the gateway at the URL the decorator hands out; GitLab reaches the internal port.
    expect(String(published(SERVICE, config.process.gatewayPort))).toBe(url('GATEWAY_PUBLIC_URL').port);
    expect(published(SERVICE, config.process.internalPort)).toBeDefined();
    expect([url('REDIS_URL').hostname, url('REDIS_URL').port]).toEqual(['redis', '6379']);
    expect([url('UNLEASH_URL').hostname, url('UNLEASH_URL').port, url('UNLEASH_URL').pathname]).toEqual(['unleash', '4242', '/api/']);
    expect(compose().services.unleash.environment!.INIT_CLIENT_API_TOKENS).toBe(environment().UNLEASH_API_TOKEN);

    const receiverPort = String(collector().receivers.otlp.protocols.http.endpoint).split(':').pop();
    expect([url('OTLP_UPSTREAM_URL').hostname, url('OTLP_UPSTREAM_URL').port]).toEqual(['otel-collector', receiverPort]);

    const clickhouse = compose().services.clickhouse.environment!;
    const exporter = collector().exporters.clickhouse;
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
    expect(scrape.static_configs[0].targets).toEqual([`${SERVICE}:${config.process.internalPort}`]);
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

  it("keeps the Collector's gateway receiver reachable only through the gateway, publishing hosted-runner receivers alone", () => {
    const receivers = collector().receivers as Record<string, { protocols: { http: { endpoint: string; auth?: unknown } } }>;
    const portOf = (receiver: string) => Number(String(receivers[receiver].protocols.http.endpoint).split(':').pop());
    // A hosted-runner receiver is one that checks a token itself; the gateway's takes none (the gateway checked every export).
    const hosted = Object.keys(receivers).filter((name) => receivers[name].protocols.http.auth !== undefined);
    expect(receivers.otlp.protocols.http.auth).toBeUndefined();
    const published = (compose().services['otel-collector'].ports ?? []).map((port) => ({ published: Number(port.published), target: port.target }));
    expect(published).toEqual(hosted.map((name) => ({ published: portOf(name), target: portOf(name) })));
    expect(published.map((port) => port.target)).not.toContain(portOf('otlp'));
    // Only a hosted receiver gives the Collector a network with a way out (runners in, its issuer's keys out), and nothing else is on it.
    const outside = networksOf('otel-collector').filter((network) => compose().networks[network]?.internal !== true);
    expect(outside).toEqual(hosted.length > 0 ? ['hosted'] : []);
    for (const network of outside) expect(Object.keys(compose().services).filter((name) => networksOf(name).includes(network))).toEqual(['otel-collector']);
    const neighbours = Object.keys(compose().services).filter(
      (name) => name !== 'otel-collector' && networksOf(name).some((network) => networksOf('otel-collector').includes(network)),
    );
    // ClickHouse shares a network with it only to receive inserts; it sends no OTLP.
    expect(neighbours.sort()).toEqual([SERVICE, 'clickhouse'].sort());
  });

  it('hands hosted runners a collector URL only where a receiver for them is published, at its port', () => {
    const config = loadConfig(environment());
    const configured = config.jobPayload.hostedRunnerTypes.length + config.jobPayload.hostedRunnerIds.length > 0;
    const receivers = collector().receivers as Record<string, { protocols: { http: { endpoint: string; auth?: unknown } } }>;
    const hosted = Object.keys(receivers).filter((name) => receivers[name].protocols.http.auth !== undefined);
    expect(configured).toBe(hosted.length > 0);
    if (!configured) {
      // Without hosted runners the URL is handed to no one, so the stack does not name one.
      expect(environment().COLLECTOR_PUBLIC_URL).toBeUndefined();
      return;
    }
    const port = String(receivers[hosted[0]].protocols.http.endpoint).split(':').pop();
    const published = compose().services['otel-collector'].ports?.find((candidate) => String(candidate.target) === port)?.published;
    expect(String(published)).toBe(url('COLLECTOR_PUBLIC_URL').port);
  });

  it('configures the Collector with components the contrib image ships: batch, proportional sampling, ClickHouse', () => {
    const config = collector();
    for (const kind of ['receivers', 'processors', 'exporters', 'extensions', 'connectors'] as const) {
      for (const id of Object.keys(config[kind] ?? {})) expect({ kind, id, shipped: shipped(kind, id) }).toEqual({ kind, id, shipped: true });
    }
    // Every component a pipeline names is configured, so the image ships it too; the gateway forwards all three signals.
    const pipelines = config.service.pipelines as Record<string, Record<'receivers' | 'processors' | 'exporters', string[]>>;
    // Hosted runners' traces have a pipeline of their own, which deletes the control plane's mark from their resources
    // (docs/reads.md "Trust"): what they write straight to the collector is never taken for GitLab's account.
    const hosted = Object.keys(config.receivers).includes('otlp/hosted');
    expect(Object.keys(pipelines).sort()).toEqual(['logs', 'metrics', 'traces', ...(hosted ? ['traces/hosted'] : [])]);
    if (hosted) {
      const deleted = (config.processors['resource/hosted'] as { attributes: Array<{ key: string; action: string }> }).attributes;
      expect(pipelines['traces/hosted'].processors).toContain('resource/hosted');
      expect(deleted).toContainEqual({ key: CONTROL_PLANE_MARK.key, action: 'delete' });
    }
    for (const [signal, pipeline] of Object.entries(pipelines)) {
      for (const kind of ['receivers', 'processors', 'exporters'] as const) {
        for (const id of pipeline[kind])
          expect({ signal, kind, id, configured: Object.keys(config[kind]).includes(id) }).toEqual({ signal, kind, id, configured: true });
      }
      expect({ signal, receivers: pipeline.receivers }).toEqual({
        signal,
        receivers: expect.arrayContaining([signal === 'traces/hosted' ? 'otlp/hosted' : 'otlp']),
      });
      expect({ signal, last: pipeline.processors.at(-1) }).toEqual({ signal, last: 'batch' });
      expect({ signal, exporters: pipeline.exporters }).toEqual({ signal, exporters: ['clickhouse'] });
    }
    // Every receiver serves a pipeline, and every authenticator a receiver names is a running extension.
    const served = new Set(Object.values(pipelines).flatMap((pipeline) => pipeline.receivers));
    expect(Object.keys(config.receivers).filter((id) => !served.has(id))).toEqual([]);
    for (const receiver of Object.values(config.receivers) as Array<{ protocols: { http: { auth?: { authenticator: string } } } }>) {
      const authenticator = receiver.protocols.http.auth?.authenticator;
      if (authenticator !== undefined) expect(config.service.extensions).toContain(authenticator);
    }
    const traces = pipelines.traces;
    // Every extension named runs, and every one configured: the overlay's list replaces the base's, so it restates it.
    expect([...config.service.extensions].sort()).toEqual(Object.keys(config.extensions).sort());
    expect(traces.processors).toEqual(expect.arrayContaining(['probabilistic_sampler', 'batch']));
    // Proportional mode honours the ot=th threshold the decorator writes (SPEC §4 "Flags").
    expect(config.processors.probabilistic_sampler).toMatchObject({ mode: 'proportional' });
    expect(config.processors.probabilistic_sampler.hash_seed).toBeUndefined();
    // The init scripts own otel_traces, which the view reads, and so every table (one setting for all signals).
    expect(config.exporters.clickhouse).toMatchObject({ traces_table_name: 'otel_traces', logs_table_name: 'otel_logs', create_schema: false });
    // Metrics go to the exporter's default table names, which the logs-and-metrics init script creates.
    expect(config.exporters.clickhouse.metrics_tables).toBeUndefined();
    expect(config.exporters.clickhouse.metrics_table_name).toBeUndefined();
    // And the checker itself refuses what the image does not ship.
    expect(shipped('processors', 'no_such_sampler')).toBe(false);
    expect(shipped('exporters', 'clickhouse/backup')).toBe(true);
  });

  it('builds Grafana with its ClickHouse plugin inside at a pinned version, and names no plugin for Grafana to download at start', () => {
    const grafana = compose().services.grafana;
    expect(grafana.build?.context).toBe(join(ROOT, 'deploy', 'grafana'));
    const image = dockerfile(grafana.build!.context);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const datasources = parse(read('deploy', 'grafana', 'provisioning', 'datasources', 'datasources.yaml')).datasources as Array<Record<string, any>>;
    const plugins = datasources.map((source) => source.type).filter((type) => type !== 'prometheus');
    // Installed while the image is built, into the plugins path Grafana reads, at a version: the one plugin the data sources need.
    const installs = image.run
      .map((run) => /^grafana cli --pluginsDir "\$GF_PATHS_PLUGINS" plugins install ([\w-]+) (\S+)$/.exec(run))
      .filter((match) => match !== null);
    expect(installs.map((match) => match![1])).toEqual(plugins);
    const version = installs[0]![2];
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    // Where no mount hides it; and the image's tag names both versions, so a bump is a new image `up` builds.
    expect(mounts('grafana').filter((mount) => image.env.GF_PATHS_PLUGINS.startsWith(mount.target))).toEqual([]);
    expect(image.from).toHaveLength(1);
    expect(grafana.image!.split(':')[1]).toBe(`${image.from[0].split(':')[1]}-clickhouse-${version}`);
    // Nothing names a plugin to fetch at start, and Grafana 12's own preinstall list is off.
    const settings = { ...image.env, ...grafana.environment };
    expect(Object.keys(settings).filter((name) => GRAFANA_DOWNLOADS.test(name))).toEqual(['GF_PLUGINS_PREINSTALL_DISABLED']);
    expect(settings.GF_PLUGINS_PREINSTALL_DISABLED).toBe('true');
    expect(image.args.filter((arg) => GRAFANA_DOWNLOADS.test(arg))).toEqual([]);
    // And the checker refuses what this stack used to do.
    expect(GRAFANA_DOWNLOADS.test('GF_PLUGINS_PREINSTALL_SYNC')).toBe(true);
    expect(GRAFANA_DOWNLOADS.test('GF_INSTALL_PLUGINS')).toBe(true);
  });

  it('turns off the calls home Grafana and Unleash make from their start: update checks, news, usage reporting', () => {
    expect(compose().services.grafana.environment).toMatchObject({
      GF_PLUGINS_PUBLIC_KEY_RETRIEVAL_DISABLED: 'true',
      GF_ANALYTICS_REPORTING_ENABLED: 'false',
      GF_ANALYTICS_CHECK_FOR_UPDATES: 'false',
      GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES: 'false',
      GF_NEWS_NEWS_FEED_ENABLED: 'false',
    });
    expect(compose().services.unleash.environment).toMatchObject({ CHECK_VERSION: 'false', SEND_TELEMETRY: 'false' });
  });
});

describe('the default stack starts on a closed network', () => {
  it('runs no Collector extension that needs the network to start, and publishes no Collector port', () => {
    const collector = collectorConfigOf(stacks.default);
    expect((collector.service.extensions as string[]).filter((id) => !STARTS_OFFLINE.includes(id.split('/')[0]))).toEqual([]);
    expect(stacks.default.services['otel-collector'].ports ?? []).toEqual([]);
    // Every network the Collector is on is internal: it needs, and has, no way out.
    const networks = Object.keys(stacks.default.services['otel-collector'].networks ?? {});
    expect(networks.filter((network) => stacks.default.networks[network]?.internal !== true)).toEqual([]);
    // The checker refuses the overlay's, whose oidc authenticator fetches Google's keys at start.
    const overlay = collectorConfigOf(stacks['hosted-runner overlay']);
    expect((overlay.service.extensions as string[]).filter((id) => !STARTS_OFFLINE.includes(id.split('/')[0]))).toEqual(['oidc']);
  });

  it('names no hosted runner, so every runner is handed the gateway', () => {
    const config = loadConfig(stacks.default.services[SERVICE].environment!);
    expect([config.jobPayload.hostedRunnerTypes, config.jobPayload.hostedRunnerIds]).toEqual([[], []]);
  });
});

describe('the hosted-runner overlay', () => {
  const compose = () => stacks['hosted-runner overlay'];
  const collector = () => collectorConfigOf(compose());

  it("merges with the base: its receiver configuration after the base's, its port, its network, the hosted runners named", () => {
    const base = stacks.default.services['otel-collector'];
    const merged = compose().services['otel-collector'];
    expect(merged.command!.slice(0, base.command!.length)).toEqual(base.command);
    expect(merged.command).toHaveLength(base.command!.length + 1);
    expect(mountsOf(merged)).toEqual(expect.arrayContaining(mountsOf(base)));
    // The rest of the stack is the base's, service by service.
    for (const name of Object.keys(stacks.default.services).filter((candidate) => candidate !== SERVICE && candidate !== 'otel-collector')) {
      // docker-compose 1.x prints a merged file's networks and mounts in another shape and order.
      const normalized = ({ networks, volumes, ...rest }: Service) => ({
        ...rest,
        networks: Object.keys(networks ?? {}).sort(),
        volumes: [...(volumes ?? [])].sort(),
      });
      expect({ name, definition: normalized(compose().services[name]) }).toEqual({ name, definition: normalized(stacks.default.services[name]) });
    }
    // GitLab.com's hosted runners are instance runners: the overlay's default.
    expect(loadConfig(compose().services[SERVICE].environment!).jobPayload.hostedRunnerTypes).toEqual(['instance_type']);
  });

  it('authenticates the hosted-runner receiver with Google-signed OIDC ID tokens for the audience the service hands out, on traces only', () => {
    const config = collector();
    const hosted = config.receivers['otlp/hosted'];
    expect(Object.keys(hosted.protocols)).toEqual(['http']);
    expect(hosted.protocols.http.auth).toEqual({ authenticator: 'oidc' });
    expect(config.service.extensions).toContain('oidc');
    expect(config.extensions.oidc.issuer_url).toBe(GOOGLE_ISSUER);
    // What the decorator asks hosted runners to request from Google (SPEC §4), as compose runs the service.
    expect(config.extensions.oidc.audience).toBe(loadConfig(compose().services[SERVICE].environment!).jobPayload.hostedOidcAudience);
    const pipelines = config.service.pipelines as Record<string, { receivers: string[] }>;
    expect(Object.keys(pipelines).filter((name) => pipelines[name].receivers.includes('otlp/hosted'))).toEqual(['traces/hosted']);
  });
});

describe("the Collector's ClickHouse tables", () => {
  it('creates, before the Collector starts, every logs and metrics table its exporter inserts into, with the columns it inserts', async () => {
    const exporter = collectorConfigOf(stacks.default).exporters.clickhouse;
    const tables: Record<string, Array<[string, string]>> = { [exporter.logs_table_name]: EXPORTER_LOGS_COLUMNS, ...EXPORTER_METRICS_TABLES };
    // The ClickHouse image runs the mounted folder's scripts in name order on its first start.
    const init = join(ROOT, 'deploy', 'clickhouse', 'init');
    expect(mountsOf(stacks.default.services.clickhouse)).toContainEqual({ source: init, target: '/docker-entrypoint-initdb.d' });
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
