import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/app-config';
import { MetricsService } from '../observability/metrics.service';
import { isSampled, tracestateFor, traceIdFor } from '../trace-context/trace-context';
import { createUnleashClient } from './flags.module';
import { FlagContext, FlagsService } from './flags.service';

type Constraint = { contextName: string; operator: string; values: string[]; inverted?: boolean };

function telemetryFlag(rollout: number, constraints: Constraint[] = [], enabled = true) {
  return {
    name: 'ci_job_telemetry',
    enabled,
    strategies: [{ name: 'flexibleRollout', parameters: { rollout: String(rollout), stickiness: 'projectId', groupId: 'ci_job_telemetry' }, constraints }],
  };
}

function samplingFlag(rollout: number) {
  return {
    name: 'ci_job_telemetry_sampling',
    enabled: true,
    strategies: [{ name: 'flexibleRollout', parameters: { rollout: String(rollout), stickiness: 'default', groupId: 'x' }, constraints: [] }],
  };
}

const context = (projectId: number, overrides: Partial<FlagContext> = {}): FlagContext => ({
  projectId,
  runnerId: 17,
  runnerType: 'project_type',
  ...overrides,
});

const PROJECTS = Array.from({ length: 10_000 }, (_, i) => i + 1);

describe('FlagsService on the embedded flag file', () => {
  let file: string;
  let flags: FlagsService;
  let unleash: ReturnType<typeof createUnleashClient>;

  const writeFlags = (features: unknown[]) => writeFileSync(file, JSON.stringify({ version: 2, features }));
  const enabledProjects = () => new Set(PROJECTS.filter((id) => flags.isTelemetryEnabled(context(id))));

  async function start(features: unknown[]) {
    writeFlags(features);
    unleash = createUnleashClient(loadConfig({ FLAGS_FILE: file }).flags);
    flags = new FlagsService(unleash, new MetricsService());
    await flags.onModuleInit();
  }

  /** Waits for the file watcher to deliver an edit; the embedded default promises at most 5 s. */
  async function editAndWait(features: unknown[], until: () => boolean) {
    const editedAt = Date.now();
    writeFlags(features);
    while (!until()) {
      if (Date.now() - editedAt > 5000) throw new Error('the edit was not in force within 5 s');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  beforeEach(() => {
    file = join(mkdtempSync(join(tmpdir(), 'cjt-flags-')), 'flags.json');
  });
  afterEach(() => unleash.destroy());

  it('enables 10 % of projects, then 50 %, keeping every project that was enabled (flexibleRollout on projectId)', async () => {
    await start([telemetryFlag(10)]);
    expect(flags.definitionsLoaded()).toBe(true);
    const atTen = enabledProjects();
    expect(atTen.size / PROJECTS.length).toBeGreaterThanOrEqual(0.085);
    expect(atTen.size / PROJECTS.length).toBeLessThanOrEqual(0.115);

    await editAndWait([telemetryFlag(50)], () => enabledProjects().size > atTen.size);
    const atFifty = enabledProjects();
    expect(atFifty.size / PROJECTS.length).toBeGreaterThanOrEqual(0.48);
    expect(atFifty.size / PROJECTS.length).toBeLessThanOrEqual(0.52);
    for (const projectId of atTen) expect(atFifty.has(projectId)).toBe(true);
  });

  it('honours a Customer0 project list and a runner-type constraint', async () => {
    await start([
      telemetryFlag(100, [
        { contextName: 'projectId', operator: 'IN', values: ['7', '42'] },
        { contextName: 'runnerType', operator: 'IN', values: ['project_type', 'group_type'] },
      ]),
    ]);
    expect(enabledProjects()).toEqual(new Set([7, 42]));
    expect(flags.isTelemetryEnabled(context(7, { runnerType: 'instance_type' }))).toBe(false);
    expect(flags.isTelemetryEnabled(context(42, { runnerType: 'group_type' }))).toBe(true);
  });

  it('turns everything off when the toggle is disabled (kill switch)', async () => {
    await start([telemetryFlag(100, [], false)]);
    expect(enabledProjects().size).toBe(0);
  });

  it('reads the sampling percentage, 100 % when the sampling toggle is absent', async () => {
    await start([telemetryFlag(100)]);
    expect(flags.samplingPercent()).toBe(100);
    await editAndWait([telemetryFlag(100), samplingFlag(25)], () => flags.samplingPercent() === 25);
  });

  it('samples whole pipelines consistently with the ot=th it writes, monotone in the percentage', async () => {
    await start([telemetryFlag(100), samplingFlag(25)]);
    const key = Buffer.alloc(32, 7);
    const threshold = BigInt(`0x${tracestateFor(flags.samplingPercent())!.slice('ot=th:'.length).padEnd(14, '0')}`);
    const sampledAt25 = new Set<number>();
    for (let pipeline = 1; pipeline <= 2000; pipeline++) {
      const traceId = traceIdFor(key, pipeline);
      const sampled = isSampled(traceId, flags.samplingPercent());
      expect(sampled).toBe(BigInt(`0x${traceId.slice(18)}`) >= threshold);
      if (sampled) sampledAt25.add(pipeline);
    }
    expect(sampledAt25.size / 2000).toBeGreaterThan(0.22);
    expect(sampledAt25.size / 2000).toBeLessThan(0.28);

    await editAndWait([telemetryFlag(100), samplingFlag(50)], () => flags.samplingPercent() === 50);
    for (const pipeline of sampledAt25) expect(isSampled(traceIdFor(key, pipeline), 50)).toBe(true);
  });

  it('keeps the last good definitions when the file is broken, and takes the next good edit', async () => {
    await start([telemetryFlag(100, [{ contextName: 'projectId', operator: 'IN', values: ['7'] }])]);
    expect(enabledProjects()).toEqual(new Set([7]));

    writeFileSync(file, '{ "features": [ { "name": "ci_job_telemetry", ');
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(enabledProjects()).toEqual(new Set([7]));

    writeFileSync(file, JSON.stringify({ features: [{ name: 'ci_job_telemetry' }] }));
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(enabledProjects()).toEqual(new Set([7]));

    await editAndWait([telemetryFlag(100, [{ contextName: 'projectId', operator: 'IN', values: ['8'] }])], () => flags.isTelemetryEnabled(context(8)));
    expect(flags.isTelemetryEnabled(context(7))).toBe(false);
  });

  it('reports how old the definitions are', async () => {
    await start([telemetryFlag(10)]);
    expect(flags.definitionsAgeSeconds()).toBeGreaterThanOrEqual(0);
    expect(flags.definitionsAgeSeconds(Date.now() + 30_000)).toBeGreaterThanOrEqual(30);
  });
});
