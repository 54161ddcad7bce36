import fc from 'fast-check';
import { makeWebhookSecret } from '../helpers/gitlab-webhooks';
import { makeSecretFiles } from '../helpers/internal-api';
import { RedisServer, startRedis } from '../helpers/redis';
import { startCollectorStandIn } from './collector-stand-in';
import { timelineOf, World, worldArbitrary } from './pipeline-world';
import { Bench, brokenInvariants, runWorld } from './world-driver';

/**
 * SPEC §10–§11 under generated GitLab worlds (issue 35): pipelines with child pipelines, parallel, retried, manual
 * and allowed-to-fail jobs; hooks late, out of order, redelivered, an old `running` hook replayed; exports split
 * and late; a sampling-rate change; the collector down, unavailable, slow or refusing an undecodable body; the
 * store paused or restarted; a replica crashed. After each run, once quiet, the collector's trace is checked:
 *
 * - a pipeline the policy keeps (or head sampling took) arrives whole: one root, no span whose parent is missing,
 *   every runner span the gateway acknowledged and every traced job's span, each span once (a versioned pipeline
 *   or bridge span once per version, a job span once and then once per version the critical path is written in,
 *   never an older version after a newer one);
 * - every span says why it was kept: a head-sampled pipeline's runner spans `head` with their own trace_state, every
 *   span of a pipeline kept by its outcome an outcome and `ot=th:0`; no span the placeholder of an unsettled slot;
 * - a pipeline the policy drops, and head sampling left out, sends nothing;
 * - the parking budget is back to zero and the outbox empty when nothing waits;
 * - decisions are never reversed except by a reopening hook (a dropped pipeline sends nothing, a kept one is whole).
 *
 * PROPERTY_RUNS sets the generated runs per store (CI default below, on a fixed seed; `npm run test:property:long`
 * for a long run on new worlds).
 * A failure prints fast-check's seed and path; the shrunk counterexamples found are kept in REGRESSIONS, replayed
 * first on every run.
 */

const RUNS = Number(process.env.PROPERTY_RUNS ?? 4);
/**
 * The CI form replays the same generated worlds each time (a fixed seed), so a red CI is reproducible and not a
 * roll of the dice; PROPERTY_RANDOM=1 (the long run) draws new ones, PROPERTY_SEED replays a given one.
 */
const SEED = process.env.PROPERTY_SEED !== undefined ? Number(process.env.PROPERTY_SEED) : process.env.PROPERTY_RANDOM === undefined ? 20261127 : undefined;
const RUN_TIMEOUT_MS = 60_000;

let nextRoot = 1000;

