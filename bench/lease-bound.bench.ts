/**
 * The lease bound (issue 21), measured on real replicas: built services (dist/main.js) sharing one Redis,
 * each exporting one job's 100-span protobuf exports through its own gateway until the job's quota refuses
 * them, the spans accepted counted from the answers (OTLP partial success) and at the collector.
 *
 *   1 replica   the quota exactly: its lease is the only one;
 *   3 replicas  never more than the quota while they live; what is stranded in the others' leases comes
 *               back when they fall idle, so the job then reaches its quota exactly;
 *   a death     3 replicas, one killed (SIGKILL) holding a lease: once the lease runs out (30 s) the
 *               others take its unspent part back; the job exceeds its quota by at most the spans the dead
 *               replica spent after its last store call (at most its block).
 *
 * Run (needs redis-server): npm run bench -- lease-bound   (--smoke: 1 and 3 replicas, small quota)
 */
import { jobPayloadRequest } from '../test/fixtures/job-payload';
import { pickUpJob } from '../test/helpers/ci-job';
import type { ServiceProcess } from '../test/helpers/service';
import { startWorld } from '../test/helpers/world';
import { runBench } from './lib/bench-env';
import { printTable } from './lib/table';
import { otlpTypes, traceExport } from './otlp-gateway.payload';

const SMOKE = process.argv.includes('--smoke');
const QUOTA = SMOKE ? 2_000 : 20_000;
const SPANS_PER_EXPORT = 100;
const types = otlpTypes();

interface Row {
  readonly scenario: string;
  readonly accepted: number;
  readonly atCollector: number;
  readonly note: string;
}

async function main(): Promise<void> {
  const limits = { SPANS_PER_JOB: String(QUOTA), SPANS_PER_SECOND_PER_JOB: '1000000', LOG_LEVEL: 'warn' };
  const world = await startWorld({ redis: true, sink: true, service: limits });
  const { sink, service: first } = world;
  const rows: Row[] = [];
  let nextJob = 8_800_000;
  try {
    // Replicas of one deployment: the first one's keys.
    const replicas: ServiceProcess[] = [first, await world.startService(limits), await world.startService(limits)];
    /** One job picked up, and its capability URL on each replica's gateway. */
    const job = async () => {
      const jobId = nextJob++;
      const decorated = await pickUpJob(first, jobPayloadRequest({ job: { id: jobId, root_pipeline_id: jobId } }));
      const url = (decorated.payload.features.tracing as { otel_endpoints: Array<{ url: string }> }).otel_endpoints[0].url;
      const path = new URL(url).pathname;
      return { jobId, body: traceExport(types, { traceId: decorated.telemetry.trace_id, spans: SPANS_PER_EXPORT, attributesPerSpan: 10 }), path };
    };
    /** Exports until the replica's answers say the quota is spent; answers the spans accepted. */
    const exportUntilRefused = async (replica: ServiceProcess, target: { body: Buffer; path: string }, stop = { at: Infinity }) => {
      let accepted = 0;
      for (let sent = 0; sent < stop.at; sent++) {
        const response = await fetch(`${replica.gatewayUrl}${target.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-protobuf' },
          body: target.body,
        });
        if (response.status !== 200) throw new Error(`export answered ${response.status}`);
        const answer = types.response.toObject(types.response.decode(Buffer.from(await response.arrayBuffer())), { longs: Number }) as {
          partialSuccess?: { rejectedSpans?: number };
        };
        const rejected = answer.partialSuccess?.rejectedSpans ?? 0;
        accepted += SPANS_PER_EXPORT - rejected;
        if (rejected === SPANS_PER_EXPORT) break;
      }
      return accepted;
    };
    const atCollector = (jobId: number) => sink.spans().filter((span) => span.resource['ci.job.id'] === jobId).length;

    const one = await job();
    const alone = await exportUntilRefused(first, one);
    rows.push({ scenario: '1 replica', accepted: alone, atCollector: atCollector(one.jobId), note: `quota ${QUOTA}` });

    const three = await job();
    const together = (await Promise.all(replicas.map((replica) => exportUntilRefused(replica, three)))).reduce((a, b) => a + b, 0);
    rows.push({
      scenario: '3 replicas, at once',
      accepted: together,
      atCollector: atCollector(three.jobId),
      note: 'never over the quota; the rest is in idle leases',
    });
    // Idle leases are handed back within 10 to 15 s; then one replica reaches the quota.
    await new Promise((resolve) => setTimeout(resolve, 16_000));
    const after = together + (await exportUntilRefused(replicas[1], three));
    rows.push({ scenario: '3 replicas, after idle hand-back', accepted: after, atCollector: atCollector(three.jobId), note: 'the quota exactly' });

    if (!SMOKE) {
      const death = await job();
      // The doomed replica exports a while, then dies holding its lease.
      const doomedAccepted = await exportUntilRefused(replicas[2], death, { at: 30 });
      await replicas[2].stop('SIGKILL');
      const before = (await Promise.all(replicas.slice(0, 2).map((replica) => exportUntilRefused(replica, death)))).reduce((a, b) => a + b, 0);
      // Its lease runs out after 30 s without a call: the next call of a live replica takes its unspent part back.
      await new Promise((resolve) => setTimeout(resolve, 32_000));
      const reclaimed = await exportUntilRefused(replicas[0], death);
      const total = doomedAccepted + before + reclaimed;
      rows.push({
        scenario: '3 replicas, one killed with a lease',
        accepted: total,
        atCollector: atCollector(death.jobId),
        note: `dead replica accepted ${doomedAccepted}; over the quota by ${Math.max(0, total - QUOTA)} (bound: its block, at most ${Math.floor(QUOTA / 8)})`,
      });
    }
    printTable([
      ['scenario', 'spans accepted', 'at the collector', 'what it shows'],
      ...rows.map((row) => [row.scenario, String(row.accepted), String(row.atCollector), row.note]),
    ]);
    if (rows[0].accepted !== QUOTA) throw new Error(`1 replica accepted ${rows[0].accepted}, not the quota ${QUOTA}`);
    if (rows[1].accepted > QUOTA) throw new Error(`3 replicas accepted ${rows[1].accepted}, over the quota ${QUOTA}`);
    if (SMOKE) console.log('smoke run: no verdict beyond the bounds');
  } finally {
    await world.stop();
  }
}

runBench(main);
