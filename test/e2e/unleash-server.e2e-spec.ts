import { InMemStorageProvider, Unleash, UnleashEvents } from 'unleash-client';
import { waitFor } from '../helpers/ports';
import { startUnleashServer, UnleashServer } from '../helpers/unleash-server';

/**
 * Proves the test infrastructure: a real Unleash server on a real PostgreSQL, an operator changing
 * `ci_job_telemetry` through the admin API, and a real unleash-client following it (SPEC §4 "Flags").
 */
const FLAG = 'ci_job_telemetry';
const PROJECT_IDS = Array.from({ length: 1000 }, (_, index) => index + 1);
const FOLLOW_MS = 10_000; // refreshInterval is 1 s: "within a few seconds", with room for a slow machine
// unleash-client retries a failed fetch twice with backoff (1 s, 2 s) before it reports an error.
const OUTAGE_NOTICED_MS = 15_000;

describe('a real Unleash server driving unleash-client', () => {
  let server: UnleashServer;
  let client: Unleash;
  const clientErrors: Error[] = [];

  const enabledProjects = (): Set<number> => new Set(PROJECT_IDS.filter((id) => client.isEnabled(FLAG, { properties: { projectId: String(id) } })));

  /** Resolves when the client emits one of `events`, at most `timeoutMs` from now. */
  const clientEmits = async (what: string, events: UnleashEvents[], timeoutMs = FOLLOW_MS): Promise<void> => {
    let seen = false;
    const onEvent = () => (seen = true);
    events.forEach((event) => client.on(event, onEvent));
    try {
      await waitFor<true>(what, async () => (seen ? true : undefined), timeoutMs);
    } finally {
      events.forEach((event) => client.off(event, onEvent));
    }
  };

  /** Resolves with the enabled projects once `accept` holds for them. */
  const clientSees = (what: string, accept: (enabled: Set<number>) => boolean): Promise<Set<number>> =>
    waitFor(
      what,
      async () => {
        const enabled = enabledProjects();
        return accept(enabled) ? enabled : undefined;
      },
      FOLLOW_MS,
    );

  beforeAll(async () => {
    const startedAt = Date.now();
    server = await startUnleashServer();
    process.stderr.write(`postgres + unleash started in ${Date.now() - startedAt} ms\n`);
    await server.upsertFlexibleRollout(FLAG, { rollout: 10, stickiness: 'projectId' });

    client = new Unleash({
      url: server.url,
      appName: 'ci-job-telemetry-e2e',
      customHeaders: { Authorization: server.clientToken },
      refreshInterval: 1000,
      disableMetrics: true,
      skipInstanceCountWarning: true,
      // No backup file in the OS temp dir: an earlier run's definitions must not leak into this one.
      storageProvider: new InMemStorageProvider(),
    });
    client.on(UnleashEvents.Error, (error: Error) => clientErrors.push(error));
    client.on(UnleashEvents.Warn, () => undefined);
    await clientEmits('the client to fetch its first definitions', [UnleashEvents.Synchronized]);
  }, 180_000);

  afterAll(async () => {
    client?.destroy();
    await server?.stop();
  }, 30_000);

  let enabledAt10: Set<number>;

  it('enables about 10 % of 1,000 projects at a 10 % rollout with projectId stickiness', () => {
    enabledAt10 = enabledProjects();
    expect(enabledAt10.size).toBeGreaterThanOrEqual(60);
    expect(enabledAt10.size).toBeLessThanOrEqual(140);
    // Sticky: the same project gets the same answer every time.
    expect(enabledProjects()).toEqual(enabledAt10);
  });

  let enabledAt50: Set<number>;

  it('follows a raise to 50 % within seconds, keeping every project that was already enabled', async () => {
    await server.upsertFlexibleRollout(FLAG, { rollout: 50, stickiness: 'projectId' });

    enabledAt50 = await clientSees('the client to see the 50 % rollout', (enabled) => enabled.size > 300);
    expect(enabledAt50.size).toBeGreaterThanOrEqual(440);
    expect(enabledAt50.size).toBeLessThanOrEqual(560);
    expect([...enabledAt10].filter((id) => !enabledAt50.has(id))).toEqual([]);
  });

  it('keeps evaluating its last definitions while Unleash is down', async () => {
    const errorsBefore = clientErrors.length;
    await server.stopUnleash();

    // The client has noticed: its refreshes fail.
    await waitFor('the client to fail a refresh', async () => (clientErrors.length > errorsBefore ? true : undefined), OUTAGE_NOTICED_MS);
    expect(enabledProjects()).toEqual(enabledAt50);
  });

  it('picks up where it left off when Unleash comes back with the same database', async () => {
    // Listening before the restart, so the first refresh cannot slip by; the wait covers the restart itself.
    const refreshed = clientEmits('the client to refresh from the restarted Unleash', [UnleashEvents.Unchanged, UnleashEvents.Changed], 60_000);
    await server.startUnleash();
    // The first successful refresh after the restart brings the same definitions (the flag lives in PostgreSQL).
    await refreshed;
    expect(enabledProjects()).toEqual(enabledAt50);

    // And the client follows the operator again.
    await server.setEnabled(FLAG, false);
    await clientSees('the client to see the flag switched off', (enabled) => enabled.size === 0);
    await server.setEnabled(FLAG, true);
    expect(await clientSees('the client to see the flag back on', (enabled) => enabled.size > 0)).toEqual(enabledAt50);
  }, 90_000);
});
