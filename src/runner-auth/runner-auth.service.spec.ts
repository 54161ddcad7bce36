import { loadConfig } from '../config/app-config';
import { TEST_SECRETS } from '../../test/helpers/internal-api';
import { Grant } from '../grants/grant';
import { MemoryGrantStore } from '../grants/memory-grant-store';
import { tokenDigest } from '../grants/token-digest';
import { MemoryLimitStore } from '../limits/memory-limit-store';
import { MetricsService } from '../observability/metrics.service';
import { RunnerAuthMetrics } from './runner-auth.metrics';
import { StoreUnavailableError } from '../store/store-unavailable-error';
import { AuthOutcome } from './auth-outcome';
import { mintCapability } from './job-capability';
import { JobTokenCheck, JobTokenVerifier } from './job-token-verifier';
import { RunnerAuthService } from './runner-auth.service';
import { RunnerCredential } from './runner-credential';

const secrets = TEST_SECRETS;
const config = loadConfig({ GRANT_REVOKE_GRACE_SECONDS: '60', AUTH_DECISION_MAX_AGE_SECONDS: '30', RUNNER_RATE_LIMIT: '5' });
const RUNNER_TOKEN = 'glrt-runner-17';
const JOB_TOKEN = 'glcbt-opaque-1001';

/** GitLab's key check as the service sees it: whatever the test says the token is. */
class ScriptedJobTokens {
  constructor(public check: (token: string) => Promise<JobTokenCheck> = async () => ({ kind: 'opaque' })) {}
}

/** A store that has gone away: every call fails as an outage does. */
class UnreachableStore extends MemoryGrantStore {
  override async findGrant(): Promise<Grant | null> {
    throw new StoreUnavailableError('connection refused');
  }
  override async findGrantByJobTokenDigest(): Promise<Grant | null> {
    throw new StoreUnavailableError('connection refused');
  }
}

const grant = (overrides: Partial<Grant> = {}): Grant => ({
  jobId: 1001,
  projectId: 7,
  pipelineId: 500,
  rootPipelineId: 500,
  runnerId: 17,
  traceId: 'a'.repeat(32),
  spanParentId: 'b'.repeat(16),
  runnerTokenDigest: tokenDigest(secrets.tokenDigestKey, RUNNER_TOKEN),
  jobTokenDigest: tokenDigest(secrets.tokenDigestKey, JOB_TOKEN),
  expiresAt: Date.now() + 3_600_000,
  ...overrides,
});

