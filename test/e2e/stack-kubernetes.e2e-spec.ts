import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments, parse } from 'yaml';
import { loadConfig, VARIABLE_NAMES } from '../../src/config/app-config';
import { SHUTDOWN_GRACE_MS } from '../../src/observability/shutdown';

const ROOT = join(__dirname, '..', '..');
const DIR = join(ROOT, 'deploy', 'kubernetes');
const VALIDATOR = join(ROOT, 'test', 'kubernetes', 'validate.mjs');

// A Kubernetes object as parsed from YAML: `spec` differs by kind, and the tests read only what they assert.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; spec?: any; data?: Record<string, string> };

const kustomization = parse(readFileSync(join(DIR, 'kustomization.yaml'), 'utf8')) as { resources: string[] };
const objects: K8sObject[] = kustomization.resources.flatMap((file) =>
  parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).map((document) => document.toJS() as K8sObject),
);
const find = (kind: string, name: string) => {
  const found = objects.find((object) => object.kind === kind && object.metadata.name === name);
  if (found === undefined) throw new Error(`no ${kind} ${name} in deploy/kubernetes`);
  return found;
};
const deployments = objects.filter((object) => object.kind === 'Deployment');
const container = (deployment: K8sObject) => deployment.spec.template.spec.containers[0];

/** Validates with the Kubernetes API's JSON schemas, in test/kubernetes's own process (ESM only). */
function validateWithSchemas(list: K8sObject[]): Promise<Array<{ kind: string; name: string; error?: string }>> {
  return new Promise((resolve, reject) => {
    const child = execFile(process.execPath, [VALIDATOR], { cwd: join(ROOT, 'test', 'kubernetes') }, (error, stdout, stderr) =>
      error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(JSON.parse(stdout)),
    );
    child.stdin!.end(JSON.stringify(list));
  });
}

/**
 * The environment a container of this Deployment starts with, as the service reads it: the
 * ConfigMap's data, then its own env; values from Secrets stand in as valid examples.
 */
function environmentOf(deployment: K8sObject): Record<string, string> {
  const env: Record<string, string> = {};
  for (const source of container(deployment).envFrom ?? []) Object.assign(env, find('ConfigMap', source.configMapRef.name).data);
  for (const variable of container(deployment).env ?? []) {
    const secret = variable.valueFrom?.secretKeyRef;
    env[variable.name] =
      secret === undefined
        ? variable.value
        : (({ REDIS_URL: 'redis://redis.example:6379', UNLEASH_API_TOKEN: 'default:production.token' } as Record<string, string>)[variable.name] ?? 'secret');
  }
  return env;
}