/** Shrunk counterexamples, replayed before the generated runs (see the report in docs of issue 35). */
const REGRESSIONS: Record<'memory' | 'redis', Array<{ name: string; world: World }>> = {
  memory: [
    {
      // Issue 35 item 2: a parked batch with one undecodable span makes the Collector refuse the kept pipeline's
      // whole delivery; 16 acknowledged runner spans never arrive (seed -792687530).
      name: "an undecodable span parked beside a failed pipeline's spans loses the acknowledged ones",
      world: {
        rootJobs: [
          { status: 'success', allowFailure: false, queueLong: false, autoRetried: true, split: false, lastBatchLate: false, hookDelay: 0, offset: 0 },
        ],
        children: [],
        slow: false,
        rootDelay: 1,
        reopen: { kind: 'retry', status: 'success' },
        staleRunningReplay: false,
        redeliver: [],
        rate: 0,
        rateChange: { to: 0, at: 0 },
        faults: [{ kind: 'malformed-export', at: 0, length: 6, replica: 0 }],
        routing: [0, 0, 0, 0],
        newerGitlab: false,
      },
    },
    {
      // Issue 35 item 7: job spans of a kept pipeline delivered twice (seed 1359465429, PROPERTY_WITHOUT=malformed-export).
      name: 'a kept pipeline delivers job spans twice when Job Hooks and the Pipeline Hook cross',
      world: {
        rootJobs: [
          { status: 'failed', allowFailure: false, queueLong: false, autoRetried: true, split: false, lastBatchLate: true, hookDelay: 0, offset: 2 },
          { status: 'success', allowFailure: true, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 1, offset: 0 },
          { status: 'success', allowFailure: true, queueLong: false, autoRetried: true, split: true, lastBatchLate: false, hookDelay: 2, offset: 0 },
        ],
        children: [
          {
            depend: false,
            afterRoot: false,
            jobs: [{ status: 'success', allowFailure: false, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 1, offset: 1 }],
            hookDelay: 1,
          },
        ],
        slow: false,
        rootDelay: 2,
        reopen: { kind: 'retry', status: 'failed' },
        staleRunningReplay: true,
        redeliver: [10],
        rate: 0,
        rateChange: { to: 50, at: 7e-323 },
        faults: [
          { kind: 'collector-slow', at: 0.9999999999999987, length: 2, replica: 0 },
          { kind: 'collector-down', at: 1.4689417398272512e-7, length: 1, replica: 0 },
          { kind: 'collector-unavailable', at: 1e-323, length: 4, replica: 0 },
        ],
        routing: [0, 0, 0, 0, 0, 0, 0, 0],
        newerGitlab: true,
      },
    },
  ],
  redis: [
    {
      // A child pipeline's terminal hook at the other replica within the pickup batch's linger: its record not yet
      // written, its pipeline span never emitted, its job's span an orphan (seed -1739658834, two replicas).
      name: "a child pipeline's hook reaching the other replica before its pickup's batch was written",
      world: {
        rootJobs: [{ status: 'success', allowFailure: true, queueLong: false, autoRetried: true, split: true, lastBatchLate: false, hookDelay: 0, offset: 0 }],
        children: [
          {
            depend: false,
            afterRoot: true,
            jobs: [
              { status: 'failed', allowFailure: true, queueLong: false, autoRetried: false, split: true, lastBatchLate: false, hookDelay: 1, offset: 0 },
              { status: 'success', allowFailure: false, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 0, offset: 0 },
            ],
            hookDelay: 1,
          },
          {
            depend: true,
            afterRoot: false,
            jobs: [{ status: 'success', allowFailure: false, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 3, offset: 3 }],
            hookDelay: 0,
          },
        ],
        slow: false,
        rootDelay: 0,
        reopen: { kind: 'manual', status: 'failed' },
        staleRunningReplay: false,
        redeliver: [23],
        rate: 50,
        rateChange: null,
        faults: [
          { kind: 'collector-unavailable', at: 8.832838169796155e-225, length: 6, replica: 0 },
          { kind: 'malformed-export', at: 7.73292284609222e-22, length: 4, replica: 0 },
        ],
        routing: [0, 0, 0, 0, 0, 1, 1],
        newerGitlab: false,
      },
    },
    {
      // Not a defect of the service: a runner's last batch (its job_execution) answered 503 while the store was paused
      // until the exporter gave up, so its stage spans, acknowledged before, have a parent nobody acknowledged. Kept so
      // the model keeps telling that apart from a parent the service lost.
      name: "a runner's last batch given up while the store was away",
      world: {
        rootJobs: [
          { status: 'failed', allowFailure: true, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 2, offset: 1 },
          { status: 'success', allowFailure: true, queueLong: false, autoRetried: true, split: true, lastBatchLate: true, hookDelay: 4, offset: 0 },
        ],
        children: [],
        slow: true,
        rootDelay: 4,
        reopen: { kind: 'manual', status: 'success' },
        staleRunningReplay: false,
        redeliver: [],
        rate: 0,
        rateChange: { to: 50, at: 1e-323 },
        faults: [{ kind: 'redis-pause', at: 0.6243818859054403, length: 6, replica: 1 }],
        routing: [0, 1, 0, 0, 1, 0, 0, 1],
        newerGitlab: true,
      },
    },
    {
      // A replica killed while it delivered a kept pipeline's spans (between the collector's 2xx and its
      // acknowledgement): the replica that claims them a lease later sends them again, and says so (counted in
      // ci_job_telemetry_outbox_redelivered_total); the model excuses exactly those copies (seed -1136092978, path 12,
      // on a loaded machine).
      name: 'a replica killed between the collector taking a delivery and its acknowledgement',
      world: {
        rootJobs: [
          {
            status: 'success',
            allowFailure: false,
            queueLong: true,
            autoRetried: false,
            split: false,
            lastBatchLate: false,
            hookDelay: 0,
            offset: 2,
          },
          {
            status: 'success',
            allowFailure: true,
            queueLong: true,
            autoRetried: false,
            split: false,
            lastBatchLate: false,
            hookDelay: 3,
            offset: 2,
          },
          {
            status: 'failed',
            allowFailure: false,
            queueLong: false,
            autoRetried: false,
            split: true,
            lastBatchLate: true,
            hookDelay: 1,
            offset: 0,
          },
        ],
        children: [],
        slow: true,
        rootDelay: 1,
        reopen: { kind: 'retry', status: 'success' },
        staleRunningReplay: false,
        redeliver: [],
        rate: 0,
        rateChange: null,
        faults: [
          { kind: 'crash', at: 0.9999999999999997, length: 3, replica: 1 },
          { kind: 'collector-slow', at: 9.413544514321644e-13, length: 5, replica: 0 },
          { kind: 'collector-slow', at: 9.081027845016593e-288, length: 5, replica: 1 },
        ],
        routing: [1, 0, 1, 0, 1, 1],
        newerGitlab: false,
      },
    },
    {
      // A job whose pickup found the store paused (answered degraded, not traced) failed and was retried: only its Job
      // Hook tells of the failure. Whether it kept the pipeline depended on whether the pickup's grant write, given up
      // on at STORE_TIMEOUT_MS, still landed when the store came back (seed -232313478, path 415, 1 run in 2-5).
      name: 'a failed attempt whose pickup found the store paused, told only by its Job Hook',
      world: {
        rootJobs: [
          { status: 'success', allowFailure: true, queueLong: true, autoRetried: false, split: false, lastBatchLate: false, hookDelay: 4, offset: 0 },
          { status: 'success', allowFailure: false, queueLong: false, autoRetried: true, split: true, lastBatchLate: false, hookDelay: 2, offset: 0 },
          { status: 'success', allowFailure: false, queueLong: false, autoRetried: false, split: true, lastBatchLate: true, hookDelay: 2, offset: 3 },
        ],
        children: [
          {
            depend: true,
            afterRoot: true,
            jobs: [
              { status: 'success', allowFailure: false, queueLong: false, autoRetried: false, split: true, lastBatchLate: false, hookDelay: 3, offset: 0 },
            ],
            hookDelay: 3,
          },
        ],
        slow: false,
        rootDelay: 2,
        reopen: { kind: 'retry', status: 'failed' },
        staleRunningReplay: true,
        redeliver: [26],
        rate: 50,
        rateChange: null,
        faults: [
          { kind: 'collector-down', at: 5.820918335193628e-36, length: 1, replica: 0 },
          { kind: 'redis-pause', at: 1.4028545107481414e-278, length: 3, replica: 1 },
        ],
        routing: [0, 1, 1, 0, 0, 0],
        newerGitlab: false,
      },
    },
  ],
};

