import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { isSampled, randomnessOf, traceIdFor } from '../../src/trace-context/trace-context';
import { jobPayloadRequest, JobPayloadRequestBody } from '../fixtures/job-payload';
import { internalApiHeaders } from '../helpers/internal-api';
import { waitFor } from '../helpers/ports';
import { ServiceProcess, startService } from '../helpers/service';
import { startUnleashServer, UnleashServer } from '../helpers/unleash-server';

/**
 * The rollout an operator runs in Unleash (SPEC §4 "Flags"), proven against the built service and a
 * real Unleash 7.5 on a real PostgreSQL: what the operator sets through the admin API is what the
 * decorator does, within the refresh interval plus one second, and Unleash going away changes nothing
 * for job pickup.
 */
const TELEMETRY = 'ci_job_telemetry';
const SAMPLING = 'ci_job_telemetry_sampling';
const PATH = '/internal/ci/telemetry/job_payload';
const REFRESH_MS = 1000;
/** The promise: an admin change is in force within the refresh interval plus one second. */
const FOLLOW_MS = REFRESH_MS + 1000;
/**
 * After an outage unleash-client is somewhere in its retry cycle (make-fetch-happen retries a refused
 * fetch after 1 s and 2 s before giving up on that refresh), so coming back is bounded more loosely.
 */
const FOLLOW_AFTER_OUTAGE_MS = 20_000;
const IN_FLIGHT = 20;
/** One internal-API JWT per batch: it must be under 60 s old when the service checks it. */
const BATCH = 1000;
const PROJECT_IDS = Array.from({ length: 2000 }, (_, index) => index + 1);
const PIPELINE_IDS = Array.from({ length: 2000 }, (_, index) => 10_000 + index);
const CUSTOMER0 = [7, 42, 1500];
/** A fixed trace key makes the sampled pipelines the same on every run (trace ids are HMACs under it). */
const TRACE_KEY = Buffer.alloc(32, 0x5a);

/** A 200 answer of the decorator (anything else fails the test where it happens). */
interface Answer {
  readonly reason: string;
  readonly traceId?: string;
  readonly tracestate?: string;
  readonly variables: Array<{ key: string; value: string }>;
  /** Date.now() when the answer arrived. */
  readonly receivedAt: number;
  readonly ms: number;
}

type Reasons = Record<string, number>;