describe('deploy/kubernetes manifests', () => {
  it('are valid Kubernetes objects by the API schemas, and kustomize lists every file', async () => {
    if (!existsSync(join(ROOT, 'test', 'kubernetes', 'node_modules', 'kubernetes-models'))) {
      throw new Error('kubernetes-models is not installed in test/kubernetes: run `npm test` or `bash scripts/install-stack-test-deps.sh`');
    }
    const files = readdirSync(DIR).filter((file) => file.endsWith('.yaml') && file !== 'kustomization.yaml');
    expect([...kustomization.resources].sort()).toEqual(files.sort());
    const results = await validateWithSchemas(objects);
    expect(results.filter((result) => result.error !== undefined)).toEqual([]);
    expect(objects.map((object) => object.kind).sort()).toEqual(
      [
        'ConfigMap',
        'Deployment',
        'Deployment',
        'HorizontalPodAutoscaler',
        'HorizontalPodAutoscaler',
        'NetworkPolicy',
        'PodDisruptionBudget',
        'PodDisruptionBudget',
        'Service',
        'Service',
      ].sort(),
    );
    // The checker itself: a wrong type is refused.
    const broken = structuredClone(find('Deployment', 'ci-job-telemetry'));
    broken.spec.replicas = 'two';
    expect((await validateWithSchemas([broken]))[0].error).toMatch(/replicas/);
  }, 30_000);

  it.each(['ci-job-telemetry', 'ci-job-telemetry-gateway'])('%s: configuration the service accepts, secrets by reference only', (name) => {
    const deployment = find('Deployment', name);
    const env = environmentOf(deployment);
    expect(Object.keys(env).filter((variable) => !VARIABLE_NAMES.has(variable))).toEqual([]);
    expect(() => loadConfig(env)).not.toThrow();
    // Redis is external and shared by every replica: its URL (with any password) comes from a Secret.
    const redis = container(deployment).env.find((variable: { name: string }) => variable.name === 'REDIS_URL');
    expect(redis.valueFrom.secretKeyRef).toMatchObject({ name: expect.any(String), key: expect.any(String) });
    expect(objects.some((object) => /redis/i.test(object.metadata.name))).toBe(false);
    // Every key file named is mounted from a Secret; nothing secret is written in the manifests.
    const mounts = container(deployment).volumeMounts as Array<{ name: string; mountPath: string }>;
    const volumes = deployment.spec.template.spec.volumes as Array<{ name: string; secret?: { items: Array<{ path: string }> } }>;
    for (const variable of Object.keys(env).filter((key) => key.endsWith('_FILE'))) {
      const mount = mounts.find((candidate) => env[variable].startsWith(`${candidate.mountPath}/`));
      const volume = volumes.find((candidate) => candidate.name === mount?.name);
      expect({ variable, items: volume?.secret?.items.map((item) => item.path) }).toEqual({
        variable,
        items: expect.arrayContaining([env[variable].split('/').pop()]),
      });
    }
    for (const value of Object.values(find('ConfigMap', 'ci-job-telemetry').data!)) expect(value).not.toMatch(/^(glrt-|glcbt-)|password|token/i);
  });

  it.each(['ci-job-telemetry', 'ci-job-telemetry-gateway'])('%s: probes, ports, resources and termination that match the service', (name) => {
    const deployment = find('Deployment', name);
    const config = loadConfig(environmentOf(deployment));
    const spec = container(deployment);
    const portNamed = (port: string) => spec.ports.find((candidate: { name: string }) => candidate.name === port)?.containerPort;
    expect(portNamed('internal')).toBe(config.process.internalPort);
    expect(portNamed('otlp-http')).toBe(config.process.gatewayPort);
    for (const [probe, path] of [
      ['startupProbe', '/-/liveness'],
      ['livenessProbe', '/-/liveness'],
      ['readinessProbe', '/-/readiness'],
    ]) {
      expect({ probe, httpGet: spec[probe]?.httpGet }).toEqual({ probe, httpGet: { path, port: 'internal' } });
    }
    expect(spec.resources.requests).toEqual({ cpu: expect.any(String), memory: expect.any(String) });
    expect(spec.resources.limits.memory).toEqual(expect.any(String));
    // SIGTERM arrives after preStop; the service then drains for up to SHUTDOWN_GRACE_MS. The pod
    // must be given all of that, or the kubelet kills it with exports in flight.
    const preStopSeconds = Number(spec.lifecycle.preStop.exec.command[1]);
    expect(spec.lifecycle.preStop.exec.command[0]).toBe('sleep');
    expect(deployment.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(preStopSeconds + SHUTDOWN_GRACE_MS / 1000);
    expect(deployment.spec.strategy.rollingUpdate.maxUnavailable).toBe(0);
  });

  it('routes Services, autoscalers and disruption budgets to the pods they are meant for', () => {
    for (const deployment of deployments) {
      const labels = deployment.spec.template.metadata.labels as Record<string, string>;
      expect(deployment.spec.selector.matchLabels).toEqual(labels);
      const selects = (selector: Record<string, string>) => Object.entries(selector).every(([key, value]) => labels[key] === value);
      const services = objects.filter((object) => object.kind === 'Service' && selects(object.spec.selector));
      expect(services).toHaveLength(1);
      for (const port of services[0].spec.ports) {
        expect(container(deployment).ports.map((candidate: { name: string }) => candidate.name)).toContain(port.targetPort);
      }
      const hpa = objects.find((object) => object.kind === 'HorizontalPodAutoscaler' && object.spec.scaleTargetRef.name === deployment.metadata.name)!;
      expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name });
      const pdb = objects.find((object) => object.kind === 'PodDisruptionBudget' && selects(object.spec.selector.matchLabels))!;
      // A drain can always proceed: fewer pods must stay than the autoscaler ever leaves.
      expect(pdb.spec.minAvailable).toBeLessThan(hpa.spec.minReplicas);
      expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    }
  });

  it('admits only GitLab, the edge gateways and Prometheus to the internal port, and runners to the OTLP port', () => {
    const control = find('Deployment', 'ci-job-telemetry');
    const policy = find('NetworkPolicy', 'ci-job-telemetry-internal-port');
    const podLabels = control.spec.template.metadata.labels as Record<string, string>;
    expect(Object.entries(policy.spec.podSelector.matchLabels).every(([key, value]) => podLabels[key] === value)).toBe(true);
    expect(policy.spec.policyTypes).toEqual(['Ingress']);
    const rules = policy.spec.ingress as Array<{ from?: Array<Record<string, { matchLabels: Record<string, string> }>>; ports: Array<{ port: string }> }>;
    const internal = rules.filter((rule) => rule.ports.some((port) => port.port === 'internal'));
    // One rule for the internal port, and it names its peers: no rule admits 8080 from everywhere.
    expect(internal).toHaveLength(1);
    expect(internal[0].from?.length).toBeGreaterThan(0);
    const edgeLabels = find('Deployment', 'ci-job-telemetry-gateway').spec.template.metadata.labels as Record<string, string>;
    const admitsEdge = internal[0].from!.some(
      (peer) => peer.podSelector !== undefined && Object.entries(peer.podSelector.matchLabels).every(([key, value]) => edgeLabels[key] === value),
    );
    expect(admitsEdge).toBe(true);
    expect(rules.some((rule) => rule.from === undefined && rule.ports.some((port) => port.port === 'otlp-http'))).toBe(true);
    // The named ports exist on the pods the policy selects.
    for (const rule of rules)
      for (const port of rule.ports) expect(container(control).ports.map((candidate: { name: string }) => candidate.name)).toContain(port.port);
  });

  it('start from the service image alone, and hand every runner the gateway: no hosted runners unless an operator names them', () => {
    // Nothing else is pulled or run at start: no init container, no sidecar (docs/deployment.md "What each container needs at start").
    const images = deployments.flatMap((deployment) =>
      [...deployment.spec.template.spec.containers, ...(deployment.spec.template.spec.initContainers ?? [])].map((spec: { image: string }) => spec.image),
    );
    expect(images).toEqual(deployments.map(() => expect.stringMatching(/^ci-job-telemetry:\d+\.\d+\.\d+$/)));
    // The manifests ship no Collector receiver for hosted runners, so none is named and no runner is handed one.
    for (const deployment of deployments) {
      const env = environmentOf(deployment);
      const config = loadConfig(env);
      expect({
        name: deployment.metadata.name,
        hosted: [config.jobPayload.hostedRunnerTypes, config.jobPayload.hostedRunnerIds],
        url: env.COLLECTOR_PUBLIC_URL,
      }).toEqual({
        name: deployment.metadata.name,
        hosted: [[], []],
        url: undefined,
      });
    }
  });

  it('points the edge gateway at the control Service and gives it only the internal-API key', () => {
    const edge = environmentOf(find('Deployment', 'ci-job-telemetry-gateway'));
    expect(edge.ROLE).toBe('gateway');
    const auth = new URL(edge.AUTH_URL);
    const control = find('Service', 'ci-job-telemetry');
    expect(auth.hostname).toBe(control.metadata.name);
    expect(Number(auth.port)).toBe(control.spec.ports.find((port: { name: string }) => port.name === 'internal').port);
    expect(auth.pathname).toBe('/internal/ci/telemetry/auth');
    expect(Object.keys(edge).filter((key) => key.endsWith('_FILE'))).toEqual(['INTERNAL_API_SECRET_FILE']);
    // Runners are told to export to the edge: the decorator's GATEWAY_PUBLIC_URL is shared config.
    expect(find('ConfigMap', 'ci-job-telemetry').data!.GATEWAY_PUBLIC_URL).toMatch(/^https:\/\//);
  });
});