/** Per store: worlds run, and those where the service sent outbox entries again after a replica died mid-delivery. */
const tally = new Map<string, { worlds: number; redelivering: number; entries: number }>();

async function check(bench: Bench, world: World): Promise<void> {
  const timeline = timelineOf(world, { root: nextRoot++ * 10 }, bench.replicas);
  const result = await runWorld(bench, world, timeline);
  const counts = tally.get(bench.redis === undefined ? 'memory' : 'redis') ?? { worlds: 0, redelivering: 0, entries: 0 };
  tally.set(bench.redis === undefined ? 'memory' : 'redis', {
    worlds: counts.worlds + 1,
    redelivering: counts.redelivering + (result.redelivered > 0 ? 1 : 0),
    entries: counts.entries + result.redelivered,
  });
  const broken = brokenInvariants(result);
  if (broken.length > 0) {
    throw new Error(
      [
        `broken: ${broken.join('; ')}`,
        `expected ${result.expected} (${result.reasons.join('; ')}), trace ${result.traceId}, ${result.received.length} spans received: ${result.received.map((span) => span.name).join(', ')}`,
        `the collector refused ${bench.collector.refused} requests it could not decode; the service sent ${result.redelivered} outbox entries again after a replica stopped mid-delivery`,
        'what the service was told, in order:',
        ...result.log.map((line) => `  ${line}`),
        'what the replicas said (warnings and errors):',
        ...result.said.slice(-60).map((line) => `  ${line}`),
      ].join('\n'),
    );
  }
}

describe.each([
  { store: 'memory' as const, replicas: 1 },
  { store: 'redis' as const, replicas: 2 },
])('outcome-based sampling keeps what its policy keeps, whole and once, in every order ($store store, $replicas replicas)', ({ store, replicas }) => {
  let bench: Bench;
  let redis: RedisServer | undefined;

  beforeAll(async () => {
    redis = store === 'redis' ? await startRedis({ persistent: true }) : undefined;
    bench = {
      collector: await startCollectorStandIn(),
      secrets: makeSecretFiles(),
      webhookSecret: makeWebhookSecret(),
      replicas,
      ...(redis === undefined ? {} : { redis }),
    };
  }, 30_000);
  afterAll(async () => {
    await bench?.collector.close();
    await redis?.stop();
    const counts = tally.get(store);
    // The figures of a run (the long form's go in the closing note): written past jest's console capture.
    if (counts !== undefined)
      process.stderr.write(
        `property suite (${store}): ${counts.worlds} worlds; in ${counts.redelivering} a replica died mid-delivery and the service sent ${counts.entries} outbox entries again\n`,
      );
  });

  for (const { name, world } of REGRESSIONS[store]) {
    it(`regression: ${name}`, () => check(bench, world), RUN_TIMEOUT_MS);
  }

  it(
    'generated worlds',
    async () => {
      await fc.assert(
        fc.asyncProperty(worldArbitrary({ replicas, storeFaults: store === 'redis' }), (world) => check(bench, world)),
        {
          numRuns: RUNS,
          // Each run costs seconds: shrink only when asked (PROPERTY_SHRINK=1), within a time limit.
          endOnFailure: process.env.PROPERTY_SHRINK === undefined,
          ...(process.env.PROPERTY_SHRINK === undefined ? {} : { interruptAfterTimeLimit: 240_000, markInterruptAsFailure: true }),
          ...(SEED === undefined ? {} : { seed: SEED }),
          // With PROPERTY_SEED, replays the one world fast-check printed beside it (its `path`).
          ...(SEED === undefined || process.env.PROPERTY_PATH === undefined ? {} : { path: process.env.PROPERTY_PATH }),
        },
      );
    },
    RUN_TIMEOUT_MS * (RUNS + 1) + (process.env.PROPERTY_SHRINK === undefined ? 0 : 300_000),
  );
});