describe('RunnerAuthService (SPEC §5, §6)', () => {
  const stores: Array<MemoryGrantStore | MemoryLimitStore> = [];
  afterEach(() => {
    for (const store of stores.splice(0)) store.close();
  });

  async function serviceWith(
    options: { grant?: Grant; store?: MemoryGrantStore; limits?: MemoryLimitStore; jobTokens?: ScriptedJobTokens; metrics?: MetricsService } = {},
  ) {
    const store = options.store ?? new MemoryGrantStore();
    const limits = options.limits ?? new MemoryLimitStore();
    stores.push(store, limits);
    if (options.grant !== undefined) await store.saveGrant(options.grant);
    const jobTokens = (options.jobTokens ?? new ScriptedJobTokens()) as unknown as JobTokenVerifier;
    return new RunnerAuthService(
      config.runnerAuth,
      config.jobPayload,
      secrets,
      store,
      limits,
      jobTokens,
      new RunnerAuthMetrics(options.metrics ?? new MetricsService()),
    );
  }
  const tokens: RunnerCredential = { kind: 'tokens', jobToken: JOB_TOKEN, runnerToken: RUNNER_TOKEN };

  it('allows the runner that picked the job up, with the job identity, for no longer than the revocation grace', async () => {
    const service = await serviceWith({ grant: grant() });
    const outcome = await service.authenticate(tokens);
    expect(outcome).toEqual<AuthOutcome>({
      kind: 'allowed',
      identity: {
        jobId: 1001,
        projectId: 7,
        pipelineId: 500,
        runnerId: 17,
        traceId: 'a'.repeat(32),
        expiresAt: expect.any(Number) as unknown as number,
        // The job span it was handed and the control plane's three others: its exports may carry none of them.
        controlPlaneSpanIds: expect.arrayContaining(['b'.repeat(16)]) as unknown as string[],
      },
      maxAgeSeconds: 30,
    });
  });

  it("refuses another runner's token for the same job", async () => {
    const service = await serviceWith({ grant: grant() });
    expect(await service.authenticate({ ...tokens, runnerToken: 'glrt-runner-18' })).toEqual({
      kind: 'unauthenticated',
      reason: 'job was not picked up by this runner',
    });
  });

  it('takes a capability only for the job it was minted for', async () => {
    const service = await serviceWith({ grant: grant() });
    const capability = mintCapability(secrets.capabilityKeys[0], 1001);
    expect((await service.authenticate({ kind: 'capability', jobId: 1001, capability })).kind).toBe('allowed');
    expect(await service.authenticate({ kind: 'capability', jobId: 1002, capability })).toEqual({
      kind: 'unauthenticated',
      reason: 'invalid capability for this job',
    });
  });

  it('answers forbidden for a revoked grant and for a verified job without one', async () => {
    const revoked = await serviceWith({ grant: grant({ revokedAt: Date.now() - 1 }) });
    expect(await revoked.authenticate(tokens)).toEqual({ kind: 'forbidden', reason: 'grant revoked' });
    const none = await serviceWith({ jobTokens: new ScriptedJobTokens(async () => ({ kind: 'jwt', jobId: 1003 })) });
    expect(await none.authenticate(tokens)).toEqual({ kind: 'forbidden', reason: 'telemetry is not enabled for this job' });
  });

  it('calls a store outage or unreadable keys an outage with Retry-After, never a bad token', async () => {
    const storeDown = await serviceWith({ store: new UnreachableStore() });
    expect(await storeDown.authenticate(tokens)).toEqual({ kind: 'unavailable', reason: 'grant store unavailable', retryAfterSeconds: 1 });
    const keysDown = await serviceWith({ jobTokens: new ScriptedJobTokens(async () => ({ kind: 'unavailable', reason: 'JOB_TOKEN_JWKS_URL unreachable' })) });
    expect(await keysDown.authenticate(tokens)).toEqual({ kind: 'unavailable', reason: 'job token keys unavailable', retryAfterSeconds: 1 });
  });

  it("limits a runner's decisions to its rate, with the window's rest as Retry-After", async () => {
    const service = await serviceWith({ grant: grant() });
    let outcome: AuthOutcome | undefined;
    for (let attempt = 0; attempt <= config.runnerAuth.rateLimit; attempt++) outcome = await service.authenticate(tokens);
    expect(outcome).toMatchObject({ kind: 'rate_limited', retryAfterSeconds: expect.any(Number) });
  });

  describe("the runner's rate window, hit together with the grant read once the job's runner is known", () => {
    const allowedTimes = async (service: RunnerAuthService, credential: RunnerCredential, times: number) => {
      const kinds = [];
      for (let attempt = 0; attempt < times; attempt++) kinds.push((await service.authenticate(credential)).kind);
      return kinds;
    };

    it('never charges a refusal to the runner, however often the job was allowed before', async () => {
      const store = new MemoryGrantStore();
      const service = await serviceWith({ grant: grant(), store });
      expect(await allowedTimes(service, tokens, 1)).toEqual(['allowed']);
      expect(await allowedTimes(service, { ...tokens, runnerToken: 'glrt-runner-18' }, 10)).toEqual(Array(10).fill('unauthenticated'));
      // The other 4 of the runner's 5 are still there, and no more.
      expect(await allowedTimes(service, tokens, 5)).toEqual(['allowed', 'allowed', 'allowed', 'allowed', 'rate_limited']);
    });

    it('never charges the lookups of a revoked job', async () => {
      const store = new MemoryGrantStore();
      const service = await serviceWith({ grant: grant(), store });
      const capability = mintCapability(secrets.capabilityKeys[0], 1001);
      expect(await allowedTimes(service, { kind: 'capability', jobId: 1001, capability }, 2)).toEqual(['allowed', 'allowed']);
      await store.revokeGrant(1001, Date.now() - 1);
      expect(await allowedTimes(service, { kind: 'capability', jobId: 1001, capability }, 5)).toEqual(Array(5).fill('forbidden'));
      await store.saveGrant(grant({ jobId: 1002, jobTokenDigest: tokenDigest(secrets.tokenDigestKey, 'glcbt-opaque-1002') }));
      expect(await allowedTimes(service, { ...tokens, jobToken: 'glcbt-opaque-1002' }, 4)).toEqual(['allowed', 'allowed', 'allowed', 'rate_limited']);
    });

    it('still answers a revoked job 403, not 503, while only the rate window cannot be hit', async () => {
      let windowUp = true;
      const limits = new (class extends MemoryLimitStore {
        override async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number) {
          if (!windowUp) throw new StoreUnavailableError('rate window node down');
          return super.takeWindowBlock(key, wanted, limit, windowMs);
        }
      })();
      const store = new MemoryGrantStore();
      const service = await serviceWith({ grant: grant(), store, limits });
      expect(await allowedTimes(service, tokens, 1)).toEqual(['allowed']);
      windowUp = false;
      await store.revokeGrant(1001, Date.now() - 1);
      expect(await service.authenticate(tokens)).toEqual({ kind: 'forbidden', reason: 'grant revoked' });
    });

    it('counts its store round trips for the runner windows in the metrics, as the gateway counts its own', async () => {
      const metrics = new MetricsService();
      const service = await serviceWith({ grant: grant(), metrics });
      expect(await allowedTimes(service, tokens, 2)).toEqual(['allowed', 'allowed']);
      const counted = await metrics.registry.getSingleMetric('ci_job_telemetry_auth_store_calls_total')!.get();
      const windowCalls = counted.values.find((value) => value.labels.kind === 'window')?.value ?? 0;
      expect(windowCalls).toBeGreaterThanOrEqual(2);
      await service.onModuleDestroy();
    });

    it('charges the runner that picked the job up again, not the one that had it before', async () => {
      const store = new MemoryGrantStore();
      const service = await serviceWith({ grant: grant(), store });
      expect(await allowedTimes(service, tokens, 1)).toEqual(['allowed']);
      await store.saveGrant(grant({ runnerId: 18, runnerTokenDigest: tokenDigest(secrets.tokenDigestKey, 'glrt-runner-18') }));
      expect(await allowedTimes(service, { ...tokens, runnerToken: 'glrt-runner-18' }, 1)).toEqual(['allowed']);
      expect(await allowedTimes(service, tokens, 1)).toEqual(['unauthenticated']);
      // Runner 18 was charged once, for its own decision: 4 of its 5 are left.
      expect(await allowedTimes(service, { ...tokens, runnerToken: 'glrt-runner-18' }, 5)).toEqual([...Array(4).fill('allowed'), 'rate_limited']);
      // Runner 17 once too, for its decision before the job moved: 4 left for a job it holds.
      await store.saveGrant(grant({ jobId: 1003, jobTokenDigest: tokenDigest(secrets.tokenDigestKey, 'glcbt-opaque-1003') }));
      expect(await allowedTimes(service, { ...tokens, jobToken: 'glcbt-opaque-1003' }, 5)).toEqual([...Array(4).fill('allowed'), 'rate_limited']);
    });
  });
});