describe('operators roll out ci_job_telemetry with a real Unleash server', () => {
  let unleash: UnleashServer;
  let service: ServiceProcess;
  /** undici's pool rather than fetch: half the client CPU, which the service shares on a small machine. */
  let pool: Pool;
  let secretsDir: string;
  let appName: string;
  let nextJobId = 1;
  const followTimes: Array<{ change: string; ms: number; adminCallMs: number }> = [];

  const job = (projectId: number, overrides: { pipeline?: number; rootPipeline?: number; runnerType?: string } = {}): JobPayloadRequestBody => {
    const id = nextJobId++;
    const rootPipeline = overrides.rootPipeline ?? overrides.pipeline ?? 500;
    return jobPayloadRequest({
      runner: { runner_type: overrides.runnerType ?? 'project_type' },
      job: { id, project_id: projectId, pipeline_id: overrides.pipeline ?? rootPipeline, root_pipeline_id: rootPipeline },
    });
  };

  async function decorate(body: JobPayloadRequestBody, headers: Record<string, string>): Promise<Answer> {
    const started = performance.now();
    const response = await pool.request({
      path: PATH,
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the decorator's answer, SPEC §4
    const json = (await response.body.json()) as any;
    const ms = performance.now() - started;
    if (response.statusCode !== 200) throw new Error(`decorator answered ${response.statusCode}: ${JSON.stringify(json)}`);
    return {
      reason: json.telemetry.reason,
      traceId: json.telemetry.trace_id,
      tracestate: json.telemetry.tracestate,
      variables: json.payload.variables ?? [],
      receivedAt: Date.now(),
      ms,
    };
  }

  /** Every job through the real endpoint, IN_FLIGHT at a time; answers in the order of `jobs`. */
  async function decorateAll(jobs: JobPayloadRequestBody[], inFlight = IN_FLIGHT): Promise<Answer[]> {
    const answers: Answer[] = new Array(jobs.length);
    for (let start = 0; start < jobs.length; start += BATCH) {
      const headers = await internalApiHeaders(service.secrets.internalApiSecret);
      const end = Math.min(start + BATCH, jobs.length);
      let next = start;
      const worker = async () => {
        while (next < end) {
          const index = next++;
          answers[index] = await decorate(jobs[index], headers);
        }
      };
      await Promise.all(Array.from({ length: Math.min(inFlight, end - start) }, worker));
    }
    return answers;
  }

  const enabledProjects = (answers: Answer[], projectIds: number[]): Set<number> =>
    new Set(projectIds.filter((_, index) => answers[index].reason === 'enabled'));

  async function decisionCounts(): Promise<Reasons> {
    const text = await (await fetch(`${service.url}/metrics`)).text();
    const counts: Reasons = {};
    for (const [, reason, value] of text.matchAll(/^ci_job_telemetry_decisions_total\{reason="(\w+)"\} (\d+)$/gm)) {
      counts[reason] = Number(value);
    }
    return counts;
  }

  async function definitionsAgeSeconds(): Promise<number> {
    const text = await (await fetch(`${service.url}/metrics`)).text();
    const match = /^ci_job_telemetry_flag_definitions_age_seconds ([\d.e+-]+)$/m.exec(text);
    if (match === null) throw new Error('no ci_job_telemetry_flag_definitions_age_seconds in /metrics');
    return Number(match[1]);
  }

  const reasonsOf = (answers: Answer[]): Reasons => answers.reduce<Reasons>((counts, { reason }) => ({ ...counts, [reason]: (counts[reason] ?? 0) + 1 }), {});

  /** Decorates `jobs` and checks the decision counter moved by exactly the answers' reasons. */
  async function sweep(jobs: JobPayloadRequestBody[]): Promise<Answer[]> {
    const before = await decisionCounts();
    const answers = await decorateAll(jobs);
    const after = await decisionCounts();
    const moved: Reasons = {};
    for (const reason of new Set([...Object.keys(before), ...Object.keys(after)])) {
      const delta = (after[reason] ?? 0) - (before[reason] ?? 0);
      if (delta !== 0) moved[reason] = delta;
    }
    expect(moved).toEqual(reasonsOf(answers));
    return answers;
  }

  /**
   * What an operator does in Unleash (`change`), then polls the decorator with `probe` until an answer
   * `reflects` it: a bounded wait failing at `boundMs` after the admin API acknowledged the change.
   * Records and returns the time from that acknowledgement to the first answer reflecting it.
   */
  async function changeAndFollow(
    what: string,
    change: () => Promise<void>,
    probe: () => JobPayloadRequestBody[],
    reflects: (answer: Answer) => boolean,
    boundMs = FOLLOW_MS,
  ): Promise<number> {
    const calledAt = Date.now();
    await change();
    const changedAt = Date.now();
    const deadline = changedAt + boundMs;
    for (;;) {
      const answers = await decorateAll(probe());
      const first = Math.min(...answers.filter(reflects).map((answer) => answer.receivedAt));
      if (Number.isFinite(first)) {
        const ms = first - changedAt;
        followTimes.push({ change: what, ms, adminCallMs: changedAt - calledAt });
        process.stderr.write(
          `unleash-rollout: "${what}" in force ${ms} ms after the admin API acknowledged it (admin calls took ${changedAt - calledAt} ms)\n`,
        );
        if (first > deadline) throw new Error(`"${what}" took ${ms} ms, more than ${boundMs} ms`);
        return ms;
      }
      if (Date.now() > deadline) throw new Error(`"${what}" not in force within ${boundMs} ms`);
      await sleep(10);
    }
  }

  const percentile = (values: number[], p: number): number => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
  };
  const latency = (answers: Answer[]) => {
    const ms = answers.map((answer) => answer.ms);
    return `p50 ${percentile(ms, 50).toFixed(2)} ms, p99 ${percentile(ms, 99).toFixed(2)} ms (n=${ms.length}, one in flight)`;
  };

  beforeAll(async () => {
    const startedAt = Date.now();
    unleash = await startUnleashServer();
    secretsDir = mkdtempSync(join(tmpdir(), 'cjt-rollout-'));
    const traceKeyFile = join(secretsDir, 'trace_key');
    writeFileSync(traceKeyFile, TRACE_KEY.toString('base64'));
    // unleash-client keeps a backup of the definitions under the app name in the OS temp dir; a name of
    // our own keeps an earlier run's definitions out of this one.
    appName = `ci-job-telemetry-rollout-e2e-${process.pid}`;
    service = await startService({
      UNLEASH_URL: unleash.url,
      UNLEASH_API_TOKEN: unleash.clientToken,
      UNLEASH_REFRESH_INTERVAL_MS: String(REFRESH_MS),
      UNLEASH_APP_NAME: appName,
      TRACE_KEY_FILE: traceKeyFile,
    });
    pool = new Pool(service.url, { connections: IN_FLIGHT });
    process.stderr.write(`unleash-rollout: postgres + unleash + service started in ${Date.now() - startedAt} ms\n`);
  }, 120_000);

  afterAll(async () => {
    await pool?.close();
    await service?.stop();
    await unleash?.stop();
    if (secretsDir !== undefined) rmSync(secretsDir, { recursive: true, force: true });
    if (appName !== undefined) rmSync(join(tmpdir(), `unleash-backup-${appName}.json`), { force: true });
    if (followTimes.length > 0) {
      process.stderr.write(`unleash-rollout: admin change -> service acting (ms): ${followTimes.map(({ change, ms }) => `${change}=${ms}`).join(', ')}\n`);
    }
  }, 30_000);

  let enabledAt10: Set<number>;
  let enabledAt50: Set<number>;

  it('enables 10 % ± 2 of 2,000 projects once the operator creates the flag at 10 % (flexibleRollout, stickiness projectId)', async () => {
    // No flag in Unleash yet: nothing is enabled.
    expect(new Set((await sweep(PROJECT_IDS.slice(0, 100).map((id) => job(id)))).map((a) => a.reason))).toEqual(new Set(['flag_disabled']));

    await changeAndFollow(
      'create at 10 %',
      () => unleash.upsertFlexibleRollout(TELEMETRY, { rollout: 10, stickiness: 'projectId' }),
      () => PROJECT_IDS.slice(0, 100).map((id) => job(id)),
      (answer) => answer.reason === 'enabled',
    );
    const answers = await sweep(PROJECT_IDS.map((id) => job(id)));
    enabledAt10 = enabledProjects(answers, PROJECT_IDS);
    expect(enabledAt10.size / PROJECT_IDS.length).toBeGreaterThanOrEqual(0.08);
    expect(enabledAt10.size / PROJECT_IDS.length).toBeLessThanOrEqual(0.12);
    // Every other project is off because of the flag, and sticky: the same project, the same answer.
    expect(new Set(answers.filter((a) => a.reason !== 'enabled').map((a) => a.reason))).toEqual(new Set(['flag_disabled']));
    const again = PROJECT_IDS.slice(0, 200);
    expect(enabledProjects(await decorateAll(again.map((id) => job(id))), again)).toEqual(new Set(again.filter((id) => enabledAt10.has(id))));
  });

  it('follows a raise to 50 % within the refresh interval plus one second, keeping every project enabled at 10 %', async () => {
    const offAt10 = PROJECT_IDS.filter((id) => !enabledAt10.has(id)).slice(0, 40);
    await changeAndFollow(
      'raise 10 % -> 50 %',
      () => unleash.upsertFlexibleRollout(TELEMETRY, { rollout: 50, stickiness: 'projectId' }),
      () => offAt10.map((id) => job(id)),
      (answer) => answer.reason === 'enabled',
    );
    enabledAt50 = enabledProjects(await sweep(PROJECT_IDS.map((id) => job(id))), PROJECT_IDS);
    expect(enabledAt50.size / PROJECT_IDS.length).toBeGreaterThanOrEqual(0.47);
    expect(enabledAt50.size / PROJECT_IDS.length).toBeLessThanOrEqual(0.53);
    expect([...enabledAt10].filter((id) => !enabledAt50.has(id))).toEqual([]);
  });

  it('enables nothing within the same bound once the operator disables the toggle (kill switch)', async () => {
    const sentinels = [...enabledAt50].slice(0, 20);
    await changeAndFollow(
      'kill switch',
      () => unleash.setEnabled(TELEMETRY, false),
      () => sentinels.map((id) => job(id)),
      (answer) => answer.reason === 'flag_disabled',
    );
    const answers = await sweep(PROJECT_IDS.map((id) => job(id)));
    expect(reasonsOf(answers)).toEqual({ flag_disabled: PROJECT_IDS.length });
  });

  it('honours a Customer0 project list and a runnerType constraint', async () => {
    await changeAndFollow(
      'Customer0 list + runnerType constraint',
      () =>
        unleash.upsertFlexibleRollout(TELEMETRY, {
          rollout: 100,
          stickiness: 'projectId',
          constraints: [
            { contextName: 'projectId', operator: 'IN', values: CUSTOMER0.map(String) },
            { contextName: 'runnerType', operator: 'IN', values: ['project_type', 'group_type'] },
          ],
        }),
      () => [job(CUSTOMER0[0])],
      (answer) => answer.reason === 'enabled',
    );
    expect(enabledProjects(await sweep(PROJECT_IDS.map((id) => job(id))), PROJECT_IDS)).toEqual(new Set(CUSTOMER0));
    const byRunnerType = await sweep([
      job(CUSTOMER0[0], { runnerType: 'instance_type' }),
      job(CUSTOMER0[1], { runnerType: 'group_type' }),
      job(CUSTOMER0[2], { runnerType: 'instance_type' }),
    ]);
    expect(byRunnerType.map((answer) => answer.reason)).toEqual(['flag_disabled', 'enabled', 'flag_disabled']);
  });

  let sampledAt25: Set<number>;
  const thresholdOf = (tracestate: string | undefined): bigint => {
    const th = /^ot=th:([0-9a-f]{1,14})$/.exec(tracestate ?? '')?.[1];
    if (th === undefined) throw new Error(`no ot=th in tracestate ${tracestate}`);
    return BigInt(`0x${th.padEnd(14, '0')}`);
  };

  it('samples 25 % ± 3 of 2,000 pipelines set in Unleash, all jobs of a pipeline together, each consistent with its ot=th', async () => {
    await changeAndFollow(
      'sampling 25 % (telemetry for every project)',
      async () => {
        await unleash.upsertFlexibleRollout(TELEMETRY, { rollout: 100, stickiness: 'projectId' });
        await unleash.upsertFlexibleRollout(SAMPLING, { rollout: 25, stickiness: 'default' });
      },
      () => PIPELINE_IDS.slice(0, 20).map((pipeline) => job(1, { pipeline })),
      (answer) => answer.reason === 'not_sampled' || answer.tracestate === 'ot=th:c',
    );
    // Two jobs per pipeline: one in the root pipeline, one in a child pipeline of another project.
    const jobs = PIPELINE_IDS.flatMap((pipeline, index) => [
      job(PROJECT_IDS[index], { pipeline }),
      job(PROJECT_IDS[(index + 1000) % PROJECT_IDS.length], { pipeline: pipeline + 1_000_000, rootPipeline: pipeline }),
    ]);
    const answers = await sweep(jobs);
    sampledAt25 = new Set();
    PIPELINE_IDS.forEach((pipeline, index) => {
      const [root, child] = [answers[2 * index], answers[2 * index + 1]];
      expect(child.reason).toBe(root.reason);
      expect(['enabled', 'not_sampled']).toContain(root.reason);
      const traceId = traceIdFor(TRACE_KEY, pipeline);
      if (root.reason === 'enabled') {
        sampledAt25.add(pipeline);
        for (const answer of [root, child]) {
          expect(answer.traceId).toBe(traceId);
          // 25 % kept: rejection threshold 0.75 × 2^56, written the way OpenTelemetry's samplers read it.
          expect(answer.tracestate).toBe('ot=th:c');
          expect(answer.variables).toContainEqual(expect.objectContaining({ key: 'TRACESTATE', value: 'ot=th:c' }));
          expect(randomnessOf(traceId) >= thresholdOf(answer.tracestate)).toBe(true);
        }
      } else {
        expect(randomnessOf(traceId) >= thresholdOf('ot=th:c')).toBe(false);
      }
    });
    expect(sampledAt25.size / PIPELINE_IDS.length).toBeGreaterThanOrEqual(0.22);
    expect(sampledAt25.size / PIPELINE_IDS.length).toBeLessThanOrEqual(0.28);
  });

  it('applies a raised sampling rate to new pipelines, keeps every pipeline it sampled, and never splits one already running', async () => {
    // A pipeline's head decision is taken at its first pickup and kept (issue 35): the change is seen on new
    // pipelines, so each probe is a pipeline never picked up, sampled at 50 % and not at 25 %.
    let probe = 60_000;
    const nextNewlySampled = () => {
      for (;;) {
        const id = probe++;
        const traceId = traceIdFor(TRACE_KEY, id);
        if (isSampled(traceId, 50) && !isSampled(traceId, 25)) return id;
      }
    };
    await changeAndFollow(
      'sampling 25 % -> 50 %',
      () => unleash.upsertFlexibleRollout(SAMPLING, { rollout: 50, stickiness: 'default' }),
      () => [job(1, { pipeline: nextNewlySampled() })],
      (answer) => answer.tracestate === 'ot=th:8',
    );
    const fresh = PIPELINE_IDS.map((pipeline) => pipeline + 100_000);
    const answers = await sweep(fresh.map((pipeline, index) => job(PROJECT_IDS[index], { pipeline })));
    const sampledAt50 = new Set(fresh.filter((_, index) => answers[index].reason === 'enabled'));
    fresh.forEach((pipeline, index) => {
      const traceId = traceIdFor(TRACE_KEY, pipeline);
      expect(answers[index].reason === 'enabled').toBe(isSampled(traceId, 50));
      // Consistent probability sampling: whatever 25 % would take, 50 % takes too.
      if (isSampled(traceId, 25)) expect(sampledAt50.has(pipeline)).toBe(true);
      if (answers[index].reason === 'enabled') expect(answers[index].tracestate).toBe('ot=th:8');
    });
    expect(sampledAt50.size / fresh.length).toBeGreaterThan(0.45);
    expect(sampledAt50.size / fresh.length).toBeLessThan(0.55);
    // The pipelines picked up at 25 % keep their decision for their later jobs: sampled ones stay in, whole, with
    // their own threshold; the others stay out, so no pipeline is traced for some jobs and not for others.
    const running = await sweep(PIPELINE_IDS.map((pipeline, index) => job(PROJECT_IDS[index], { pipeline })));
    PIPELINE_IDS.forEach((pipeline, index) => {
      expect(running[index].reason === 'enabled').toBe(sampledAt25.has(pipeline));
      if (running[index].reason === 'enabled') expect(running[index].tracestate).toBe('ot=th:c');
    });
  });

  it('keeps answering with the last known definitions while Unleash is down, and follows the operator again when it is back', async () => {
    // Both flags matter here: half of the projects, then half of their pipelines.
    await changeAndFollow(
      'raise 100 % -> 50 % again',
      () => unleash.upsertFlexibleRollout(TELEMETRY, { rollout: 50, stickiness: 'projectId' }),
      () =>
        [...PROJECT_IDS]
          .filter((id) => !enabledAt50.has(id))
          .slice(0, 20)
          .map((id) => job(id, { pipeline: [...sampledAt25][0] })),
      (answer) => answer.reason === 'flag_disabled',
    );
    const jobs = () => PROJECT_IDS.map((id, index) => job(id, { pipeline: PIPELINE_IDS[index] }));
    const expected = (await sweep(jobs())).map((answer) => answer.reason);
    expect(new Set(expected)).toEqual(new Set(['enabled', 'flag_disabled', 'not_sampled']));
    const latencyBefore = await decorateAll(jobs().slice(0, 400), 1);

    await unleash.stopUnleash();
    const stoppedAt = Date.now();
    // Wait until unleash-client has actually failed a refresh, so what follows runs on a client that
    // knows Unleash is gone, not on one that has not tried yet.
    const refusedBefore = service.output().split('ECONNREFUSED').length;
    await waitFor('the service to log a failed Unleash refresh', async () =>
      service.output().split('ECONNREFUSED').length > refusedBefore ? true : undefined,
    );
    const ageEarly = await definitionsAgeSeconds();
    const during = await sweep(jobs());
    // Measured like the one before: one pickup at a time, right after a sweep.
    const latencyDuring = await decorateAll(jobs().slice(0, 400), 1);
    // Every answer a 200 (decorateAll throws otherwise) with the decisions of the last known definitions.
    expect(during.map((answer) => answer.reason)).toEqual(expected);
    expect(latencyDuring.map((answer) => answer.reason)).toEqual(expected.slice(0, 400));

    // The age metric says how old the definitions are: at least as old as the outage, and growing.
    const scrapedAt = Date.now();
    const ageLate = await definitionsAgeSeconds();
    expect(ageLate).toBeGreaterThan(ageEarly);
    expect(ageLate).toBeGreaterThanOrEqual((scrapedAt - stoppedAt) / 1000);
    process.stderr.write(
      `unleash-rollout: decorator latency before the outage ${latency(latencyBefore)}; during ${latency(latencyDuring)}; ` +
        `definitions age ${ageEarly.toFixed(1)} s -> ${ageLate.toFixed(1)} s over the outage\n`,
    );

    await unleash.startUnleash();
    const backAt = Date.now();
    await changeAndFollow(
      'kill switch right after Unleash is back',
      () => unleash.setEnabled(TELEMETRY, false),
      () =>
        PROJECT_IDS.filter((id) => enabledAt50.has(id))
          .slice(0, 20)
          .map((id) => job(id)),
      (answer) => answer.reason === 'flag_disabled',
      FOLLOW_AFTER_OUTAGE_MS,
    );
    expect(reasonsOf(await sweep(jobs()))).toEqual({ flag_disabled: PROJECT_IDS.length });
    // Refreshing again: the definitions are younger than the time since Unleash came back.
    const sinceBack = (Date.now() - backAt) / 1000;
    expect(await definitionsAgeSeconds()).toBeLessThan(sinceBack);

    // And the bound holds again once the client is back in its rhythm.
    await changeAndFollow(
      'switch back on after the outage',
      () => unleash.setEnabled(TELEMETRY, true),
      () =>
        PROJECT_IDS.filter((id) => enabledAt50.has(id))
          .slice(0, 20)
          .map((id) => job(id)),
      (answer) => answer.reason !== 'flag_disabled',
    );
  }, 120_000);
});
